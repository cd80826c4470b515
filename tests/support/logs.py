"""Reading the proxy's JSON log lines captured by the ``json_log`` fixture."""

from __future__ import annotations

import io
import json
import time
from typing import Any


def lines(buf: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]


def access(buf: io.StringIO, expect: int | None = None) -> list[dict[str, Any]]:
    """Access records; with ``expect``, wait briefly for lines still being written
    (the line is emitted after the last byte reached the client)."""
    deadline = time.monotonic() + 3.0
    while True:
        records = [r for r in lines(buf) if r["logger"] == "compaction_gate.access"]
        if expect is None or len(records) >= expect or time.monotonic() > deadline:
            return records
        time.sleep(0.01)
