"""The cyclic garbage collector of a long-running service: start-up's heap frozen.

CPython frees most objects by reference counting; the cyclic collector exists for the
rest, and it runs by generations.  A full collection (generation 2) walks every tracked
object in the process, and it runs whenever the objects promoted into the oldest
generation since the last one exceed a quarter of it.  A service's oldest generation is
mostly what start-up made and will hold until exit: modules, classes, functions, the
pydantic and FastAPI schemas, numpy's and scipy's tables, several hundred thousand
objects that can never be garbage.  A request's own short-lived objects (the scope, the
coroutines and futures of its task, which form cycles) survive a young collection
whenever one runs while the request is in flight, so under load they reach the oldest
generation at a steady rate, and every few hundred requests a full collection walked
the whole start-up heap again.

Measured with ``py-spy record --native`` on the shuffler during the submission rounds of
``benchmarks/bench_services.py --users 10000`` (SQLite): ``gc_collect_main`` held about a
tenth of the shuffler's busy samples; with the start-up heap frozen it fell to about one
fiftieth.

:func:`freeze_start_up_heap` collects once and moves every object alive into the
permanent generation (:func:`gc.freeze`), which collections skip; objects made later are
collected as before.  It also raises the young generation's threshold from 700 to
:data:`YOUNG_THRESHOLD` allocations, so young collections run less often (each walks only
the young objects, so the work per object is unchanged); cyclic garbage waits for at most
that many allocations more before it is freed.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000
"""Net allocations of tracked objects between two young collections (CPython's default:
700)."""


def freeze_start_up_heap() -> None:
    """Collect once, freeze everything alive, and raise the young generation's threshold.

    Call it once, when start-up is done and before the first request; the objects alive
    then stay for the process's life (:func:`gc.unfreeze` undoes it)."""
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, oldest)
