"""Carry ``ledger.context`` into worker threads.

:func:`ledger.context` lives in a :class:`contextvars.ContextVar`, and a new thread
starts with an empty context: ``ThreadPoolExecutor.map``, ``loop.run_in_executor`` and
libraries that fan out on their own pools (LiteLLM's ``batch_completion``) run the
call where no session or actor is set, and its row silently loses them. Two helpers::

    with ledger.context(session_id="s-42", actor_id="planner"):
        pool.map(ledger.bind(review), files)              # one function, bound here
    with ledger.ContextThreadPoolExecutor(8) as pool:     # every submit/map/run_in_executor
        with ledger.context(session_id="s-42"):
            pool.map(review, files)

Both carry only the ledger's own value, captured when the work is handed over (the
``bind`` call, the ``submit``), so one bound function can run in many threads at once;
``contextvars.copy_context().run`` carries every context variable but one copy can be
entered by only one thread at a time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from ledger.instrument.context import Context, _current

P = ParamSpec("P")
R = TypeVar("R")


def _bound(ctx: Context, fn: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(fn)
    def bound(*args: P.args, **kwargs: P.kwargs) -> R:
        token = _current.set(ctx)
        try:
            return fn(*args, **kwargs)
        finally:
            _current.reset(token)

    return bound


def bind(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn``, run under the ledger context in force now, wherever it is later called.

    The context is captured at this call, not when ``fn`` runs; a context set inside
    the worker still nests over it as usual.
    """
    return _bound(_current.get(), fn)


class ContextThreadPoolExecutor(ThreadPoolExecutor):
    """A :class:`~concurrent.futures.ThreadPoolExecutor` whose tasks run under the ledger
    context of the code that submitted them.

    ``map`` and ``loop.run_in_executor(pool, …)`` go through ``submit``, so both carry it;
    ``loop.set_default_executor(ContextThreadPoolExecutor())`` covers
    ``run_in_executor(None, …)`` too.
    """

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        return super().submit(_bound(_current.get(), fn), *args, **kwargs)


__all__ = ["ContextThreadPoolExecutor", "bind"]
