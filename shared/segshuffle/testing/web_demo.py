"""The web client in a browser against local services: its demo and its browser tests.

:func:`web_campaign` starts a :class:`~segshuffle.testing.static_site.StaticSite` serving
the web client's folder (found by :func:`~segshuffle.testing.web_client.web_client_root`:
an explicit folder, ``SEGSHUFFLE_WEB_CLIENT``, or ``clients/web`` under the current
directory) and a :class:`~segshuffle.testing.localstack.LocalStack` whose shuffler lets
that site's origin call the client routes (``SEGSHUFFLE_SHUFFLER_CORS_ORIGINS``), and
creates a campaign.  Pages served by the site run the client in the browser; the host
side (this module, or a test) runs simulated Python users beside them and releases the
rounds as the operator would.

``python -m segshuffle.testing.web_demo`` runs the demo page (``demo/`` of the web
client's folder): it prints the page's address, runs simulated MSNBC users, releases
round 1 once the visitor has sent theirs and round 2 likewise, then publishes the
estimates the page draws.  It reports its progress as it goes: on the terminal (the
simulated users sent, the wait for the visitor, each release, with the seconds since
the start) and on the page (how many users each round holds, read from the shuffler's
round status, and each release).  With ``--screenshot PATH`` it plays the visitor itself
in headless Chromium (Debian's ``chromium`` at ``/usr/bin/chromium``, driven by the
Playwright package from PyPI; Playwright's own browser download is not used) and saves
the page after the campaign; a page that fails ends the demo at once with its error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from segshuffle.core import rules
from segshuffle.testing.localstack import RELEASE_SECONDS, LocalStack, harness_seconds
from segshuffle.testing.population import Population
from segshuffle.testing.static_site import StaticSite
from segshuffle.testing.web_client import web_client_root

#: Debian's Chromium (``apt-get install chromium``).
CHROMIUM = "/usr/bin/chromium"

DEMO_CAMPAIGN = "web-demo"

#: Simulated users of the demo unless ``--users`` says otherwise: enough for estimates
#: within a few points, few enough that the whole demo, Chromium and both releases
#: included, takes under a minute on an idle two-core machine.
DEFAULT_USERS = 300

#: Seconds between the terminal's progress lines while the demo waits.
PROGRESS_SECONDS = 10.0

#: Seconds between two looks at a round's status, and at the page's state.
POLL_SECONDS = 0.25

T = TypeVar("T")


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

    def status(self, round_number: int) -> dict[str, Any]:
        """The shuffler's status of a round: participants, required, state."""
        return self.stack.operator.round_status(self.campaign_id, round_number)

    def participants(self, round_number: int) -> int:
        return int(self.status(round_number)["participants"])

    def wait_for_participants(self, round_number: int, count: int, *, timeout: float,
                              interval: float = POLL_SECONDS) -> None:
        """Poll the shuffler's round status until ``count`` users took part (TimeoutError)."""
        deadline = time.monotonic() + timeout
        while (seen := self.participants(round_number)) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"round {round_number}: {seen} of {count} users after "
                                   f"{timeout:g} s")
            time.sleep(interval)


@contextlib.contextmanager
def web_campaign(body: Mapping[str, Any], *, directory: str | Path | None = None,
                 min_users: int = 2, root: str | os.PathLike[str] | None = None,
                 site_root: str | os.PathLike[str] | None = None) -> Iterator[WebCampaign]:
    """Site, services and the campaign ``body`` (closed on exit).

    The site serves ``site_root`` if given (an app's folder, say), else the web client's
    folder (``root``, or as :func:`web_client_root` finds it)."""
    served = Path(site_root) if site_root is not None else web_client_root(root)
    with StaticSite(served) as site:
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


# -- the demo ------------------------------------------------------------------------------
class DemoPageError(RuntimeError):
    """The demo page reached its error state; the message is what it shows."""


class Reporter:
    """The terminal's progress lines, each with the seconds since the demo began."""

    def __init__(self, stream: Any = None) -> None:
        self.started = time.monotonic()
        self.stream = stream

    def __call__(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"{elapsed:6.1f} s  {text}", file=self.stream or sys.stdout, flush=True)

    def users(self, phase: str, done: int, total: int) -> None:
        """Population's progress: a line per tenth of the simulated users."""
        self(f"{phase}: {done}/{total} simulated users sent")


