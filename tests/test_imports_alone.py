"""Every module of the package imports on its own, first: no import cycle that only works
because some entry point happens to import the modules in the right order (one did —
``import proxy.dashboard.access`` failed until ``proxy.server`` stopped importing its app
at once). One subprocess (nothing is imported in the test process); before each module,
every ``proxy`` module is dropped from ``sys.modules``, so each import starts from none of
the package's (third-party modules stay loaded: litellm is imported once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import importlib, json, pkgutil, sys
import proxy
assert proxy.__file__.startswith(sys.argv[1]), proxy.__file__  # this checkout, not an installed copy
names = sorted(m.name for m in pkgutil.walk_packages(proxy.__path__, "proxy.") if m.name != "proxy.__main__")
failed = []
for name in names:
    for k in [k for k in sys.modules if k == "proxy" or k.startswith("proxy.")]:
        del sys.modules[k]
    try:
        importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 - every failure is the finding
        failed.append(f"{name}: {e!r}")
print(json.dumps({"modules": names, "failed": failed}))
"""


def test_every_module_imports_on_its_own() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), LITELLM_LOCAL_MODEL_COST_MAP="True")
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT / "proxy")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    report = json.loads(out.strip().splitlines()[-1])
    assert len(report["modules"]) > 150 and "proxy.dashboard.access" in report["modules"]
    assert report["failed"] == []
