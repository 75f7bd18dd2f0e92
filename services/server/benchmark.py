"""Benchmark of the server's batch intake: ``python -m segshuffle.services.server.benchmark``.

Prints medians over repeated runs of:

1. opening (HPKE decrypt + strict decode) one chunk in-process;
2. the same through the process pool of :class:`~.decrypt.Decryptor`;
3. a whole ``PUT`` of a chunk through the HTTP app (body validation, decryption,
   SQLite transaction with nonce and count writes), in-process ASGI;
4. ``complete`` of round 1 (histogram + optimizer) for a three-level campaign.

Progress lines go to stderr; the figures to stdout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fastapi.testclient import TestClient

from segshuffle.crypto import build_info, generate_private_key, key_id_for, private_key_bytes, seal
from segshuffle.crypto.hpke import public_key_from_config
from segshuffle.wire.models import CampaignView, b64url_encode
from segshuffle.wire.plaintext import item_plaintext, level_plaintext

from .app import create_app
from .decrypt import Decryptor, open_chunk
from .settings import Settings

ADMIN = "benchmark-admin-token-000000"
SHUFFLER = "benchmark-shuffler-token-000"


def _median_seconds(function, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _progress(message: str) -> None:
    sys.stderr.write(f"[benchmark] {message}\n")
    sys.stderr.flush()


def bench_open(size: int, repeats: int, workers: int) -> None:
    key = generate_private_key()
    info = build_info("bench", 2, key_id_for(key), bytes(32))
    _progress(f"sealing {size} messages")
    ciphertexts = [seal(key.public_key(), info, item_plaintext(i % 1000)) for i in range(size)]
    raw = private_key_bytes(key)
    seconds = _median_seconds(lambda: open_chunk(raw, info, ciphertexts), repeats)
    print(f"open in-process: {size} messages, median {seconds * 1e3:.1f} ms, "
          f"{size / seconds:,.0f} messages/s")
    decryptor = Decryptor(workers=workers, threshold=1)
    try:
        decryptor.open(raw, info, ciphertexts[:workers])  # start the pool
        seconds = _median_seconds(lambda: decryptor.open(raw, info, ciphertexts), repeats)
    finally:
        decryptor.close()
    print(f"open with {workers} worker processes: {size} messages, median "
          f"{seconds * 1e3:.1f} ms, {size / seconds:,.0f} messages/s")


def bench_http(size: int, repeats: int, workers: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        settings = Settings(database=str(Path(directory) / "bench.sqlite3"), admin_token=ADMIN,
                            shuffler_token=SHUFFLER, decrypt_workers=workers,
                            synchronous="FULL", max_body_bytes=64 << 20)
        admin = {"Authorization": f"Bearer {ADMIN}"}
        shuffler = {"Authorization": f"Bearer {SHUFFLER}"}
        with TestClient(create_app(settings)) as client:
            view = CampaignView.model_validate(client.post("/v1/campaigns", headers=admin, json={
                "id": "bench", "domain_size": 1000, "set_size": 4, "levels": [0.5, 1.0, 2.0],
                "min_users": 100}).json())
            pinned = public_key_from_config(view.hpke_config)
            info = build_info("bench", 1, view.key_id, view.context_hash_for(1))
            _progress(f"sealing {size * repeats} level messages")
            chunks = [[b64url_encode(seal(pinned.public_key, info, level_plaintext(i % 3)))
                       for i in range(size)] for _ in range(repeats)]
            times = []
            for index, part in enumerate(chunks):
                body = {"chunk_index": index, "chunk_count": repeats, "stream": "levels",
                        "ciphertexts": part}
                started = time.perf_counter()
                response = client.put("/v1/campaigns/bench/rounds/1/batches/b", json=body,
                                      headers=shuffler)
                assert response.status_code == 202, response.text
                _wait_decoded(client, shuffler, index)
                times.append(time.perf_counter() - started)
                _progress(f"chunk {index + 1}/{repeats}: {times[-1] * 1e3:.0f} ms")
            seconds = statistics.median(times)
            print(f"PUT chunk over HTTP and decode (ASGI, {workers} workers, "
                  f"synchronous=FULL): {size} messages, median {seconds * 1e3:.1f} ms, "
                  f"{size / seconds:,.0f} messages/s")
            started = time.perf_counter()
            response = client.post("/v1/campaigns/bench/rounds/1/batches/b/complete",
                                   headers=shuffler)
            while response.status_code == 202:  # the completion job runs in the background
                time.sleep(0.05)
                response = client.post("/v1/campaigns/bench/rounds/1/batches/b/complete",
                                       headers=shuffler)
            assert response.status_code == 200, response.text
            print(f"complete round 1 (n = {size * repeats}, K = 3, d + s = 1004): "
                  f"{time.perf_counter() - started:.2f} s")


def _wait_decoded(client: TestClient, headers: dict[str, str], index: int,
                  timeout: float = 600.0) -> None:
    """Wait until the decode workers have counted chunk ``index`` of the benchmark batch."""
    deadline = time.monotonic() + timeout
    url = f"/v1/campaigns/bench/rounds/1/batches/b/chunks/levels/{index}"
    while client.get(url, headers=headers).json()["state"] != "decoded":
        if time.monotonic() > deadline:
            raise TimeoutError(f"chunk {index} was not decoded within {timeout:g} s")
        time.sleep(0.001)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=5000, help="messages per chunk")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    bench_open(args.size, args.repeats, args.workers)
    bench_http(args.size, args.repeats, args.workers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
