"""The errors an app receives from the web client in a browser, one kind per failure.

A page of headless Chromium (``clients/web/harness/error-kinds.html``) runs Session steps
against real services while the test breaks things around it, and each failure must
reach the app as the kind it can act on:

- the browser offline (Playwright's network emulation: ``navigator.onLine`` false, every
  request failing) until the time budget ends: OfflineError; back online while a session
  waits: it carries on at once, at the ``online`` event, not at its next backoff;
- the shuffler stopped: ServiceUnreachableError, after the time budget rather than after a
  count of tries;
- a 503 with Retry-After, then the real answer: no error, the Retry-After waited out;
- a refused submission: SubmissionRefusedError (a RefusedError) carrying the shuffler's
  problem document;
- a tampered campaign view: VerificationError naming the failed check.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from segshuffle.testing.web_demo import WebCampaign, chromium_page, web_campaign

from .browser_support import require_chromium

pytestmark = pytest.mark.slow

WEB = Path(__file__).resolve().parents[1] / "clients" / "web"
CAMPAIGN = "errors"
BODY = {"id": CAMPAIGN, "items": ["news", "sports", "weather", "travel"], "set_size": 2,
        "levels": [1.0, 2.0], "min_users": 10}


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebCampaign]:
    require_chromium()
    with web_campaign(BODY, directory=tmp_path_factory.mktemp("errors"), root=WEB) as made:
        yield made


async def _page(campaign: WebCampaign, driver: Any) -> Any:
    await driver.goto(campaign.site.url("harness/error-kinds.html"))
    await driver.wait_for_selector("body[data-ready=true]")
    return driver


def _view_url(campaign: WebCampaign) -> str:
    return f"{campaign.stack.shuffler_url}/v1/campaigns/{CAMPAIGN}"


def test_offline_until_the_budget_ends_is_an_offline_error(campaign: WebCampaign) -> None:
    async def run() -> dict[str, Any]:
        async with chromium_page() as page:
            await _page(campaign, page)
            await page.context.set_offline(True)
            result: dict[str, Any] = await page.evaluate(
                "([t]) => errorKinds.campaign(t, { budgetMs: 3000 })", [campaign.target])
            return result

    result = asyncio.run(run())
    assert not result["ok"]
    error = result["error"]
    assert error["name"] == "OfflineError", error
    assert error["lastError"] == "NetworkError"
    assert error["waitedMs"] >= 3000
    # one try; then it waited for the network instead of trying again and again
    assert [t["online"] for t in result["tries"]] == [False], result["tries"]


def test_the_online_event_resumes_a_waiting_session_at_once(campaign: WebCampaign) -> None:
    offline_seconds = 2.0

    async def run() -> tuple[dict[str, Any], float]:
        async with chromium_page() as page:
            await _page(campaign, page)
            await page.context.set_offline(True)
            # a backoff would wait 10 to 20 s before the next try
            pending = asyncio.ensure_future(page.evaluate(
                "([t]) => errorKinds.campaign(t, { budgetMs: 60000, initialDelayMs: 20000, "
                "maxDelayMs: 20000 })", [campaign.target]))
            await asyncio.sleep(offline_seconds)
            online_at = time.monotonic()
            await page.context.set_offline(False)
            result: dict[str, Any] = await pending
            return result, time.monotonic() - online_at

    result, after_online = asyncio.run(run())
    assert result["ok"], result
    assert result["value"] == CAMPAIGN
    views = [t for t in result["tries"] if t["path"].endswith(f"/campaigns/{CAMPAIGN}")]
    assert [t["online"] for t in views] == [False, True], result["tries"]
    assert after_online < 5.0, after_online  # not the 10 s or more of a backoff


def test_a_stopped_shuffler_is_service_unreachable_after_the_time_budget(
        campaign: WebCampaign) -> None:
    async def run() -> dict[str, Any]:
        async with chromium_page() as page:
            await _page(campaign, page)
            result: dict[str, Any] = await page.evaluate(
                "([t]) => errorKinds.campaign(t, { budgetMs: 4000, initialDelayMs: 100, "
                "maxDelayMs: 400 })", [campaign.target])
            return result

    campaign.stack.kill("shuffler", signal.SIGTERM)
    try:
        result = asyncio.run(run())
    finally:
        campaign.stack.start_service("shuffler")
    assert not result["ok"]
    error = result["error"]
    assert error["name"] == "ServiceUnreachableError", error
    assert error["lastError"] == "NetworkError"
    assert error["waitedMs"] >= 4000
    assert error["attempts"] > 6 and error["attempts"] == len(result["tries"]), error


def test_a_503_then_success_is_waited_out_and_succeeds(campaign: WebCampaign) -> None:
    async def run() -> tuple[dict[str, Any], int]:
        answered = 0

        async def busy_once(route: Any) -> None:
            nonlocal answered
            answered += 1
            if answered > 1:
                await route.continue_()
                return
            await route.fulfill(status=503, headers={
                "content-type": "application/problem+json", "retry-after": "2",
                "access-control-allow-origin": campaign.site.origin,
                "access-control-expose-headers": "etag, retry-after",
            }, body=json.dumps({"type": "urn:segshuffle:error:unavailable", "status": 503,
                                "title": "unavailable", "detail": "starting"}))

        async with chromium_page() as page:
            await _page(campaign, page)
            await page.route(_view_url(campaign), busy_once)
            result: dict[str, Any] = await page.evaluate(
                "([t]) => errorKinds.campaign(t, {})", [campaign.target])
            return result, answered

    result, answered = asyncio.run(run())
    assert result["ok"], result
    assert result["value"] == CAMPAIGN
    assert answered == 2
    views = [t for t in result["tries"] if t["path"].endswith(f"/campaigns/{CAMPAIGN}")]
    assert len(views) == 2 and views[1]["at"] - views[0]["at"] >= 2000, views  # Retry-After


def test_a_refused_submission_carries_the_problem_document(campaign: WebCampaign) -> None:
    [invitation] = campaign.stack.invitations(CAMPAIGN, 1)

    async def run() -> dict[str, Any]:
        async with chromium_page() as page:
            await _page(campaign, page)
            result: dict[str, Any] = await page.evaluate(
                "([t, i]) => errorKinds.refusedSubmission(t, i)", [campaign.target, invitation])
            return result

    result = asyncio.run(run())
    assert not result["ok"]
    error = result["error"]
    assert error["name"] == "SubmissionRefusedError", error
    assert error["stored"] is False
    assert error["status"] == 409 and error["problem"] == "already-submitted"
    assert error["document"]["type"] == "urn:segshuffle:error:already-submitted"
    assert error["document"]["status"] == 409 and error["document"]["detail"]


def test_a_tampered_document_is_a_verification_error_naming_the_check(
        campaign: WebCampaign) -> None:
    async def run() -> dict[str, Any]:
        async def tamper(route: Any) -> None:
            answer = await route.fetch()
            view = await answer.json()
            view["config"]["min_users"] = 1000  # not the configuration the server signed
            await route.fulfill(response=answer, body=json.dumps(view))

        async with chromium_page() as page:
            await _page(campaign, page)
            await page.route(_view_url(campaign), tamper)
            result: dict[str, Any] = await page.evaluate(
                "([t]) => errorKinds.campaign(t, {})", [campaign.target])
            return result

    result = asyncio.run(run())
    assert not result["ok"]
    error = result["error"]
    assert error["name"] == "VerificationError", error
    assert error["check"] == "config_hash", error
