"""Where the web client's files are, for the tools that serve them to a browser.

The web client (the ``segshuffle-web`` package, ``clients/web`` in the repository) is not
part of the Python distribution: it is JavaScript for browsers, delivered as its own
package.  The web demo and the browser tests serve its files, and find them, in this
order:

1. a folder given explicitly (``--web-client DIR`` of ``python -m
   segshuffle.testing.web_demo``, the ``root`` argument of its functions);
2. the ``SEGSHUFFLE_WEB_CLIENT`` environment variable;
3. ``clients/web`` under the current directory (the root of a checkout).

A folder is the web client's when it holds ``src/index.js``; the demo needs the checkout's
``demo/`` page beside it.  Nothing here looks at where the Python package itself is
installed.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The environment variable naming the web client's folder.
WEB_CLIENT_SETTING = "SEGSHUFFLE_WEB_CLIENT"

#: Where a checkout keeps the web client, relative to its root.
CHECKOUT_FOLDER = Path("clients") / "web"

#: The file that marks a folder as the web client's.
ENTRY = Path("src") / "index.js"


def web_client_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The web client's folder (see the module docstring), resolved.

    Raises :class:`FileNotFoundError` with a one-line message saying how to set it when
    the folder chosen does not hold ``src/index.js``.
    """
    if explicit is not None:
        root, source = Path(explicit), "the folder given"
    elif os.environ.get(WEB_CLIENT_SETTING):
        root, source = Path(os.environ[WEB_CLIENT_SETTING]), WEB_CLIENT_SETTING
    else:
        root, source = Path.cwd() / CHECKOUT_FOLDER, "the current directory's clients/web"
    root = root.expanduser().resolve()
    if not (root / ENTRY).is_file():
        raise FileNotFoundError(
            f"the web client is not at {root} ({source} has no {ENTRY.as_posix()}): run from "
            f"a checkout's root, set {WEB_CLIENT_SETTING} to its clients/web, or pass "
            "--web-client DIR")
    return root
