"""segshuffle: segmented private data aggregation in the multi-message shuffle model.

Users choose one of several privacy levels (the server sees how many chose each;
what protects one user's choice is in docs/protocol.md section 4.6), contribute
set-valued data through a shuffler, and a server estimates item frequencies.  The
pure protocol logic lives in :mod:`segshuffle.core`; the services, the client SDK and
the command line build on it.
"""

__version__ = "0.1.0"
