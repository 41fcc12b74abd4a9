"""Reconciliation: the ledger's estimates against what the bill says."""
