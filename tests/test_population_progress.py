"""Simulated users report progress by time as well as by share: a phase whose tenth of the
users takes long still says it is running."""

from __future__ import annotations

import asyncio

from segshuffle.testing.population import Population


def _population(said: list[tuple[str, int, int]], every: float) -> Population:
    return Population("http://127.0.0.1:9", "c", item_sets=[[0]] * 100,
                      level_indices=[0] * 100, concurrency=1,
                      progress=lambda phase, done, total: said.append((phase, done, total)),
                      progress_seconds=every)


def test_a_slow_phase_reports_between_its_tenths() -> None:
    said: list[tuple[str, int, int]] = []

    async def slow_user(index: int) -> None:
        await asyncio.sleep(0.03 if index < 8 else 0.0)  # the first tenth is slow

    async def run() -> None:
        async with _population(said, every=0.05) as population:
            await population._run("round 1", range(100), slow_user)

    asyncio.run(run())
    first_tenth = [done for _, done, _ in said if done < 10]
    assert first_tenth, said  # lines before the first tenth was done
    assert said[-1] == ("round 1", 100, 100)


def test_a_quick_phase_reports_its_tenths_only() -> None:
    said: list[tuple[str, int, int]] = []

    async def quick_user(index: int) -> None:
        return None

    async def run() -> None:
        async with _population(said, every=3600.0) as population:
            await population._run("round 2", range(100), quick_user)

    asyncio.run(run())
    assert [done for _, done, _ in said] == list(range(10, 101, 10))
