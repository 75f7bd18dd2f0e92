"""A lean load generator for the service benchmarks: precomputed requests, raw HTTP/1.1.

Two halves, both kept out of the measured windows as far as possible:

- **Sealing** (:func:`prepare_round1`, :func:`prepare_round2`): run in a process pool before
  a phase starts.  Each task plays a slice of the users as a real client would with the
  SDK: it verifies the campaign view and key config (:class:`~segshuffle.client.session.
  UserSession`, server signatures included), signs the users' invitations with the app
  operator's issuer key, and seals their level (round 1) or their level and data slots
  (round 2) with :mod:`segshuffle.client.messages` (HPKE from :mod:`segshuffle.crypto`),
  after verifying the published parameters for every level.  Bodies come back as JSON
  bytes.
- **Sending** (:class:`Senders`): a few persistent worker processes, each an asyncio loop
  with a bounded number of keep-alive connections to one loopback port, speaking just
  enough HTTP/1.1 (``Content-Length`` bodies) to send fully encoded requests and time
  them.  A batch is handed to the workers first and only then started, so shipping it
  between processes is not part of what is measured; each request's latency is the time
  from writing it to reading the whole answer.

Requests are never retried (a retried submission would be refused as a duplicate); a
failed or refused request is counted and reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import multiprocessing.connection
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

REQUEST_TIMEOUT = 60.0
"""Seconds a single request may take before it counts as failed."""
MAX_HEADER_BYTES = 64 * 1024


# -- HTTP/1.1 ----------------------------------------------------------------------------
def encode_request(method: str, host: str, path: str, body: bytes | None = None,
                   headers: Sequence[tuple[str, str]] = ()) -> bytes:
    """One complete HTTP/1.1 request (keep-alive; JSON body when ``body`` is given)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines.extend(f"{name}: {value}" for name, value in headers)
    if body is not None:
        lines.append("Content-Type: application/json")
        lines.append(f"Content-Length: {len(body)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + (body or b"")


@dataclass
class BatchResult:
    """What one worker saw for its share of a batch."""

    latencies: list[float] = field(default_factory=list)
    """Seconds per completed request, in completion order."""
    statuses: dict[int, int] = field(default_factory=dict)
    """Status code -> count (0: no answer: connection error or timeout)."""
    bodies: list[bytes | None] | None = None
    """The answers' bodies in request order, when asked for."""
    first_error: str | None = None


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """(status, body, server keeps the connection) of one response with Content-Length."""
    head = await reader.readuntil(b"\r\n\r\n")
    if len(head) > MAX_HEADER_BYTES:
        raise ValueError("response header too large")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = 0
    keep = True
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding":
            raise ValueError(f"unsupported transfer-encoding {value.strip()!r}")
        elif name == "connection" and value.strip().lower() == "close":
            keep = False
    body = await reader.readexactly(length) if length else b""
    return status, body, keep


async def _send_all(host: str, port: int, requests: Sequence[bytes], concurrency: int,
                    keep_bodies: bool, timeout: float) -> BatchResult:
    result = BatchResult(bodies=[None] * len(requests) if keep_bodies else None)
    next_index = 0

    async def connection() -> None:
        nonlocal next_index
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        try:
            while next_index < len(requests):
                index = next_index
                next_index += 1
                if writer is None:
                    reader, writer = await asyncio.open_connection(host, port)
                assert reader is not None
                started = time.perf_counter()
                try:
                    writer.write(requests[index])
                    status, body, keep = await asyncio.wait_for(_read_response(reader),
                                                                timeout)
                except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                        ValueError, TimeoutError) as exc:
                    status, body, keep = 0, b"", False
                    if result.first_error is None:
                        result.first_error = f"{type(exc).__name__}: {exc}"
                else:
                    result.latencies.append(time.perf_counter() - started)
                    if status >= 400 and result.first_error is None:
                        result.first_error = f"HTTP {status}: {body[:300]!r}"
                result.statuses[status] = result.statuses.get(status, 0) + 1
                if result.bodies is not None:
                    result.bodies[index] = body
                if not keep:
                    writer.close()
                    reader = writer = None
        finally:
            if writer is not None:
                writer.close()

    await asyncio.gather(*(connection() for _ in range(max(1, min(concurrency,
                                                                    len(requests))))))
    return result


