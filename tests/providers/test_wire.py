"""``UsageBuilder.build`` takes the usual report (nothing to clamp) without the
one-count-at-a-time checks: it must give the same usage and the same problems as
those checks for any counts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.events import MAX_TOKENS
from ledger.providers.wire import UsageBuilder

COUNT = st.one_of(
    st.none(),
    st.integers(0, 50),
    st.sampled_from([-1, 0, MAX_TOKENS, MAX_TOKENS + 1, -(10**12), 10**15]),
)
NAMES = (
    "input_tokens",
    "output_tokens",
    "cache_read",
    "cache_write",
    "reasoning",
    "cache_write_1h",
    "input_audio",
    "cache_audio_read",
    "output_audio",
)


@settings(max_examples=500, deadline=None)
@given(
    st.fixed_dictionaries(dict.fromkeys(NAMES, COUNT)),
    st.lists(st.tuples(st.sampled_from(["input", "output"]), st.just("audio"), COUNT), max_size=3),
)
def test_build_is_the_clamped_build(
    counts: dict[str, int | None], modalities: list[tuple[str, str, int | None]]
) -> None:
    fast: list[str] = []
    slow: list[str] = []
    built = UsageBuilder(fast).build(**counts, modalities=modalities)
    checked = UsageBuilder(slow).clamped(**counts, modalities=modalities)
    assert built == checked
    assert fast == slow


def test_a_usual_report_is_kept_as_is() -> None:
    problems: list[str] = []
    usage = UsageBuilder(problems).build(
        input_tokens=78, output_tokens=9, cache_read=5, input_audio=2, cache_audio_read=3
    )
    assert (usage.input_tokens, usage.cache_read_tokens, usage.input_audio_tokens) == (78, 5, 3)
    assert problems == []
