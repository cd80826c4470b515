"""The dashboard rendered in real headless Chromium shows a scripted destructive compaction.

Needs Debian's ``chromium`` at /usr/bin/chromium (installed by .ci/run) and the
``playwright`` Python package (its bundled browsers are never downloaded). Set
``UPDATE_SCREENSHOTS=1`` to refresh docs/dashboard.png.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from proxy.demo_story import DEMO_REVISION, run_story

from .conftest import GateFactory

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "dashboard.png"

pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is absent (apt-get install chromium)"
)


async def test_dashboard_shows_conversation_chart_and_dropped_binding(
    gate: GateFactory, tmp_path: Path
) -> None:
    playwright_api = pytest.importorskip("playwright.async_api", reason="playwright is not installed")
    url = await gate("default")
    # a benign, gated compaction in one conversation, a destructive truncation in another
    await run_story(url + "/v1", service="billing", revision="7c9d0e1f2a3b")
    story = await run_story(url + "/v1", compaction="truncate")
    assert story.action_of("next action") == "reinject" and story.rollback_correct
    cid = story.conversation

    external: list[str] = []
    problems: list[str] = []
    async with playwright_api.async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 1000},
        )
        try:
            page = context.pages[0] if context.pages else await context.new_page()

            async def guard(route: object) -> None:
                request_url = route.request.url  # type: ignore[attr-defined]
                if urlsplit(request_url).hostname not in ("127.0.0.1", "localhost"):
                    external.append(request_url)
                    await route.abort()  # type: ignore[attr-defined]
                else:
                    await route.continue_()  # type: ignore[attr-defined]

            await page.route("**/*", guard)
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))

            await page.goto(f"{url}/gate/#c={cid}")
            await page.wait_for_selector("body[data-ready='1']", timeout=15_000)
            await page.wait_for_selector(".diff-col.reinjected li code", timeout=15_000)

            # the conversations, the flagged one among them
            rows = page.locator("#conversations tbody tr")
            assert await rows.count() == 2
            flagged = page.locator(f"#conversations tbody tr.flagged[data-id='{cid}']")
            assert await flagged.count() == 1
            assert "destructive compactions" in await page.inner_text("#summary")
            assert await page.inner_text("#detail-id") == cid

            # the chart: one point per request, the compaction marked as destructive
            points = await page.locator("#chart svg circle.tokens-dot").count()
            assert points == len(story.steps)
            marker = page.locator("#chart svg line.compaction.destructive")
            assert await marker.count() == 1
            assert await marker.get_attribute("data-kind") == "truncate"

            # the event: dropped and re-injected side by side
            card = page.locator(".event.destructive")
            assert await card.count() == 1
            dropped = await card.locator(".diff-col.dropped li.required code.value").all_inner_texts()
            reinjected = await card.locator(".diff-col.reinjected code.value").all_inner_texts()
            assert DEMO_REVISION in dropped
            assert reinjected == [DEMO_REVISION]
            assert "action: reinject" in await card.inner_text()

            shot = tmp_path / "dashboard.png"
            await page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            if os.environ.get("UPDATE_SCREENSHOTS") == "1":
                DOCS_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(shot, DOCS_SCREENSHOT)
        finally:
            await context.close()
    assert not external, external
    assert not problems, problems
