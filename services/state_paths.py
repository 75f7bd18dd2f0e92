"""The directories a service keeps its state in, checked before it starts.

A service given a directory it cannot write in (a read-only mount, a path through a
regular file, ``/proc``) would otherwise fail deep inside opening its database or making
a key, with a traceback.  Each settings class lists the directories it writes
in (:class:`StateDirectory`, from ``ServiceSettings.state_directories``), and
:func:`require_writable` looks at every one before anything is made: a directory that
does not exist where it must, a path through something that is not a directory, or one
this process cannot create a file in is a :class:`UnusableDirectoryError`, a
``ValueError`` naming the setting, which the command line prints as its one line with exit
status 2 (bad input: the operator chose the path).

Whether a file can be created is found out by creating one: an unnamed temporary file
(``O_TMPFILE``, else a random name unlinked at once), since permission bits say nothing
for root, a read-only mount or a pseudo file system.  Nothing is left behind, and no
directory is made here: the service makes its key directories itself, after binding its
port.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["StateDirectory", "UnusableDirectoryError", "require_writable"]


class UnusableDirectoryError(ValueError):
    """A directory of the service's state cannot be written in; the message is one line
    naming the setting."""


@dataclass(frozen=True)
class StateDirectory:
    """One directory a service creates files in."""

    label: str
    """The setting that names it, as the operator knows it:
    ``SEGSHUFFLE_SHUFFLER_KEY_DIRECTORY (--key-directory)``."""
    path: Path
    made_when_missing: bool
    """The service makes it (with its parents) if it is missing: then its nearest existing
    ancestor must take new entries; otherwise it must exist."""


def nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists (as anything); bounded by the path's
    depth."""
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return candidate
    return Path(path.anchor or ".")


def can_create_files_in(directory: Path) -> OSError | None:
    """None if this process can create a file in ``directory``, else why not (the error
    creating an unnamed temporary file there)."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            return None
    except OSError as exc:
        return exc


def check(state: StateDirectory) -> None:
    """Raise :class:`UnusableDirectoryError` if ``state`` cannot hold the service's files
    (module docstring)."""
    path = state.path.expanduser().absolute()
    if path.is_dir():
        target = path
    elif os.path.lexists(path):
        raise UnusableDirectoryError(f"{state.label}: {path} is not a directory")
    elif not state.made_when_missing:
        raise UnusableDirectoryError(f"{state.label}: the directory {path} does not exist: "
                                     "create it first, or give another path")
    else:
        target = nearest_existing(path)
        if not target.is_dir():
            raise UnusableDirectoryError(f"{state.label}: cannot make {path}: {target} is "
                                         "not a directory")
    refused = can_create_files_in(target)
    if refused is not None:
        made = "" if target == path else f" (to make {path})"
        raise UnusableDirectoryError(f"{state.label}: cannot create files in {target}{made}: "
                                     f"{refused.strerror or refused}")


def require_writable(directories: Iterable[StateDirectory]) -> None:
    """Check every directory of a service's state (:func:`check`), in order; the first
    that cannot be used raises."""
    for state in directories:
        check(state)
