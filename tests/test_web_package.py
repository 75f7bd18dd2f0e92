"""The web client as an app team gets it: the ``npm pack`` tarball, installed into an
empty folder.

The package (clients/web) is packed as ``npm pack`` makes it for the registry (its
``prepack`` builds the declarations with tsc), installed offline into a scratch app with
nothing else in it, and used there as an app would use it: a TypeScript file is
type-checked against the installed declarations under ``--strict`` (and a file with two
mistakes must fail with exactly those), and one Node user and one browser user (a page
that maps the package's name to its entry point with an import map, no bundler) take
part in a campaign beside Python users, the browser's guarantee check running in the
installed package's Web Worker.  The API reference (API.md) must be what the
declarations give.  ``npm`` comes with Node, ``tsc`` from Debian's node-typescript
(``.ci/run`` installs it); without them these tests skip, except under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from segshuffle.testing.population import Population
from segshuffle.testing.web_demo import WebCampaign, chromium_page, web_campaign

from .browser_support import require_chromium
from .node_support import node
from .test_e2e_support import decoded_counts

pytestmark = pytest.mark.slow

WEB = Path(__file__).resolve().parents[1] / "clients" / "web"
APP = WEB / "harness" / "app"
#: What the package is built from (the rest of clients/web is the repository's).
SOURCES = ["package.json", "tsconfig.json", "README.md", "API.md", "src", "tools"]
ITEMS = ["news", "sports", "weather", "travel", "health", "tech"]
PYTHON_USERS = 10
OFFLINE = ["--offline", "--no-audit", "--no-fund", "--loglevel=error"]


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        hint = f"{name} is not installed (.ci/run installs npm and node-typescript)"
        if os.environ.get("CI") == "true":
            pytest.fail(hint)
        pytest.skip(hint)
    return found


def _run(command: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          check=False)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The package built and packed from a copy of its sources, and a scratch app with
    the tarball installed (and nothing else)."""
    node()
    npm, _ = _tool("npm"), _tool("tsc")
    base = tmp_path_factory.mktemp("package")
    source = base / "segshuffle-web"
    source.mkdir()
    for name in SOURCES:
        if (WEB / name).is_dir():
            shutil.copytree(WEB / name, source / name)
        else:
            shutil.copy2(WEB / name, source / name)
    done = _run([npm, "pack", "--pack-destination", str(base), *OFFLINE], source)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    version = json.loads((WEB / "package.json").read_text("utf-8"))["version"]
    tarball = base / f"segshuffle-web-{version}.tgz"
    assert tarball.is_file(), done.stdout
    app = base / "app"
    app.mkdir()
    (app / "package.json").write_text(json.dumps(
        {"name": "app", "version": "0.0.0", "private": True, "type": "module"}), "utf-8")
    done = _run([npm, "install", *OFFLINE, str(tarball)], app)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    for name in ("app.ts", "bad.ts", "node-user.mjs", "index.html", "page.js"):
        shutil.copy2(APP / name, app / name)
    return {"source": source, "tarball": tarball, "app": app}


def test_the_tarball_holds_the_modules_their_declarations_and_the_reference_only(
        packed: dict[str, Path]) -> None:
    with tarfile.open(packed["tarball"]) as archive:
        names = {member.name.removeprefix("package/") for member in archive.getmembers()}
    for needed in ("package.json", "README.md", "API.md", "src/index.js", "types/index.d.ts",
                   "types/session.d.ts", "src/accountant/worker.js"):
        assert needed in names, needed
    tops = {name.split("/")[0] for name in names}
    assert tops == {"package.json", "README.md", "API.md", "src", "types"}, tops
    installed = json.loads((packed["app"] / "node_modules" / "segshuffle-web" / "package.json")
                           .read_text("utf-8"))
    assert "dependencies" not in installed
    assert json.loads((packed["app"] / "package.json").read_text("utf-8"))["dependencies"] \
        == {"segshuffle-web": f"file:../{packed['tarball'].name}"}


