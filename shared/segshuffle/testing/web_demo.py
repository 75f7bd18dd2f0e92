"""The web client in a browser against local services: its demo and its browser test.

:func:`web_campaign` starts a :class:`~segshuffle.testing.static_site.StaticSite` serving
``clients/web`` and a :class:`~segshuffle.testing.localstack.LocalStack` whose shuffler
lets that site's origin call the client routes (``SEGSHUFFLE_SHUFFLER_CORS_ORIGINS``), and
creates a campaign.  Pages served by the site run the client in the browser; the host
side (this module, or a test) runs simulated Python users beside them and releases the
rounds as the operator would.

``python -m segshuffle.testing.web_demo`` runs the demo page (``clients/web/demo``): it
prints the page's address, runs simulated MSNBC users, releases round 1 once the
visitor has sent theirs and round 2 likewise, then publishes the estimates the page
draws.  With ``--screenshot PATH`` it plays the visitor itself in headless Chromium
(Debian's ``chromium``, driven by Playwright) and saves the page after the campaign.
The repository's checkout must be beside the package (an editable install): the page
is not part of the Python distribution.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from segshuffle.testing.localstack import LocalStack
from segshuffle.testing.population import Population
from segshuffle.testing.static_site import StaticSite

#: ``clients/web`` of the checkout this package is installed from.
WEB_ROOT = Path(__file__).resolve().parents[3] / "clients" / "web"

#: Debian's Chromium (``apt-get install chromium``).
CHROMIUM = "/usr/bin/chromium"

DEMO_CAMPAIGN = "web-demo"


@dataclass(frozen=True)
class WebCampaign:
    """A campaign whose users may be browser pages of ``site``."""

    site: StaticSite
    stack: LocalStack
    campaign_id: str

    @property
    def target(self) -> dict[str, str]:
        """What a page's Session needs: the shuffler, the campaign, the server's key."""
        assert self.stack.server_key is not None
        return {"shufflerUrl": self.stack.shuffler_url, "campaignId": self.campaign_id,
                "serverKey": self.stack.server_key}

    def participants(self, round_number: int) -> int:
        return int(self.stack.operator.round_status(self.campaign_id, round_number)
                   ["participants"])

    def wait_for_participants(self, round_number: int, count: int, *, timeout: float,
                              interval: float = 0.25) -> None:
        """Poll the shuffler's round status until ``count`` users took part (TimeoutError)."""
        deadline = time.monotonic() + timeout
        while (seen := self.participants(round_number)) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"round {round_number}: {seen} of {count} users after "
                                   f"{timeout:g} s")
            time.sleep(interval)


@contextlib.contextmanager
def web_campaign(body: Mapping[str, Any], *, directory: str | Path | None = None,
                 min_users: int = 2) -> Iterator[WebCampaign]:
    """Site, services and the campaign ``body`` (closed on exit)."""
    if not (WEB_ROOT / "src" / "index.js").is_file():
        raise FileNotFoundError(f"the web client is not at {WEB_ROOT} (run from a checkout)")
    with StaticSite(WEB_ROOT) as site:
        cors = {"SEGSHUFFLE_SHUFFLER_CORS_ORIGINS": site.origin}
        with LocalStack(directory, min_users=min_users, shuffler_env=cors) as stack:
            stack.create_campaign(body)
            yield WebCampaign(site, stack, str(body["id"]))


def estimates_document(results: Any, truth: Sequence[float] | None) -> dict[str, Any]:
    """What the demo page draws: per item its estimate, standard error and true share."""
    items = []
    for entry in results.items:
        row = {"id": entry.id, "name": entry.name, "estimate": entry.estimate,
               "standard_error": entry.standard_error}
        if truth is not None:
            row["truth"] = float(truth[entry.id])
        items.append(row)
    return {"users": results.privacy.round2_users, "items": items}


def true_shares(item_sets: Sequence[Sequence[int]], domain: int) -> np.ndarray:
    """The share of users holding each of the ``domain`` items, of the sets as they were
    fitted and sent (ids from ``domain`` on are padding ids, not items)."""
    counts = np.zeros(domain)
    for items in item_sets:
        for j in set(items):
            if j < domain:
                counts[j] += 1
    return counts / max(1, len(item_sets))


# -- the demo ------------------------------------------------------------------------------
def _demo_users(count: int, seed: int) -> tuple[list[list[int]], list[str]]:
    from segshuffle.datasets import load_msnbc

    collection = load_msnbc()
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(collection.n_users, size=count, replace=False))
    sets = [[int(j) for j in collection.user_items(int(u))] for u in chosen]
    return sets, list(collection.names)


