"""Compile segshuffle's bytecode before a benchmark times whole commands.

An installed package carries its compiled bytecode (pip writes it at install time), and a
development checkout gets it on its first import, unless the environment forbids writing it
(``PYTHONDONTWRITEBYTECODE``, set on some machines and CI runners): then every process
compiles each of the package's modules from source again, about 0.07-0.1 CPU-s per command
on a 2.8 GHz core, which the bare numpy and scipy import a benchmark compares against
(compiled at install) never pays.  Writing the bytecode once, explicitly, makes a timed
command cost what it costs where it is deployed; Python reads existing bytecode whatever
that setting says.
"""

from __future__ import annotations

import compileall
import importlib.util
from pathlib import Path


def compile_package(name: str = "segshuffle") -> Path:
    """Write the bytecode of every module of the package ``name`` (where it is imported
    from); return the package's directory.  Up-to-date bytecode is left as it is."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the package {name!r} is not importable here")
    directory = Path(next(iter(spec.submodule_search_locations)))
    if not compileall.compile_dir(directory, quiet=1):
        raise RuntimeError(f"compiling {directory} failed")
    return directory