def _worker(pipe: multiprocessing.connection.Connection, host: str, port: int,
            concurrency: int, timeout: float) -> None:
    """A sender process: ``("load", requests, keep)`` then ``("go",)`` -> BatchResult."""
    try:
        import uvloop
        loop_factory: Any = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        loop_factory = None
    requests: Sequence[bytes] = []
    keep = False
    while True:
        message = pipe.recv()
        if message[0] == "load":
            _, requests, keep, port = message
            pipe.send(("loaded", len(requests)))
        elif message[0] == "go":
            with asyncio.Runner(loop_factory=loop_factory) as runner:
                outcome = runner.run(_send_all(host, port, requests, concurrency, keep,
                                               timeout))
            requests = []
            pipe.send(("done", outcome))
        else:
            return


class Senders:
    """Persistent sender processes (see the module docstring); a context manager."""

    def __init__(self, processes: int, concurrency: int, *, host: str = "127.0.0.1",
                 timeout: float = REQUEST_TIMEOUT) -> None:
        if processes < 1 or concurrency < processes:
            raise ValueError("need at least one process and one connection per process")
        context = multiprocessing.get_context("spawn")
        self.host = host
        self._pipes: list[multiprocessing.connection.Connection] = []
        self._processes: list[multiprocessing.process.BaseProcess] = []
        shares = [concurrency // processes + (i < concurrency % processes)
                  for i in range(processes)]
        for share in shares:
            ours, theirs = context.Pipe()
            process = context.Process(target=_worker, args=(theirs, host, 0, share, timeout),
                                      daemon=True)
            process.start()
            theirs.close()
            self._pipes.append(ours)
            self._processes.append(process)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._processes if p.pid is not None]

    def load(self, port: int, requests: Sequence[bytes], *, keep_bodies: bool = False) -> None:
        """Hand the workers their shares of ``requests`` (round robin), for :meth:`go`."""
        count = len(self._pipes)
        self._order = [list(range(i, len(requests), count)) for i in range(count)]
        for pipe, indices in zip(self._pipes, self._order, strict=True):
            pipe.send(("load", [requests[i] for i in indices], keep_bodies, port))
        for pipe in self._pipes:
            answer = pipe.recv()
            if answer[0] != "loaded":
                raise RuntimeError(f"sender answered {answer!r}")

    def go(self, total: int) -> BatchResult:
        """Send the loaded batch; merged results (bodies back in the original order)."""
        for pipe in self._pipes:
            pipe.send(("go",))
        merged = BatchResult()
        bodies: list[bytes | None] = [None] * total
        keep = False
        for pipe, indices in zip(self._pipes, self._order, strict=True):
            tag, part = pipe.recv()
            if tag != "done":
                raise RuntimeError(f"sender answered {tag!r}")
            merged.latencies.extend(part.latencies)
            for status, count in part.statuses.items():
                merged.statuses[status] = merged.statuses.get(status, 0) + count
            merged.first_error = merged.first_error or part.first_error
            if part.bodies is not None:
                keep = True
                for index, body in zip(indices, part.bodies, strict=True):
                    bodies[index] = body
        merged.bodies = bodies if keep else None
        return merged

    def close(self) -> None:
        for pipe in self._pipes:
            with contextlib.suppress(OSError):
                pipe.send(("stop",))
        for process in self._processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)

    def __enter__(self) -> Senders:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- sealing (runs in a process pool) -----------------------------------------------------
