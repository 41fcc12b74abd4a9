"""ledger: a cost ledger and token-usage analytics for LLM agents."""

from ledger.events import UsageEvent
from ledger.store.ledger import Ledger, default_ledger

__all__ = ["Ledger", "UsageEvent", "default_ledger"]
