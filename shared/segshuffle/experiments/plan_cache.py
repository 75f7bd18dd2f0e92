"""Panel plans kept on disk between runs of ``segshuffle reproduce --plan-cache DIR``.

A plan (:class:`~segshuffle.experiments.methods.PanelPlan`) depends only on public
parameters and on the code that computes it: the accountant, the optimizer and the
baselines' calibrations.  Each plan is stored under the SHA-256 of its inputs (panel
key, n, s, domains, shares, grid, guarded R values and w_max) together with the SHA-256
of every source file of :mod:`segshuffle.core` and of the planning modules here, so a
change to any of them plans afresh instead of reading a stale plan.  Files are written
to a temporary name and renamed, so a run killed midway leaves no partial plan.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from functools import cache
from pathlib import Path

from .methods import PanelPlan

_PLANNING_MODULES = ("methods.py", "calibration.py", "balls_into_bins.py", "privset.py",
                     "settings.py")


@cache
def code_digest() -> str:
    """SHA-256 over the source of :mod:`segshuffle.core` and the planning modules."""
    here = Path(__file__).resolve().parent
    core = here.parent / "core"
    paths = sorted(core.rglob("*.py")) + [here / name for name in _PLANNING_MODULES]
    digest = hashlib.sha256()
    for path in paths:
        digest.update(str(path.relative_to(here.parent)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


class PlanCache:
    """A folder of pickled plans keyed by their inputs and the code's digest."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"cannot create plan cache {self.folder}: {exc.strerror}") from None

    def _path(self, inputs: tuple) -> Path:
        key = hashlib.sha256(repr((code_digest(), inputs)).encode()).hexdigest()
        return self.folder / f"plan-{key[:32]}.pickle"

    def load(self, inputs: tuple) -> PanelPlan | None:
        """The plan stored for ``inputs``, or None (missing or unreadable)."""
        path = self._path(inputs)
        try:
            with path.open("rb") as handle:
                plan = pickle.load(handle)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError):
            return None
        return plan if isinstance(plan, PanelPlan) else None

    def store(self, inputs: tuple, plan: PanelPlan) -> None:
        """Keep ``plan`` for ``inputs`` (atomically: a temporary file renamed)."""
        path = self._path(inputs)
        handle, temporary = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as out:
                pickle.dump(plan, out, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