def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _session(campaign: dict[str, Any], hpke: dict[str, Any], server_key: str | None,
             rng: np.random.Generator) -> Any:
    """A verified SDK session for the campaign (what each real client does first)."""
    from segshuffle.client.policy import ClientPolicy
    from segshuffle.client.session import UserSession
    from segshuffle.wire.models import CampaignView, HpkeConfig

    view = CampaignView.model_validate(campaign)
    # The simulated users hold exactly s items each, so a campaign without padding ids
    # covers them (and data_slots refuses a smaller set all the same).
    session = UserSession(view.id, rng, server_key=server_key,
                          policy=ClientPolicy(allow_unpadded=True))
    session.accept_campaign(view, HpkeConfig.model_validate(hpke))
    return session


def prepare_round1(campaign: dict[str, Any], hpke: dict[str, Any], server_key: str | None,
                   issuer_seed: bytes | None, expires: int, levels: Sequence[int],
                   seed: int) -> list[tuple[bytes, int, bytes]]:
    """Per user: (enrollment body, reported level, round-1 body), JSON bytes.

    The enrollment body carries an invitation signed with the issuer key whose raw
    Ed25519 seed is ``issuer_seed`` (``{}`` for open enrollment)."""
    from segshuffle.client.messages import report_level, round1_body
    from segshuffle.crypto.invitations import (
        issuer_key_from_seed,
        new_invitation,
        sign_invitation,
    )

    rng = np.random.default_rng(seed)
    session = _session(campaign, hpke, server_key, rng)
    issuer = None if issuer_seed is None else issuer_key_from_seed(issuer_seed)
    out = []
    for level in levels:
        enrollment: dict[str, str] = {}
        if issuer is not None:
            enrollment["invitation"] = sign_invitation(new_invitation(session.campaign_id,
                                                                      expires), issuer)
        reported = report_level(level, session.view, rng)
        out.append((_json_bytes(enrollment), reported,
                    _json_bytes(round1_body(session.view, session.key, reported))))
    return out


def prepare_round2(campaign: dict[str, Any], hpke: dict[str, Any], server_key: str | None,
                   users: Sequence[tuple[int, int, Sequence[int]]], seed: int) -> list[bytes]:
    """Per user (level index, reported level, items): the round-2 body, JSON bytes.

    ``campaign`` is the view with the published parameters; they are verified for every
    level (server signature included) before anything is sealed."""
    from segshuffle.client.messages import data_slots, round2_body
    from segshuffle.client.verify import verify_parameters

    rng = np.random.default_rng(seed)
    session = _session(campaign, hpke, server_key, rng)
    session.check_signatures(session.view, parameters=True)
    parameters = {level: verify_parameters(session.view, level_index=level,
                                           key_id=session.key.key_id,
                                           config_hash=session.config_hash,
                                           policy=session.policy)
                  for level in sorted({u[0] for u in users})}
    out = []
    for level, reported, items in users:
        _, slots = data_slots(items, parameters[level], level, rng)
        out.append(_json_bytes(round2_body(session.view, session.key, reported, slots)))
    return out


# -- CPU time from /proc -----------------------------------------------------------------
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("latin-1")
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    return [text[:text.index(" ")], "comm", *text[text.rindex(")") + 2:].split()]


def tree_cpu_seconds(roots: Sequence[int]) -> dict[int, float]:
    """For each root pid: user + system CPU seconds of it and every live descendant,
    plus what they hold for their reaped children (``utime + stime + cutime + cstime`` of
    /proc/<pid>/stat summed over the tree)."""
    parents: dict[int, int] = {}
    totals: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is None:
            continue
        pid = int(entry)
        parents[pid] = int(fields[3])
        totals[pid] = sum(int(fields[i]) for i in (13, 14, 15, 16)) / CLOCK_TICKS
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    answer = {}
    for root in roots:
        seen, stack, total = set(), [root], 0.0
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            total += totals.get(pid, 0.0)
            stack.extend(children.get(pid, ()))
        answer[root] = total
    return answer
