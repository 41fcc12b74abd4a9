"""Wire formats of the simulated services: request parsing and response rendering.

Written from the providers' documentation and real captures
(``/work/shared/payloads``), independently of ``ledger.providers`` (the
client's parsing): the two sides must never share code, or a bug on one side
would hide the same bug on the other.
"""
