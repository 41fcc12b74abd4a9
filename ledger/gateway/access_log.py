"""The gateway's access log: one JSON line per call on ``ledger.gateway.access``.

It says who (the gateway key's *name*, the client address), what (method, path,
public model), what happened (status, call id, attempts, answering provider) and
how long it took. It never holds a body, a header value or a key: the request's
text and the secrets stay out of logs, as they stay out of the ledger.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
import time
from collections.abc import MutableMapping
from typing import Any, Final

from ledger.gateway.config import GatewayKey
from ledger.gateway.relay import Outcome

access_log = logging.getLogger("ledger.gateway.access")
#: Set by ``ledger gateway --workers N`` so each worker process configures the log too.
ACCESS_LOG_ENV: Final = "LEDGER_GATEWAY_ACCESS_LOG"


def configure_access_log() -> None:
    """JSON access lines on stderr (one per call), unless logging was configured already."""
    if not access_log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        access_log.addHandler(handler)
        access_log.setLevel(logging.INFO)
        access_log.propagate = False


def log_access(
    scope: MutableMapping[str, Any],
    started: dt.datetime,
    t0: float,
    outcome: Outcome,
    key: GatewayKey | None,
    model: str | None,
) -> None:
    """One JSON line per call: never a body, a header value or a key, only the key's name."""
    if not access_log.isEnabledFor(logging.INFO):
        return
    client = scope.get("client")
    access_log.info(
        "%s",
        json.dumps(
            {
                "at": started.isoformat(),
                "method": scope.get("method"),
                "path": scope.get("path"),
                "status": outcome.status,
                "ms": round((time.perf_counter() - t0) * 1000, 2),
                "key": key.name if key is not None else None,
                "client": client[0] if client else None,
                "model": model,
                "call_id": outcome.call_id,
                "attempts": outcome.attempts,
                "provider": outcome.provider,
            },
            ensure_ascii=True,
        ),
    )
