"""Per-source rate limiting of public routes: token buckets in a bounded LRU table.

Each source (client address) has a bucket of capacity ``burst`` refilled at ``rate``
tokens per second; a request takes one token or is refused with the time until one is
available:

    tokens(t) = min(burst, tokens(t0) + rate * (t - t0)),   wait = (1 - tokens(t)) / rate.

The table holds at most ``max_sources`` buckets; the least recently seen is evicted
first (it restarts full if it comes back), so memory is bounded whatever the request mix.
Sources are kept as keyed BLAKE2b digests under a per-process random key, never as
addresses, and nothing is logged or stored.

Behind a reverse proxy every request comes from the proxy's address; :class:`SourceResolver`
then takes the client address from ``X-Forwarded-For``, but only when the direct peer is
one of the configured trusted proxies (otherwise anyone could choose their own source).

:class:`WindowCap` is the other shape of limit: one budget for all callers together, a
hard ceiling on what passes in any window of time (a token bucket lets its burst *and*
its refill through in one window, up to twice its nominal figure).
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_FORWARDED_HOPS = 32
"""Entries of an X-Forwarded-For header that are looked at (right to left)."""


class TokenBucketLimiter:
    """Token buckets per source, at most ``max_sources`` of them (module docstring)."""

    def __init__(self, rate: float, burst: int, max_sources: int, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not rate > 0 or not math.isfinite(rate):
            raise ValueError(f"rate must be a positive number, got {rate!r}")
        if burst < 1 or max_sources < 1:
            raise ValueError("burst and the table size must be >= 1")
        self.rate = float(rate)
        self.burst = int(burst)
        self.max_sources = int(max_sources)
        self._clock = clock
        self._buckets: OrderedDict[bytes, tuple[float, float]] = OrderedDict()
        self._key = secrets.token_bytes(32)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._buckets)

    def acquire(self, source: str) -> float:
        """Take one token of ``source``'s bucket: 0.0 if allowed, else seconds to wait."""
        digest = hashlib.blake2b(source.encode("utf-8", "replace"), key=self._key,
                                 digest_size=16).digest()
        now = self._clock()
        with self._lock:
            entry = self._buckets.pop(digest, None)
            tokens = float(self.burst) if entry is None else min(
                float(self.burst), entry[0] + (now - entry[1]) * self.rate)
            wait = 0.0
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) / self.rate
            self._buckets[digest] = (tokens, now)  # most recently used at the end
            while len(self._buckets) > self.max_sources:
                self._buckets.popitem(last=False)
        return wait


class WindowCap:
    """At most ``limit`` admissions in any ``window`` seconds, all callers together.

    The times of the last ``limit`` admissions are kept (a ring of ``limit`` floats, so
    memory is bounded by the setting); a request is admitted only if the oldest of them
    is at least ``window`` seconds old, or fewer than ``limit`` were ever admitted.  So
    no half-open interval of ``window`` seconds holds more than ``limit`` admissions (if
    ``limit + 1`` did, the last would have been admitted less than ``window`` after the
    admission ``limit`` before it), and any interval of ``T`` seconds at most
    ``limit * ceil(T / window)``: a ceiling, not an average.  A refusal costs nothing
    and records nothing, so refused requests never postpone the next admission.
    """

    def __init__(self, limit: int, window: float = 60.0, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if limit < 1:
            raise ValueError(f"the cap must admit at least 1 request, got {limit!r}")
        if not window > 0 or not math.isfinite(window):
            raise ValueError(f"the window must be a positive number of seconds, got {window!r}")
        self.limit = int(limit)
        self.window = float(window)
        self._clock = clock
        self._admitted: deque[float] = deque(maxlen=self.limit)
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Admit one request: 0.0 if admitted (and counted), else the seconds until the
        oldest admission in the window leaves it (when one will be admitted again)."""
        now = self._clock()
        with self._lock:
            admitted = self._admitted
            if len(admitted) == self.limit:
                wait = admitted[0] + self.window - now
                if wait > 0:
                    return wait
            admitted.append(now)  # the ring drops the oldest admission
        return 0.0


def parse_networks(text: str) -> list[Network]:
    """Comma- or space-separated addresses or CIDR networks (``10.0.0.0/8, ::1``)."""
    networks: list[Network] = []
    for part in text.replace(",", " ").split():
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ValueError(f"not an IP address or network: {part!r}") from None
    return networks


def _in(address: str, networks: Iterable[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)


class SourceResolver:
    """The source address of a request, honouring ``X-Forwarded-For`` from trusted proxies.

    With the direct peer in ``trusted``, the source is the rightmost forwarded address
    that is not itself a trusted proxy (entries further left were written by the client
    and prove nothing); otherwise it is the peer.
    """

    def __init__(self, trusted: Iterable[Network] = ()) -> None:
        self.trusted = list(trusted)

    def source(self, peer: str | None, forwarded_for: str | None) -> str:
        peer = peer or "unknown"
        if not self.trusted or not forwarded_for or not _in(peer, self.trusted):
            return peer
        hops = [h.strip() for h in forwarded_for.split(",")][-MAX_FORWARDED_HOPS:]
        for hop in reversed(hops):
            if hop and not _in(hop, self.trusted):
                return hop
        return peer
