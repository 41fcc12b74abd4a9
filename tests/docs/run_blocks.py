"""Child process for the README tests: runs Python blocks in order in one namespace.

Usage: python run_blocks.py BLOCKS.json

BLOCKS.json is a list of {"line": N, "code": "..."}; each block runs as the README
shows it, after the ones above it (a reader runs them one after another, in one
session), so a name a block uses must be defined by it or by a block above. A block
that fails prints ``README.md:N: <error>`` and the child exits 1.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path


def main() -> None:
    blocks = json.loads(Path(sys.argv[1]).read_text())
    namespace: dict[str, object] = {"__name__": "__readme__"}
    for block in blocks:
        try:
            exec(compile(block["code"], f"README.md:{block['line']}", "exec"), namespace)
        except BaseException:
            traceback.print_exc()
            print(f"README.md:{block['line']}: this block failed", file=sys.stderr)
            sys.exit(1)
        print(f"README.md:{block['line']}: ok", flush=True)


if __name__ == "__main__":
    main()
