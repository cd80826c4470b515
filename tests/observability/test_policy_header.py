"""A client header cannot switch its own protection off: under ``default`` and
``strict``, ``x-compaction-gate-policy: audit`` changes nothing; ``strict`` tightens."""

from __future__ import annotations

from proxy.demo_story import run_story

from .conftest import GateFactory

AUDIT = {"x-compaction-gate-policy": "audit"}


async def test_audit_header_does_not_weaken_default(gate: GateFactory) -> None:
    url = await gate("default")
    story = await run_story(url + "/v1", compaction="truncate", extra_headers=AUDIT)
    assert story.action_of("next action") == "reinject" and story.rollback_correct


async def test_audit_header_does_not_weaken_strict(gate: GateFactory) -> None:
    url = await gate("strict")
    story = await run_story(url + "/v1", compaction="truncate", extra_headers=AUDIT)
    assert story.action_of("next action") == "reject" and story.final_status == 400


async def test_strict_header_tightens_default(gate: GateFactory) -> None:
    url = await gate("default")
    story = await run_story(
        url + "/v1", compaction="truncate", extra_headers={"x-compaction-gate-policy": "strict"}
    )
    assert story.action_of("next action") == "reject" and story.final_status == 400
