"""Client SDK: sync and async clients of the shuffler (the only service a client talks to;
it relays the server's public documents, which the client verifies).

- :class:`Client` / :class:`AsyncClient`: one user in one campaign, both rounds
  (:mod:`.sync`, :mod:`.aio`), with verification of everything the server
  publishes (:mod:`.verify`) before any data leaves the client.  ``client.state()``
  and ``Client.resume(...)`` carry a user from one process to the next between rounds;
  a submit call returns only once its submission is stored, and the session records
  each round's outcome (``client.outcome(round)``: stored, not stored, or unknown
  until the same submission is sent again).
- :class:`ClientPolicy` (:mod:`.policy`): what the app accepts from a campaign (delta
  ceiling, smallest ``min_users`` and fake tolerance, opt-ins for campaigns without
  padding or with variable-size submissions), fixed by the app, never by a server.
- :mod:`.messages`: the randomizers and the sealing of each message.
- :mod:`.vectors`: the test vectors a client in another language must reproduce
  (docs/wire.md; ``python -m segshuffle.client.vectors``), the client's own verdicts
  on the parameter documents included.

Operator and test tooling (local services, simulated populations) lives in
:mod:`segshuffle.testing`, outside the SDK.

The names below are imported on first use (PEP 562), so that importing a light
submodule such as :mod:`.errors` or :mod:`.tls` does not load the protocol code
(numpy, the accountant, scipy): ``segshuffle admin`` starts without them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .aio import AsyncClient
    from .errors import (
        CampaignEndedError,
        ClientError,
        ServiceError,
        SubmissionError,
        SubmissionRefusedError,
        SubmissionUnknownError,
        VerificationError,
        WaitTimeoutError,
    )
    from .messages import SentRound1, SentRound2
    from .policy import ClientPolicy
    from .retry import RetryPolicy
    from .session import STATE_VERSION
    from .sync import Client

_WHERE = {
    "AsyncClient": ".aio",
    "CampaignEndedError": ".errors",
    "Client": ".sync",
    "ClientError": ".errors",
    "ClientPolicy": ".policy",
    "RetryPolicy": ".retry",
    "STATE_VERSION": ".session",
    "SentRound1": ".messages",
    "SentRound2": ".messages",
    "ServiceError": ".errors",
    "SubmissionError": ".errors",
    "SubmissionRefusedError": ".errors",
    "SubmissionUnknownError": ".errors",
    "VerificationError": ".errors",
    "WaitTimeoutError": ".errors",
}

__all__ = [
    "STATE_VERSION",
    "AsyncClient",
    "CampaignEndedError",
    "Client",
    "ClientError",
    "ClientPolicy",
    "RetryPolicy",
    "SentRound1",
    "SentRound2",
    "ServiceError",
    "SubmissionError",
    "SubmissionRefusedError",
    "SubmissionUnknownError",
    "VerificationError",
    "WaitTimeoutError",
]


def __getattr__(name: str) -> Any:
    """Import the submodule that defines ``name`` the first time it is asked for."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