def _demo_users(count: int, seed: int) -> tuple[list[list[int]], list[str]]:
    from segshuffle.datasets import load_msnbc

    collection = load_msnbc()
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(collection.n_users, size=count, replace=False))
    sets = [[int(j) for j in collection.user_items(int(u))] for u in chosen]
    return sets, list(collection.names)


async def _take_part(page: Any, url: str, level_index: int, items: Sequence[str],
                     timeout: float) -> None:
    """The visitor: open the page, choose a level and items, take part."""
    await page.goto(url)
    await page.wait_for_selector("body[data-state=ready]", timeout=timeout * 1000)
    await page.check(f"input[name=level][value='{level_index}']")
    for name in items:
        await page.get_by_label(name, exact=True).check()
    await page.click("#take-part")


async def _watching(page: Any | None, work: Awaitable[T]) -> T:
    """``work``, ended early with :class:`DemoPageError` if the page shows its error state."""
    task = asyncio.ensure_future(work)
    if page is None:
        return await task
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=POLL_SECONDS)
            if done:
                return task.result()
            if await page.evaluate("document.body.dataset.state") == "error":
                shown = await page.evaluate(
                    "document.querySelector('#steps li.error')?.textContent ?? ''")
                raise DemoPageError(f"the demo page failed: {shown or 'no message'}")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def _until(check: Callable[[], Awaitable[bool]], *, timeout: float, what: str,
                 report: Callable[[float], None]) -> None:
    """Poll ``check`` until true, reporting every :data:`PROGRESS_SECONDS` (TimeoutError)."""
    started = time.monotonic()
    reported = started
    while not await check():
        now = time.monotonic()
        if now - started > timeout:
            raise TimeoutError(f"{what} after {timeout:g} s")
        if now - reported >= PROGRESS_SECONDS:
            report(now - started)
            reported = now
        await asyncio.sleep(POLL_SECONDS)


async def _participants(campaign: WebCampaign, number: int, count: int, timeout: float,
                        say: Reporter) -> None:
    """Wait until round ``number`` holds ``count`` users (the visitor's included)."""
    seen = 0

    async def enough() -> bool:
        nonlocal seen
        seen = int((await asyncio.to_thread(campaign.status, number))["participants"])
        return seen >= count

    await _until(enough, timeout=timeout, what=f"round {number}: fewer than {count} users",
                 report=lambda _: say(f"round {number}: {seen} of {count} users in; "
                                      "waiting for the visitor"))


async def _release(campaign: WebCampaign, number: int, say: Reporter) -> None:
    """Release round ``number`` and wait until the server has acknowledged it."""
    stack, cid = campaign.stack, campaign.campaign_id
    timeout = harness_seconds("release", RELEASE_SECONDS)
    await asyncio.to_thread(stack.operator.release, cid, number, wait=False, timeout=timeout)
    work = ("decodes the levels and chooses the parameters" if number == 1
            else "decodes the data")

    async def released() -> bool:
        status = await asyncio.to_thread(campaign.status, number)
        if status["state"] == "failed":
            raise RuntimeError(f"round {number} ended without results: "
                               f"{status.get('reason') or 'no reason given'}")
        return bool(status["state"] == "released")

    await _until(released, timeout=timeout, what=f"round {number} not released",
                 report=lambda waited: say(f"round {number}: releasing, the server {work} "
                                           f"({waited:.0f} s)"))


