"""The web client in headless Chromium: a whole campaign of browser and Python users.

Fifty users run in five pages of Debian's Chromium (ten Sessions a page, driven by
``clients/web/harness/browser-users.js``), thirty beside them with the Python SDK, all
against real service processes: the pages call the shuffler cross-origin (its CORS
setting lists the page's origin), seal with WebCrypto, verify the published parameters
with the JavaScript accountant, and resume round 2 from the saved-session document
alone.  The server's decoded counts must equal, item by item, what the users' slots
carried, and its level histograms what they reported.  The demo page is then played by
a visitor and photographed.  ``.ci/run`` installs Chromium and Playwright; without them
these tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from segshuffle.testing.population import Population
from segshuffle.testing.web_demo import CHROMIUM, WebCampaign, main, web_campaign

from .browser_support import require_chromium
from .test_e2e_support import decoded_counts

WEB = Path(__file__).resolve().parents[1] / "clients" / "web"

pytestmark = pytest.mark.slow

ITEMS = ["apples", "pears", "plums", "figs", "kiwis", "limes", "dates", "grapes"]
LEVELS = [0.5, 1.0, 2.0]
PAGES, PER_PAGE, PYTHON_USERS = 5, 10, 30


@pytest.fixture(scope="module")
def browser_ready() -> None:
    require_chromium()


def _sets(count: int, rng: np.random.Generator) -> list[list[int]]:
    # Skewed interests: item j is held with probability about 0.6 / (j + 1).
    weights = 1.0 / np.arange(1, len(ITEMS) + 1)
    return [sorted(int(j) for j in rng.choice(len(ITEMS), size=int(rng.integers(1, 3)),
                                              replace=False, p=weights / weights.sum()))
            for _ in range(count)]


async def _campaign_with_browsers(campaign: WebCampaign) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    rng = np.random.default_rng(7)
    browser_users = PAGES * PER_PAGE
    invitations = campaign.stack.invitations(campaign.campaign_id,
                                             browser_users + PYTHON_USERS)
    page_users = [[{"name": f"p{p}u{u}", "invitation": invitations[p * PER_PAGE + u],
                    "levelIndex": int(rng.integers(len(LEVELS)))} for u in range(PER_PAGE)]
                  for p in range(PAGES)]
    page_sets = [[_sets(1, rng)[0] for _ in range(PER_PAGE)] for _ in range(PAGES)]
    population = Population.with_shares(
        campaign.stack.shuffler_url, campaign.campaign_id, _sets(PYTHON_USERS, rng),
        [1 / 3] * 3, seed=3, invitations=invitations[browser_users:],
        server_key=campaign.stack.server_key)
    target = campaign.target
    total = browser_users + PYTHON_USERS
    async with async_playwright() as driver, population:
        browser = await driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        pages = []
        for _ in range(PAGES):  # a context each: its own localStorage, as separate devices
            page = await (await browser.new_context()).new_page()
            await page.goto(campaign.site.url("harness/browser-users.html"))
            await page.wait_for_selector("body[data-ready=true]")
            pages.append(page)
        round1 = await asyncio.gather(
            population.round1(),
            *(page.evaluate("([t, u]) => browserUsers.round1(t, u)", [target, users])
              for page, users in zip(pages, page_users, strict=True)))
        await asyncio.to_thread(campaign.wait_for_participants, 1, total, timeout=60)
        await asyncio.to_thread(campaign.stack.release, campaign.campaign_id, 1)
        # A reload between the rounds: round 2 starts from the saved documents alone.
        for page in pages:
            await page.reload()
            await page.wait_for_selector("body[data-ready=true]")
        round2 = await asyncio.gather(
            population.round2(),
            *(page.evaluate("([t, u]) => browserUsers.round2(t, u)",
                            [target, [{"name": user["name"], "items": items}
                                      for user, items in zip(users, sets, strict=True)]])
              for page, users, sets in zip(pages, page_users, page_sets, strict=True)))
        await asyncio.to_thread(campaign.wait_for_participants, 2, total, timeout=60)
        await asyncio.to_thread(campaign.stack.release, campaign.campaign_id, 2)
        await browser.close()
    return {"population": population, "round1": [u for page in round1[1:] for u in page],
            "round2": [u for page in round2[1:] for u in page]}


def test_browser_and_python_users_complete_a_campaign(browser_ready: None,
                                                      tmp_path: Path) -> None:
    body = {"id": "browser", "items": ITEMS, "set_size": 2, "levels": LEVELS,
            "min_users": 60}
    with web_campaign(body, directory=tmp_path / "stack", root=WEB) as campaign:
        outcome = asyncio.run(_campaign_with_browsers(campaign))
        results = campaign.stack.results("browser")
        parameters = campaign.stack.campaign("browser").parameters
    population: Population = outcome["population"]
    assert not population.errors()
    browser_round2 = outcome["round2"]
    assert len(outcome["round1"]) == len(browser_round2) == PAGES * PER_PAGE
    # Every browser user sent the fixed number of slots the parameters ask for.
    assert {len(u["slots"]) for u in browser_round2} == {parameters.messages_per_user}
    sent = population.sent_item_counts(parameters.privacy_domain_size)
    for user in browser_round2:
        for item in user["slots"]:
            if item is not None:
                sent[item] += 1
    assert decoded_counts(results, parameters).tolist() == sent.tolist()
    for round_number, reports in ((1, outcome["round1"]), (2, browser_round2)):
        levels = population.sent_level_counts(len(LEVELS), round_number)
        for user in reports:
            levels[user["reportedLevel"]] += 1
        seen = [lv.users_round1 if round_number == 1 else lv.users_round2
                for lv in results.privacy.levels]
        assert seen == levels.tolist()
    assert results.dropped_messages == 0


def test_the_demo_page_runs_a_campaign_and_draws_its_estimates(
        browser_ready: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shot = tmp_path / "demo.png"
    assert main(["--users", "40", "--timeout", "120", "--screenshot", str(shot),
                 "--web-client", str(WEB)]) == 0
    assert shot.read_bytes().startswith(b"\x89PNG")
    out = capsys.readouterr().out
    for line in ("round 1: 40/40 simulated users sent", "round 1: all 41 users in",
                 "round 1 released", "round 2 released", "estimates published"):
        assert line in out, out
    if os.environ.get("SEGSHUFFLE_DEMO_SCREENSHOT"):  # refresh the README's picture
        shutil.copyfile(shot, os.environ["SEGSHUFFLE_DEMO_SCREENSHOT"])
