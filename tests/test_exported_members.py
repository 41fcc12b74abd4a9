"""The façade exports exactly what it lists (ruff's RUF022 keeps the list sorted)."""

import ledger


def test_every_listed_name_resolves_once() -> None:
    assert len(set(ledger.__all__)) == len(ledger.__all__)
    for name in ledger.__all__:
        assert getattr(ledger, name) is not None, name


def test_public_names_are_listed() -> None:
    public = {n for n in vars(ledger) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(ledger, n)).__name__ == "module"}
    assert public - modules == set(ledger.__all__)
