"""How hard a billing endpoint is asked before a run gives up (shared by every reconcile)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Final

import httpx


@dataclass(frozen=True, slots=True)
class Retry:
    """Attempts per request, with exponential backoff and jitter; ``Retry-After`` wins."""

    attempts: int = 5
    base_s: float = 0.5
    max_s: float = 30.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_s)
        backoff: float = min(self.max_s, self.base_s * 2**attempt)
        return backoff * random.uniform(0.5, 1.0)  # jitter: concurrent retries spread out


def retry_after(response: httpx.Response) -> float | None:
    """The ``Retry-After`` delay in seconds (delay-seconds form), if the response gave one."""
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


#: The retry every reconcile uses unless told otherwise.
DEFAULT_RETRY: Final = Retry()
