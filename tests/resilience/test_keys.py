from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ledger.resilience.keys import cache_key, normalise_locale, normalise_text


def test_canonically_equivalent_text_shares_a_key() -> None:
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    assert composed != decomposed
    assert cache_key(composed, "fr", "m") == cache_key(decomposed, "fr", "m")


def test_line_endings_and_invisible_edges_do_not_split_the_cache() -> None:
    base = cache_key("Explain sticky routing.\nBriefly.", "en", "gpt-4o-mini")
    assert cache_key("  Explain sticky routing.  \r\nBriefly.\n\n", "en", "gpt-4o-mini") == base
    assert cache_key("Explain sticky routing.\rBriefly.\t", "en", "gpt-4o-mini") == base


def test_interior_whitespace_and_case_are_kept_because_they_carry_meaning() -> None:
    code = "def f():\n    return 1"
    assert cache_key(code, None, "m") != cache_key("def f():\n return 1", None, "m")
    assert cache_key("Is the US large?", None, "m") != cache_key("is the us large?", None, "m")


def test_locale_case_and_separator_are_canonical() -> None:
    assert normalise_locale("pt_br") == normalise_locale("PT-BR") == "pt-BR"
    assert normalise_locale("zh_hant_tw") == "zh-Hant-TW"
    assert normalise_locale("es-419") == "es-419"
    assert normalise_locale(None) == normalise_locale("  ") == ""
    assert cache_key("hi", "pt_BR", "m") == cache_key("hi", "pt-br", "m")


def test_a_different_locale_or_model_is_a_different_key() -> None:
    key = cache_key("Hello", "en", "gpt-4o-mini")
    assert cache_key("Hello", "pt-BR", "gpt-4o-mini") != key
    assert cache_key("Hello", "en", "claude-haiku-4-5-20251001") != key
    assert cache_key("Hello", None, "gpt-4o-mini") != key


def test_fields_cannot_bleed_into_each_other() -> None:
    assert cache_key("ab", "c", "d") != cache_key("a", "bc", "d")


def test_the_key_holds_no_prompt_text() -> None:
    key = cache_key("my secret plan", "en", "m")
    assert len(key) == 64 and "secret" not in key


@given(st.text())
def test_normalising_twice_changes_nothing(text: str) -> None:
    once = normalise_text(text)
    assert normalise_text(once) == once
