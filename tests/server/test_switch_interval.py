"""A served process hands the GIL to its event loop within 1 ms (issue 16): worker
threads running Python for long stretches would otherwise hold every wake-up of the loop
for up to CPython's default 5 ms."""

from __future__ import annotations

import sys

from aiohttp import web

from proxy.server.runner import SWITCH_INTERVAL, start_server


async def test_serving_shortens_the_gil_switch_interval_and_never_lengthens_it() -> None:
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        server = await start_server(web.Application(), "127.0.0.1", 0)
        try:
            assert sys.getswitchinterval() <= SWITCH_INTERVAL < 0.005
        finally:
            await server.stop()
        sys.setswitchinterval(SWITCH_INTERVAL / 2)
        server = await start_server(web.Application(), "127.0.0.1", 0)
        try:
            assert sys.getswitchinterval() == SWITCH_INTERVAL / 2
        finally:
            await server.stop()
    finally:
        sys.setswitchinterval(before)