async def _demo(args: argparse.Namespace, campaign: WebCampaign, sets: list[list[int]],
                names: list[str], page: Any | None, say: Reporter) -> None:
    invitations = campaign.stack.invitations(DEMO_CAMPAIGN, args.users + 1)
    campaign.site.publish("demo/config.json", {
        **campaign.target, "invitation": invitations[-1], "resultsUrl": "./results.json",
        "users": args.users + 1})
    url = campaign.site.url("demo/")
    say(f"demo page: {url}")
    visitor_items = ("news", "sports")
    if page is not None:
        await _take_part(page, url, 1, visitor_items, args.timeout)
        say("the visitor (headless Chromium) chose a level and items and takes part")
    else:
        say("open it, choose a level and items, and take part")
    population = Population.with_shares(
        campaign.stack.shuffler_url, DEMO_CAMPAIGN, sets, [1 / 3] * 3, seed=args.seed,
        invitations=invitations[:-1], server_key=campaign.stack.server_key,
        progress=say.users, progress_seconds=PROGRESS_SECONDS)
    everyone = args.users + 1
    async with population:
        for number, run_users in ((1, population.round1), (2, population.round2)):
            await _watching(page, run_users())
            await _watching(page, _participants(campaign, number, everyone, args.timeout, say))
            say(f"round {number}: all {everyone} users in; releasing it")
            await _watching(page, _release(campaign, number, say))
            say(f"round {number} released")
    results = await asyncio.to_thread(campaign.stack.results, DEMO_CAMPAIGN)
    fitted = [list(u.round2.items) for u in population.users if u.round2 is not None]
    if page is not None:  # the visitor's items are known only when this plays the visitor
        fitted.append([names.index(name) for name in visitor_items])
    campaign.site.publish("demo/results.json",
                          estimates_document(results, true_shares(fitted, len(names))))
    say("estimates published")
    if page is not None:
        await _watching(page, page.wait_for_selector("body[data-state=results]",
                                                     timeout=args.timeout * 1000))
        await _check_page(page, len(names))
        await page.screenshot(path=str(args.screenshot), full_page=True)
        say(f"screenshot: {args.screenshot}")


async def _check_page(page: Any, items: int) -> None:
    """The finished page shows what the screenshot is for: each round's progress to its
    release, and a bar per item (DemoPageError otherwise)."""
    steps = await page.inner_text("#steps")
    bars = await page.locator("#chart rect.bar").count()
    missing = [f"round {r}'s release" for r in (1, 2) if f"Round {r} released" not in steps]
    if bars != items:
        missing.append(f"a bar per item ({bars} of {items})")
    if missing:
        raise DemoPageError(f"the demo page does not show {', '.join(missing)}")


async def _run(args: argparse.Namespace, root: Path, say: Reporter) -> None:
    sets, names = _demo_users(args.users, args.seed)
    body = {"id": DEMO_CAMPAIGN, "items": names, "set_size": 2, "levels": [0.5, 1.0, 2.0],
            "min_users": min(100, args.users)}
    with web_campaign(body, root=root) as campaign:
        say("services started")
        if args.screenshot is None:
            await _demo(args, campaign, sets, names, None, say)
            say("results published; Ctrl-C stops the demo")
            while True:
                await asyncio.sleep(3600)
        async with chromium_page() as page:
            try:
                await _demo(args, campaign, sets, names, page, say)
            except Exception:
                failed = args.screenshot.with_suffix(".failed.png")
                await page.screenshot(path=str(failed), full_page=True)
                print(f"the page when it failed: {failed}", file=sys.stderr, flush=True)
                raise


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m segshuffle.testing.web_demo",
                                     description="the web client's demo page on loopback")
    parser.add_argument("--users", type=int, default=DEFAULT_USERS,
                        help=f"simulated MSNBC users beside the visitor (default {DEFAULT_USERS})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds to wait for the visitor in each round (default 1800)")
    parser.add_argument("--screenshot", type=Path, default=None,
                        help="play the visitor in headless Chromium and save the page here "
                             f"(needs Chromium at {CHROMIUM} and Playwright)")
    parser.add_argument("--web-client", type=Path, default=None, metavar="DIR",
                        help="the web client's folder (default: $SEGSHUFFLE_WEB_CLIENT, else "
                             "clients/web under the current directory)")
    args = parser.parse_args(argv)
    if args.users < rules.SHUFFLER_MIN_USERS:
        # The pages run the web client's default policy, which refuses a campaign whose
        # min_users is below the shuffler's default floor.
        parser.error(f"--users must be at least {rules.SHUFFLER_MIN_USERS} (the clients' "
                     "default floor of min_users)")
    if args.screenshot is not None and not Path(CHROMIUM).is_file():
        parser.error(f"--screenshot needs Debian's chromium at {CHROMIUM} "
                     "(apt-get install chromium)")
    say = Reporter()
    try:
        root = web_client_root(args.web_client)
        if not (root / "demo" / "index.html").is_file():
            raise FileNotFoundError(f"{root} has no demo/index.html: the demo page comes with "
                                    "a checkout's clients/web")
        asyncio.run(_run(args, root, say))
    except KeyboardInterrupt:
        pass
    except (ImportError, FileNotFoundError, TimeoutError, ValueError, DemoPageError) as exc:
        print(f"web demo: {exc}", file=sys.stderr)  # one line
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
