"""Precision: ordinary prose and typical tool output yield no opaque identifiers
(only paths and URLs, which are regenerable locators)."""

from __future__ import annotations

import pytest
from ident_helpers import found, tool_source

PROSE = """\
Long-running agents compact their history when it nears the context window. A model
rewrites old turns into a summary, or old tool results are cut or masked. Summaries are
tuned for retention and routinely drop the one thing a later step needs verbatim. Three
to forty steps later the agent invents a plausible replacement and the failure surfaces
far from its cause. We met on 2024-05-01 at 10:30 and again on 05/12/2024; version 1.2.3
of the library (v2 of the API, release 3.11.7) fixed it in 2023. The server listens on
port 8080 and answers in 12ms for 99.9% of the 1500000 requests. Read and/or write the
report, see the TCP/IP notes, and keep the I/O path small. The job id, the session token
and the request id are logged. Set password and token in the vault, not here. Commit
early, commit often; our HEAD of engineering reviews every merge request. A review of
the deployment/release process is due. The quick brown fox jumps over the lazy dog; it
was deadbeef-level silly. Use the default_value or the user_id column. Customer order
1234567 shipped. Placeholders like 00000000-0000-0000-0000-000000000000,
123e4567-e89b-12d3-a456-426614174000, AKIAIOSFODNN7EXAMPLE and i-1234567890abcdef0 come
from the docs. The ratio is 3/4 and the date 12/05. Call handle_request() then
get_token(); the key is in the config. Token budget: 12,000; model gpt-4o-2024-08-06.
"""

PYTEST = """\
============================= test session starts ==============================
platform linux -- Python 3.11.7, pytest-8.2.0, pluggy-1.5.0
rootdir: /work/main
configfile: pyproject.toml
plugins: hypothesis-6.100.1, asyncio-0.23.6, anyio-4.3.0
collected 214 items

tests/core/test_diff.py ........................................         [ 18%]
tests/core/test_lineage.py ....F.......                                  [ 24%]
tests/gate/test_api.py::test_conversations PASSED                        [ 25%]

=================================== FAILURES ===================================
________________________________ test_fork_head ________________________________

    def test_fork_head() -> None:
>       assert lineage.parent_of(b) == a
E       AssertionError: assert None == Lineage(id=3, head=7)

tests/core/test_lineage.py:88: AssertionError
=========================== short test summary info ============================
FAILED tests/core/test_lineage.py::test_fork_head - AssertionError: assert None
================== 1 failed, 213 passed, 2 warnings in 4.21s ===================
"""

PIP = """\
Collecting requests==2.31.0
  Downloading requests-2.31.0-py3-none-any.whl (62 kB)
     ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 62.6/62.6 kB 3.1 MB/s eta 0:00:00
Requirement already satisfied: idna<4,>=2.5 in /usr/lib/python3/dist-packages (from requests==2.31.0) (3.6)
Requirement already satisfied: certifi>=2017.4.17 in /usr/local/lib/python3.11/site-packages (2024.2.2)
Collecting charset-normalizer<4,>=2
  Using cached charset_normalizer-3.3.2-cp311-cp311-manylinux_2_17_x86_64.whl (140 kB)
Installing collected packages: charset-normalizer, requests
Successfully installed charset-normalizer-3.3.2 requests-2.31.0
WARNING: Running pip as the 'root' user can result in broken permissions.
[notice] A new release of pip is available: 23.3.1 -> 24.0
[notice] To update, run: pip install --upgrade pip
"""

NPM_AND_LOGS = """\
added 214 packages, and audited 215 packages in 3s
48 packages are looking for funding
found 0 vulnerabilities
2024-05-01T12:00:01.123Z INFO  server started on 0.0.0.0:3000 in 120ms
2024-05-01T12:00:02.456Z WARN  slow query took 1500ms (threshold 1000ms)
2024-05-01 12:00:03,789 DEBUG worker-3 processed 42 items, 0 errors
Compiling proxy v0.1.0 (/work/main/proxy)
    Finished dev [unoptimized + debuginfo] target(s) in 2.31s
"""

LOCATORS = {"path", "url"}


@pytest.mark.parametrize("name,text", [("prose", PROSE), ("pytest", PYTEST), ("pip", PIP), ("npm_and_logs", NPM_AND_LOGS)])
def test_no_opaque_identifiers(name: str, text: str) -> None:
    bad = [(i.kind, i.value, i.detector) for i in found(text) if i.kind not in LOCATORS]
    assert not bad, f"{name}: false positives {bad}"


@pytest.mark.parametrize("command", [None, "pytest -q", "pip install requests", "git log"])
def test_no_opaque_identifiers_whatever_the_producing_command(command: str | None) -> None:
    src = tool_source(command)
    for text in (PROSE, PYTEST, PIP):
        bad = [(i.kind, i.value) for i in found(text, src) if i.kind not in LOCATORS]
        assert not bad, (command, bad)


def test_locators_in_tool_output_are_found() -> None:
    vals = {i.value for i in found(PYTEST)}
    assert "tests/core/test_lineage.py" in vals
    assert "/work/main" in vals
