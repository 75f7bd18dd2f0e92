"""Simulated users from many loopback source addresses: a load test from one host
used to reach a balancer from a single address, so per-address hashing sent every user to
one shuffler replica and per-source rate limits treated them all as one client."""

from __future__ import annotations

import asyncio

import pytest

from segshuffle.testing.population import Population, loopback_addresses


def test_loopback_addresses_are_consecutive_and_stay_in_127_8() -> None:
    assert loopback_addresses(3) == ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    assert loopback_addresses(2, "127.0.0.255") == ["127.0.0.255", "127.0.1.0"]
    assert len(set(loopback_addresses(1000))) == 1000
    for count, first in ((0, "127.0.0.2"), (70_000, "127.0.0.2"), (2, "127.255.255.254"),
                         (1, "10.0.0.1")):
        with pytest.raises(ValueError):
            loopback_addresses(count, first)


async def _peers_seen(population: Population) -> list[str]:
    """Run round 1 against a listener that records each connection's source address and
    answers every request with 503 (the users fail at once, their addresses recorded)."""
    seen: list[str] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(writer.get_extra_info("peername")[0])
        while await reader.readline() not in (b"", b"\r\n"):  # the request head
            pass
        writer.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n"
                     b"connection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    population.shuffler_url = f"http://127.0.0.1:{port}"
    async with server, population:
        timing = await population.round1()
    assert timing.failures == len(population.users)
    return seen


def _population(**kwargs: object) -> Population:
    from segshuffle.client.session import RetryPolicy

    return Population("http://unused", "c", [[0]] * 9, [0] * 9, concurrency=3,
                      retry=RetryPolicy(attempts=1), **kwargs)  # type: ignore[arg-type]


def test_users_connect_from_their_own_source_addresses() -> None:
    addresses = loopback_addresses(3)
    seen = asyncio.run(_peers_seen(_population(source_addresses=addresses)))
    assert set(seen) == set(addresses)
    assert all(seen.count(address) == 3 for address in addresses)  # users 0..8, i mod 3


def test_one_address_without_the_option() -> None:
    seen = asyncio.run(_peers_seen(_population()))
    assert set(seen) == {"127.0.0.1"}


def test_connections_are_split_into_small_pools() -> None:
    """httpcore scans a whole pool on every request, so one pool of 64 connections cost the
    load generator 3.9 CPU-ms per round-1 user against 2.3 with pools of 8 (loadtest
    --users 3000 --concurrency 64).  Pools hold at most POOL_CONNECTIONS connections and
    come in a multiple of the source addresses, so user i still connects from address
    i mod k."""
    from segshuffle.testing.population import POOL_CONNECTIONS

    async def pool_count(population: Population) -> int:
        async with population:
            return len(population._pools)

    for concurrency, addresses, expected in ((64, 0, 8), (3, 0, 1), (20, 0, 3),
                                             (64, 3, 3 * 3), (4, 3, 3)):
        population = Population("http://127.0.0.1:9", "c", [[0]] * 9, [0] * 9,
                                concurrency=concurrency,
                                source_addresses=loopback_addresses(addresses)
                                if addresses else ())
        assert asyncio.run(pool_count(population)) == expected, (concurrency, addresses)
        assert -(-concurrency // expected) <= POOL_CONNECTIONS
