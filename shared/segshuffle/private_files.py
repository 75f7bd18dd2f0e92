"""Folders and files only their owner may use: the state the services keep on disk.

A service's state is its SQLite database (with the ``-wal`` and ``-shm`` files beside
it), its logs and its key folders.  What they hold is secret or personal, and even a
key folder's file names say which campaigns exist.  So whatever the project creates
there is private, under any umask: folders 0700, files 0600.  A umask only ever takes
permissions away, so each is created with exactly these bits and set to them once more
(a umask that took away the owner's own bits would otherwise leave it unusable).

What already exists is left as it is (an operator may have reasons, and changing the
modes of a restored backup behind the operator's back would hide the problem): a
service opening an existing folder or file checks it with :func:`report_open` instead,
which logs one warning per path that others may use, naming the path, its mode and the
``chmod`` that makes it private.

Light: only the standard library, so the client-side key tools may use it too.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

PRIVATE_FOLDER_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
OPEN_BITS = 0o077
"""The permission bits that let others than the owner (its group, everyone) use a path."""

log = logging.getLogger("segshuffle.files")


def make_private_folder(path: str | os.PathLike[str]) -> Path:
    """The folder ``path``, created if missing, and so are its missing parents: each one
    0700.  A folder that exists is left as it is; one another process creates meanwhile
    is taken as it is.  Raises ``OSError`` if a path on the way is a file."""
    folder = Path(path)
    missing: list[Path] = []
    for candidate in (folder, *folder.parents):  # bounded by the path's depth
        if candidate.is_dir():
            break
        missing.append(candidate)
    for candidate in reversed(missing):
        try:
            os.mkdir(candidate, PRIVATE_FOLDER_MODE)
        except FileExistsError:
            if not candidate.is_dir():
                raise
            continue  # another process made it meanwhile
        os.chmod(candidate, PRIVATE_FOLDER_MODE)
    return folder


def create_private_file(path: str | os.PathLike[str], flags: int = os.O_WRONLY) -> int:
    """A new file at ``path``, mode 0600, opened with ``flags``; returns its descriptor.
    Raises ``FileExistsError`` if something is there already (never takes it over)."""
    descriptor = os.open(path, flags | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    try:
        os.fchmod(descriptor, PRIVATE_FILE_MODE)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def open_private_append(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for appending (a log, a lock file): created 0600 if missing, else
    opened as it is (its mode is the caller's to report)."""
    try:
        descriptor = create_private_file(path, os.O_WRONLY | os.O_APPEND)
    except FileExistsError:
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND)
    return os.fdopen(descriptor, "ab")


def open_mode(path: str | os.PathLike[str]) -> int | None:
    """The permission bits of ``path`` if others than its owner may use it (any group or
    other bit); None for a private path, or one that does not exist or cannot be read."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None
    return mode if mode & OPEN_BITS else None


def open_paths(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """One line for each of ``paths`` that others may use (each path once, in order):
    the path, its mode and the command that makes it private."""
    lines: list[str] = []
    for path in dict.fromkeys(str(p) for p in paths):
        mode = open_mode(path)
        if mode is None:
            continue
        kind, private = ("folder", PRIVATE_FOLDER_MODE) if os.path.isdir(path) else (
            "file", PRIVATE_FILE_MODE)
        lines.append(f"the {kind} {path} has mode {mode:04o}: others than its owner may "
                     f"use it (make it private: chmod {private:o} {path})")
    return lines


def report_open(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Log a warning for each of ``paths`` that others may use (:func:`open_paths`) and
    return the lines.  Nothing is changed, and nothing refused."""
    lines = open_paths(paths)
    for line in lines:
        log.warning("%s", line)
    return lines
