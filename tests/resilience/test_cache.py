from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from ledger.resilience.cache import ResponseCache, is_final
from ledger.resilience.keys import cache_key


@dataclass
class Answer:
    text: str
    provider: str = "openai"
    paused: bool = False


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Provider:
    """Counts calls; ``answer`` decides what each call returns."""

    def __init__(self, delay_s: float = 0.0, fail: bool = False, paused: bool = False) -> None:
        self.calls = 0
        self.delay_s, self.fail, self.paused = delay_s, fail, paused
        self._lock = threading.Lock()

    def __call__(self) -> Answer:
        with self._lock:
            self.calls += 1
            n = self.calls
        time.sleep(self.delay_s)
        if self.fail:
            raise RuntimeError("all providers failed")
        return Answer(f"answer {n}", paused=self.paused)

    async def acall(self) -> Answer:
        self.calls += 1
        n = self.calls
        await asyncio.sleep(self.delay_s)
        if self.fail:
            raise RuntimeError("all providers failed")
        return Answer(f"answer {n}", paused=self.paused)


KEY = cache_key("What is sticky routing?", "en", "gpt-4o-mini")


def test_identical_input_is_a_hit() -> None:
    cache: ResponseCache[Answer] = ResponseCache()
    provider = Provider()
    first = cache.get_or_compute(KEY, provider)
    again = cache.get_or_compute(
        cache_key(" What is sticky routing?\n", "EN", "gpt-4o-mini"), provider
    )
    assert (first.hit, again.hit) == (False, True)
    assert again.value == first.value and provider.calls == 1


def test_a_different_locale_or_model_is_a_miss() -> None:
    cache: ResponseCache[Answer] = ResponseCache()
    provider = Provider()
    cache.get_or_compute(KEY, provider)
    other_locale = cache.get_or_compute(
        cache_key("What is sticky routing?", "pt-BR", "gpt-4o-mini"), provider
    )
    other_model = cache.get_or_compute(
        cache_key("What is sticky routing?", "en", "claude"), provider
    )
    assert not other_locale.hit and not other_model.hit
    assert provider.calls == 3


def test_a_paused_turn_is_never_stored() -> None:
    cache: ResponseCache[Answer] = ResponseCache()
    provider = Provider(paused=True)
    assert not cache.get_or_compute(KEY, provider).hit
    assert not cache.get_or_compute(KEY, provider).hit
    assert provider.calls == 2 and len(cache) == 0
    assert cache.put(KEY, Answer("draft", paused=True)) is False


def test_a_paused_request_bypasses_a_cached_answer() -> None:
    cache: ResponseCache[Answer] = ResponseCache()
    cache.put(KEY, Answer("final"))
    served = cache.get_or_compute(KEY, lambda: Answer("resumed draft", paused=True), bypass=True)
    assert served == (Answer("resumed draft", paused=True), False)
    assert cache.get(KEY) == Answer("final")


def test_errors_are_not_cached() -> None:
    cache: ResponseCache[Answer] = ResponseCache()
    with pytest.raises(RuntimeError):
        cache.get_or_compute(KEY, Provider(fail=True))
    assert cache.get(KEY) is None
    assert not cache.get_or_compute(KEY, Provider()).hit


def test_partial_streams_and_iterators_are_not_final() -> None:
    def stream() -> Iterator[str]:
        yield "tok"

    assert not is_final(stream())
    assert not is_final({"content": "half", "partial": True})
    assert not is_final({"content": "x", "complete": False})
    assert not is_final(ValueError("boom"))
    assert is_final({"content": "done"}) and is_final(Answer("done"))


def test_entries_expire_after_the_ttl() -> None:
    clock = Clock()
    cache: ResponseCache[Answer] = ResponseCache(ttl_s=60, clock=clock)
    cache.put(KEY, Answer("a"))
    clock.now = 59.9
    assert cache.get(KEY) == Answer("a")
    clock.now = 60.0
    assert cache.get(KEY) is None
    assert len(cache) == 0