def test_an_app_type_checks_against_the_installed_declarations(
        packed: dict[str, Path]) -> None:
    check = [_tool("tsc"), "--noEmit", "--strict", "--target", "es2022", "--module", "node16",
             "--moduleResolution", "node16", "--lib", "es2022,dom"]
    good = _run([*check, "app.ts"], packed["app"])
    assert good.returncode == 0, good.stdout + good.stderr
    bad = _run([*check, "bad.ts"], packed["app"])
    assert bad.returncode != 0
    errors = re.findall(r"^bad\.ts\((\d+),\d+\): error (TS\d+)", bad.stdout, re.MULTILINE)
    assert [code for _, code in errors] == ["TS2345", "TS2531"], bad.stdout


def test_the_api_reference_is_what_the_declarations_give(packed: dict[str, Path]) -> None:
    done = _run([node(), "tools/api-reference.mjs", "--check"], packed["source"])
    assert done.returncode == 0, done.stderr


def _node_user(app: Path, job: dict[str, Any]) -> dict[str, Any]:
    path = app / f"job-{job['phase']}.json"
    path.write_text(json.dumps(job), "utf-8")
    done = _run([node(), "node-user.mjs", str(path)], app)
    assert done.returncode == 0, done.stderr[-4000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


async def _campaign(campaign: WebCampaign, app: Path) -> dict[str, Any]:
    rng = np.random.default_rng(11)
    invitations = campaign.stack.invitations(campaign.campaign_id, PYTHON_USERS + 2)
    sets = [sorted(int(j) for j in rng.choice(len(ITEMS), size=2, replace=False))
            for _ in range(PYTHON_USERS)]
    population = Population.with_shares(
        campaign.stack.shuffler_url, campaign.campaign_id, sets, [0.5, 0.5], seed=5,
        invitations=invitations[2:], server_key=campaign.stack.server_key)
    target = campaign.target
    everyone = PYTHON_USERS + 2
    async with chromium_page() as page, population:
        await page.goto(campaign.site.url("index.html"))
        await page.wait_for_selector("body[data-ready=true]")
        node1 = asyncio.to_thread(_node_user, app, {
            "phase": "round1", "target": target, "invitation": invitations[0], "levelIndex": 0})
        browser1 = page.evaluate("([t, i]) => appUser.round1(t, i, 1)", [target, invitations[1]])
        node_round1, browser_round1, _ = await asyncio.gather(node1, browser1, population.round1())
        await asyncio.to_thread(campaign.wait_for_participants, 1, everyone, timeout=120)
        await asyncio.to_thread(campaign.stack.release, campaign.campaign_id, 1)
        await page.reload()  # round 2 from the saved document alone
        await page.wait_for_selector("body[data-ready=true]")
        node2 = asyncio.to_thread(_node_user, app, {
            "phase": "round2", "target": target, "state": node_round1["state"],
            "items": ["news", "tech"]})
        browser2 = page.evaluate("([t]) => appUser.round2(t, ['weather', 'news'])", [target])
        node_round2, browser_round2, _ = await asyncio.gather(node2, browser2, population.round2())
        await asyncio.to_thread(campaign.wait_for_participants, 2, everyone, timeout=120)
        await asyncio.to_thread(campaign.stack.release, campaign.campaign_id, 2)
    return {"population": population, "round1": [node_round1["sent"], browser_round1],
            "round2": [node_round2["sent"], browser_round2]}


def test_a_node_user_and_a_browser_user_of_the_installed_package_take_part(
        packed: dict[str, Path], tmp_path: Path) -> None:
    require_chromium()
    body = {"id": "package", "items": ITEMS, "set_size": 2, "levels": [3.0, 6.0],
            "min_users": 10}
    with web_campaign(body, directory=tmp_path / "stack", root=WEB,
                      site_root=packed["app"]) as campaign:
        outcome = asyncio.run(_campaign(campaign, packed["app"]))
        results = campaign.stack.results("package")
        parameters = campaign.stack.campaign("package").parameters
    population: Population = outcome["population"]
    assert not population.errors()
    assert parameters is not None and not parameters.insecure
    assert [sent["levelIndex"] for sent in outcome["round1"]] == [0, 1]
    web_slots = [sent["slots"] for sent in outcome["round2"]]
    assert all(len(slots) == parameters.messages_per_user for slots in web_slots)
    sent = population.sent_item_counts(parameters.privacy_domain_size)
    counted = Counter(j for slots in web_slots for j in slots if j is not None)
    for item, count in counted.items():
        sent[item] += count
    assert decoded_counts(results, parameters).tolist() == sent.tolist()
    assert results.privacy.round2_users == PYTHON_USERS + 2
