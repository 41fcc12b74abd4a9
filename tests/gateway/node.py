"""A Node package installed for a test, once, under ``.cache/`` (kept between runs).

Without ``node`` and ``npm`` the test skips with the reason, except under ``CI=true``
where it must run (``.ci/run`` sets it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IN_CI = os.environ.get("CI", "").lower() == "true"


def node_script(folder: str, package: str, spec: str, script: Path) -> Path:
    """``script`` copied into ``.cache/<folder>/`` beside npm ``spec`` (module ``package``),
    installed there first if it is not yet; the copy's path, to run with ``node``."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        if IN_CI:
            pytest.fail("CI=true but node/npm are not installed: the Node client test must run")
        pytest.skip(f"node and npm are needed for the {package} npm package test")
    where = ROOT / ".cache" / folder
    if not (where / "node_modules" / package).is_dir():
        where.mkdir(parents=True, exist_ok=True)
        (where / "package.json").write_text('{"private": true, "type": "module"}\n')
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--silent", spec],
            cwd=where,
            check=True,
            capture_output=True,
            timeout=300,
        )
    copy = where / "client.mjs"
    shutil.copyfile(script, copy)
    return copy