def test_least_recently_used_is_evicted_first_by_entries() -> None:
    cache: ResponseCache[str] = ResponseCache(max_entries=3)
    for k in "abc":
        cache.put(k, k)
    cache.get("a")
    cache.put("d", "d")
    assert [cache.get(k) for k in "abcd"] == ["a", None, "c", "d"]


def test_bytes_bound_evicts_and_refuses_oversized_values() -> None:
    cache: ResponseCache[str] = ResponseCache(max_bytes=1000, size_of=len)
    for i in range(5):
        cache.put(str(i), "x" * 300)
    assert len(cache) == 3 and cache.size_bytes == 900
    assert cache.get("0") is None and cache.get("4") is not None
    cache.put("huge", "y" * 1001)
    assert cache.get("huge") is None and len(cache) == 3


def test_concurrent_identical_threads_make_one_call() -> None:
    cache: ResponseCache[Answer] = ResponseCache()
    provider = Provider(delay_s=0.2)
    barrier = threading.Barrier(20)
    results = []

    def visitor() -> None:
        barrier.wait()
        results.append(cache.get_or_compute(KEY, provider))

    threads = [threading.Thread(target=visitor) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert provider.calls == 1
    assert {r.value.text for r in results} == {"answer 1"}
    assert sum(not r.hit for r in results) == 1


def test_when_the_single_call_fails_every_waiter_gets_the_error() -> None:
    cache: ResponseCache[Answer] = ResponseCache()
    provider = Provider(delay_s=0.2, fail=True)
    barrier = threading.Barrier(10)
    errors: list[BaseException] = []

    def visitor() -> None:
        barrier.wait()
        try:
            cache.get_or_compute(KEY, provider)
        except RuntimeError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=visitor) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert provider.calls == 1 and len(errors) == 10
    assert cache.get(KEY) is None


async def test_concurrent_identical_coroutines_make_one_call() -> None:
    cache: ResponseCache[Answer] = ResponseCache()
    provider = Provider(delay_s=0.05)
    results = await asyncio.gather(*(cache.aget_or_compute(KEY, provider.acall) for _ in range(50)))
    assert provider.calls == 1
    assert {r.value.text for r in results} == {"answer 1"}
    assert sum(r.hit for r in results) == 49


async def test_a_failed_async_call_reaches_every_waiter_and_caches_nothing() -> None:
    cache: ResponseCache[Answer] = ResponseCache()
    provider = Provider(delay_s=0.05, fail=True)
    results = await asyncio.gather(
        *(cache.aget_or_compute(KEY, provider.acall) for _ in range(10)), return_exceptions=True
    )
    assert provider.calls == 1
    assert all(isinstance(r, RuntimeError) for r in results)
    assert await cache.aget(KEY) is None


async def test_a_paused_answer_is_not_shared_with_concurrent_waiters() -> None:
    cache: ResponseCache[Answer] = ResponseCache()
    provider = Provider(delay_s=0.05, paused=True)
    results = await asyncio.gather(*(cache.aget_or_compute(KEY, provider.acall) for _ in range(5)))
    assert provider.calls == 5
    assert not any(r.hit for r in results)
    assert len({r.value.text for r in results}) == 5


async def test_a_cancelled_waiter_does_not_cancel_the_call_for_the_others() -> None:
    cache: ResponseCache[Answer] = ResponseCache()
    provider = Provider(delay_s=0.1)
    first = asyncio.ensure_future(cache.aget_or_compute(KEY, provider.acall))
    await asyncio.sleep(0.01)
    second = asyncio.ensure_future(cache.aget_or_compute(KEY, provider.acall))
    await asyncio.sleep(0.01)
    first.cancel()
    served = await second
    assert served.value.text == "answer 1" and served.hit
    assert provider.calls == 1 and first.cancelled()