@contextlib.asynccontextmanager
async def chromium_page(*, width: int = 900, height: int = 1000) -> AsyncIterator[Any]:
    """A page of headless Chromium (Debian's, driven by Playwright), closed on exit."""
    from playwright.async_api import async_playwright

    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield await browser.new_page(viewport={"width": width, "height": height})
        finally:
            await browser.close()


async def _take_part(page: Any, url: str, level_index: int, items: Sequence[str],
                     timeout: float) -> None:
    """The visitor: open the page, choose a level and items, take part."""
    await page.goto(url)
    await page.wait_for_selector("body[data-state=ready]", timeout=timeout * 1000)
    await page.check(f"input[name=level][value='{level_index}']")
    for name in items:
        await page.get_by_label(name, exact=True).check()
    await page.click("#take-part")


async def _demo(args: argparse.Namespace, campaign: WebCampaign, sets: list[list[int]],
                names: list[str], page: Any | None) -> None:
    invitations = campaign.stack.invitations(DEMO_CAMPAIGN, args.users + 1)
    campaign.site.publish("demo/config.json", {**campaign.target, "invitation": invitations[-1],
                                               "resultsUrl": "./results.json"})
    url = campaign.site.url("demo/")
    print(f"demo page: {url}", flush=True)
    visitor_items = ("news", "sports")
    if page is not None:
        await _take_part(page, url, 1, visitor_items, args.timeout)
    else:
        print("open it, choose a level and items, and take part", flush=True)
    population = Population.with_shares(
        campaign.stack.shuffler_url, DEMO_CAMPAIGN, sets, [1 / 3] * 3, seed=args.seed,
        invitations=invitations[:-1], server_key=campaign.stack.server_key)
    async with population:
        for number, run_users in ((1, population.round1), (2, population.round2)):
            await run_users()
            print(f"round {number}: {args.users} simulated users sent; waiting for the "
                  "visitor", flush=True)
            await asyncio.to_thread(campaign.wait_for_participants, number, args.users + 1,
                                    timeout=args.timeout)
            await asyncio.to_thread(campaign.stack.release, DEMO_CAMPAIGN, number)
            print(f"round {number} released", flush=True)
    results = await asyncio.to_thread(campaign.stack.results, DEMO_CAMPAIGN)
    fitted = [list(u.round2.items) for u in population.users if u.round2 is not None]
    if page is not None:  # the visitor's items are known only when this plays the visitor
        fitted.append([names.index(name) for name in visitor_items])
    campaign.site.publish("demo/results.json",
                          estimates_document(results, true_shares(fitted, len(names))))
    if page is not None:
        await page.wait_for_selector("body[data-state=results]", timeout=args.timeout * 1000)
        await page.screenshot(path=str(args.screenshot), full_page=True)
        print(f"screenshot: {args.screenshot}", flush=True)


async def _run(args: argparse.Namespace) -> None:
    sets, names = _demo_users(args.users, args.seed)
    body = {"id": DEMO_CAMPAIGN, "items": names, "set_size": 2, "levels": [0.5, 1.0, 2.0],
            "min_users": min(100, args.users)}
    with web_campaign(body) as campaign:
        if args.screenshot is None:
            await _demo(args, campaign, sets, names, None)
            print("results published; Ctrl-C stops the demo", flush=True)
            while True:
                await asyncio.sleep(3600)
        async with chromium_page() as page:
            try:
                await _demo(args, campaign, sets, names, page)
            except Exception:
                failed = args.screenshot.with_suffix(".failed.png")
                await page.screenshot(path=str(failed), full_page=True)
                print(f"the page when it failed: {failed}", file=sys.stderr, flush=True)
                raise


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m segshuffle.testing.web_demo",
                                     description="the web client's demo page on loopback")
    parser.add_argument("--users", type=int, default=300,
                        help="simulated MSNBC users beside the visitor (default 300)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds to wait for the visitor in each round (default 1800)")
    parser.add_argument("--screenshot", type=Path, default=None,
                        help="play the visitor in headless Chromium and save the page here")
    args = parser.parse_args(argv)
    if args.users < 2:
        parser.error("--users must be at least 2")
    if args.screenshot is not None and not Path(CHROMIUM).is_file():
        parser.error(f"--screenshot needs Debian's chromium at {CHROMIUM} "
                     "(apt-get install chromium)")
    try:
        asyncio.run(_run(args))
    except KeyboardInterrupt:
        pass
    except (ImportError, FileNotFoundError, TimeoutError, ValueError) as exc:  # one line
        print(f"web demo: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
