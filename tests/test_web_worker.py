"""The web client's guarantee check in headless Chromium: the page never freezes.

The accountant runs in a Web Worker (``clients/web/src/accountant_runner.js``).  A page
(``clients/web/harness/worker-check.html``) has a Session verify the heaviest parameters
document of docs/test-vectors.json (its three levels take the JavaScript accountant about
0.4 s in Chromium) while a 50 ms interval timer measures how late the main thread lets it
fire: no tick may be late by more than 50 ms, and the verdicts must be the vectors' (its
tampered copy is refuted at once by an exhibited pair of datasets, in the Worker too).  A cancel
terminates the worker and reaches the app as an AbortError; a worker that cannot load
fails the request instead of leaving it waiting.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from segshuffle.testing.static_site import StaticSite
from segshuffle.testing.web_demo import chromium_page

from .browser_support import require_chromium

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
VECTORS = json.loads((ROOT / "docs" / "test-vectors.json").read_text())
#: The documents whose levels take the JavaScript accountant longest (about 0.4 s each in
#: Node and Chromium): the honest one and its tampered copy the client refuses on lambdas.
HEAVIEST = "slots blanket, s = 4, d = 32, m = 1.5 (published by the server)"
LIGHT = "slots blanket, s = 1, d = 17, m = 0.5 (published by the server)"
#: The largest lateness of a 50 ms tick the page may see during a check.
MAX_LATE_MS = 50



def _index(description: str, *, tampered: str | None = None) -> int:
    for index, vector in enumerate(VECTORS["parameters"]):
        wanted = description if tampered is None else f"tampered ({description}"
        if vector["description"].startswith(wanted) and (
                tampered is None or vector["client_checks"] == [tampered]):
            return index
    raise LookupError(description)


@pytest.fixture(scope="module")
def site() -> Any:
    require_chromium()
    with StaticSite(ROOT / "clients" / "web",
                    {"docs/test-vectors.json": VECTORS}) as served:
        yield served


@asynccontextmanager
async def _page(site: StaticSite) -> AsyncIterator[Any]:
    async with chromium_page() as page:
        await page.goto(site.url("harness/worker-check.html"))
        await page.wait_for_selector("body[data-ready=true]")
        yield page


async def _checks(site: StaticSite, indices: list[int]) -> list[dict[str, Any]]:
    results = []
    for index in indices:  # a page each: nothing remembered from the previous check
        async with _page(site) as page:
            result = await page.evaluate("(i) => workerCheck.check(i)", index)
            result["workers"] = [worker.url for worker in page.workers]
            results.append(result)
    return results


#: Checks of one document tried at most, keeping the least late: a shared 2-core host can
#: delay a timer by itself (another test's processes beside this one), while a check on the
#: page's main thread delays every attempt by seconds.
ATTEMPTS = 3


def _least_late(site: StaticSite, index: int) -> dict[str, Any]:
    best: dict[str, Any] | None = None
    for _ in range(ATTEMPTS):
        (result,) = asyncio.run(_checks(site, [index]))
        if best is None or result["worstLateMs"] < best["worstLateMs"]:
            best = result
        if best["worstLateMs"] <= MAX_LATE_MS:
            break
    assert best is not None
    return best


def test_a_heavy_check_leaves_the_page_responsive_and_gives_the_vectors_verdicts(
        site: StaticSite) -> None:
    index = _index(HEAVIEST)
    result = _least_late(site, index)
    vector = VECTORS["parameters"][index]
    label = f"{vector['description']}: {result}"
    assert result["checks"] == vector["client_checks"], label
    # The timer kept time through a check long enough to have frozen the page.
    assert result["worstLateMs"] <= MAX_LATE_MS, label
    # One level's bound (a single synchronous piece of work, timed between two progress
    # steps) took longer than a tick may be late: on the page's main thread it would have
    # made a tick that late.  (The whole check's length is no measure of that: a fast host
    # checked the three levels in 180 ms, each over 50 ms.)
    assert result["longestStepMs"] > MAX_LATE_MS, label
    assert result["ticks"] >= result["elapsedMs"] // 50 - 2, label
    levels = len(vector["config"]["levels"])
    assert result["progress"] == [{"checked": k, "total": levels}
                                  for k in range(levels + 1)], label
    assert [url.rsplit("/", 2)[-2:] for url in result["workers"]] == [
        ["accountant", "worker.js"]], label


def test_a_refuted_check_is_refused_at_once_in_the_worker(site: StaticSite) -> None:
    # The tampered copy raises the strictest level's lambda to 1: an exhibited pair of
    # datasets refutes it (docs/protocol.md section 4.4), so the Worker refuses it on
    # lambdas without an upper bound, and the progress goes from none to all levels.
    index = _index(HEAVIEST, tampered="lambdas")
    result = _least_late(site, index)
    vector = VECTORS["parameters"][index]
    label = f"{vector['description']}: {result}"
    assert result["checks"] == vector["client_checks"] == ["lambdas"], label
    assert result["worstLateMs"] <= MAX_LATE_MS, label
    levels = len(vector["config"]["levels"])
    assert result["progress"] == [{"checked": 0, "total": levels},
                                  {"checked": levels, "total": levels}], label
    assert [url.rsplit("/", 2)[-2:] for url in result["workers"]] == [
        ["accountant", "worker.js"]], label


def test_the_worker_computes_the_same_doubles_as_the_page(site: StaticSite) -> None:
    index = _index(HEAVIEST)

    async def run() -> dict[str, list[float]]:
        async with _page(site) as page:
            return await page.evaluate("(i) => workerCheck.levelValues(i)", index)

    values = asyncio.run(run())
    assert values["inWorker"] == values["inPage"]
    vector = VECTORS["parameters"][index]
    delta = vector["parameters"]["delta"]
    for value, verdict in zip(values["inWorker"], vector["level_verdicts"], strict=True):
        assert (value <= delta) == verdict["holds"]
        assert abs(value - verdict["delta_user"]) <= 1e-9 * verdict["delta_user"] + 1e-13


def test_a_cancel_terminates_the_worker_and_the_next_check_starts_another(
        site: StaticSite) -> None:
    async def run() -> tuple[dict[str, Any], bool, dict[str, Any], dict[str, Any]]:
        async with _page(site) as page:
            closed = asyncio.Event()
            page.on("worker", lambda worker: worker.on("close", lambda _: closed.set()))
            cancelled = await page.evaluate(
                "(i) => workerCheck.check(i, { abortAfterMs: 150 })", _index(HEAVIEST))
            await asyncio.wait_for(closed.wait(), timeout=10)
            after = await page.evaluate("(i) => workerCheck.check(i)", _index(LIGHT))
            broken = await page.evaluate("() => workerCheck.brokenWorker()")
            return cancelled, closed.is_set(), after, broken

    cancelled, closed, after, broken = asyncio.run(run())
    assert cancelled["error"] == "AbortError", cancelled
    assert cancelled["checks"] is None
    # The computation was stopped, not waited for: the check ended as the app cancelled.
    assert cancelled["cancelMs"] < 50, cancelled
    assert cancelled["progress"][0] == {"checked": 0, "total": 3}
    assert cancelled["progress"][-1]["checked"] < 3
    assert cancelled["worstLateMs"] <= MAX_LATE_MS, cancelled
    assert closed
    assert after["checks"] == [] and after["progress"][-1] == {"checked": 3, "total": 3}, after
    assert broken["error"] == "AccountantUnavailableError", broken
