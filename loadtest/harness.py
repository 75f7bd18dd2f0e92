"""Plumbing of the load test: target checks, tokens, latency statistics, the report.

Kept apart from the driver (``loadtest.py``) so that it can be tested without any
running service.
"""

from __future__ import annotations

import ipaddress
import math
import os
import socket
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

TOKEN_VARIABLES = {
    "admin": ("SEGSHUFFLE_ADMIN_TOKEN", "SEGSHUFFLE_SERVER_ADMIN_TOKEN"),
    "operator": ("SEGSHUFFLE_OPERATOR_TOKEN", "SEGSHUFFLE_SHUFFLER_OPERATOR_TOKEN"),
    "issuer": ("SEGSHUFFLE_ISSUER_PRIVATE_KEY",),
}
"""Where each token is looked up, in order (deploy/.env names first, then service names)."""


class TargetError(ValueError):
    """A target URL the load test refuses to drive."""


def check_target(url: str, *, allow_private: bool = False) -> str:
    """Return ``url`` without a trailing slash if every address of its host is loopback.

    A load test sends thousands of requests; it must only ever hit a deployment on
    this machine.  With ``allow_private`` (used inside the compose network, where the
    services are reached by name), private addresses (RFC 1918, RFC 4193) are accepted
    too.  Names are resolved, so ``localhost`` works and a name that resolves
    elsewhere is refused.
    """
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise TargetError(f"target must be an http(s) URL with a host, got {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise TargetError(f"target must not carry credentials, a query or a fragment: {url!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise TargetError(f"bad port in {url!r}: {exc}") from None
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise TargetError(f"cannot resolve {parts.hostname!r}: {exc.strerror}") from None
    addresses = {ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos}
    for address in addresses:
        if address.is_loopback or (allow_private and address.is_private
                                   and not address.is_link_local):
            continue
        allowed = "loopback or private" if allow_private else "loopback"
        raise TargetError(f"{parts.hostname} resolves to {address}, not a {allowed} address; "
                          f"the load test only drives local deployments")
    return url.rstrip("/")


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=value`` lines of a dotenv file (comments and blank lines skipped)."""
    values: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{path}:{number}: expected KEY=value")
        values[key.strip()] = value.strip().strip("'\"")
    return values


def resolve_token(role: str, explicit: str | None, env_file: Path | None,
                  environ: Mapping[str, str] | None = None, *, flag: str | None = None) -> str:
    """The ``role`` token: the flag, else the environment, else the env file."""
    if explicit:
        return explicit
    names = TOKEN_VARIABLES[role]
    env = os.environ if environ is None else environ
    for name in names:
        if env.get(name):
            return env[name]
    if env_file is not None and env_file.is_file():
        values = read_env_file(env_file)
        for name in names:
            if values.get(name):
                return values[name]
    where = f" or in {env_file}" if env_file is not None else ""
    raise ValueError(f"no {role} token: pass {flag or f'--{role}-token'} or set "
                     f"{names[0]}{where}")


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics."""
    if not values:
        return math.nan
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must lie in [0, 100], got {q}")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Metric:
    """One figure of the report: its name, unit and how to print it."""

    key: str
    label: str
    unit: str
    digits: int = 1


def summarize(runs: Sequence[Mapping[str, float]], metrics: Iterable[Metric]) -> list[dict]:
    """Median, minimum and maximum of every metric over the repeats."""
    rows = []
    for metric in metrics:
        values = [float(run[metric.key]) for run in runs if metric.key in run]
        values = [v for v in values if not math.isnan(v)]
        if not values:
            continue
        rows.append({"key": metric.key, "label": metric.label, "unit": metric.unit,
                     "digits": metric.digits, "median": statistics.median(values),
                     "min": min(values), "max": max(values), "repeats": len(values)})
    return rows


def format_table(rows: Sequence[Mapping[str, object]]) -> str:
    """A fixed-width table of :func:`summarize` rows."""
    header = f"{'metric':<38} {'median':>12} {'min':>12} {'max':>12}  unit"
    lines = [header, "-" * len(header)]
    for row in rows:
        digits = int(row["digits"])  # type: ignore[arg-type]
        cells = [f"{float(row[c]):>12.{digits}f}" for c in ("median", "min", "max")]  # type: ignore[arg-type]
        lines.append(f"{row['label']:<38} {' '.join(cells)}  {row['unit']}")
    return "\n".join(lines)
