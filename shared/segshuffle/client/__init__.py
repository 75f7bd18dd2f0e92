"""Client SDK: sync and async clients of the shuffler and server.

- :class:`Client` / :class:`AsyncClient`: one user in one campaign, both rounds
  (:mod:`.sync`, :mod:`.aio`), with verification of everything the server
  publishes (:mod:`.verify`) before any data leaves the client.
- :mod:`.messages`: the randomizers and the sealing of each message.

Operator and test tooling (local services, simulated populations) lives in
:mod:`segshuffle.testing`, outside the SDK.
"""

from .aio import AsyncClient
from .errors import CampaignEndedError, ClientError, ServiceError, VerificationError
from .messages import SentRound1, SentRound2
from .session import RetryPolicy
from .sync import Client

__all__ = [
    "AsyncClient",
    "CampaignEndedError",
    "Client",
    "ClientError",
    "RetryPolicy",
    "SentRound1",
    "SentRound2",
    "ServiceError",
    "VerificationError",
]
