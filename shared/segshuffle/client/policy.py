"""What an app accepts from a campaign: the client's side of the guarantee.

The server chooses a campaign's settings and, after round 1, its parameters; a
malicious server chooses them to learn something.  :class:`ClientPolicy` holds the
limits the *app* sets, shipped with it, that no server answer can move:

- ``min_fake_tolerance``: the smallest fraction f of fake or colluding participants the
  campaign must account for (default 0);
- ``min_users``: the smallest ``min_users`` the campaign may have.  Default: the
  shuffler's default floor on participants per release,
  :data:`segshuffle.core.rules.SHUFFLER_MIN_USERS` = 10, since the server (which chooses
  the campaign's figure) should never go below the shuffler's.  An app whose shuffler
  runs with another floor sets it here; one shipped for one campaign should pin the
  figure it was built for;
- ``delta_ceiling``: the largest delta the client accepts.  Default
  :data:`segshuffle.core.rules.CLIENT_DELTA_CEILING` = 1e-3, a fixed number: nothing the
  server chooses (the campaign's ``min_users``, the round-1 count it claims) moves it;
- ``allow_unpadded``: accept a campaign without padding ids.  The guarantee then holds
  only because the client refuses to send a set of fewer than s items (an app opting in
  must enroll only users who hold at least s items, docs/protocol.md section 6);
- ``allow_variable_size``: accept a campaign whose submissions carry only the sent slots.
  The number of ciphertexts then reveals the user's level (and part of its send pattern)
  to the shuffler and to anyone watching the network (docs/protocol.md section 6, and the
  README's threat model).

Both ``allow_`` settings default to ``False``: a client refuses such campaigns unless its
app opted in.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from segshuffle.core import rules

from .errors import ClientError


@dataclass(frozen=True)
class ClientPolicy:
    """The app's acceptance limits (module docstring); invalid values raise ClientError."""

    min_fake_tolerance: float = 0.0
    min_users: int | None = None
    delta_ceiling: float | None = None
    allow_unpadded: bool = False
    allow_variable_size: bool = False

    def __post_init__(self) -> None:
        f = self.min_fake_tolerance
        if isinstance(f, bool) or not isinstance(f, (int, float)) \
                or not (math.isfinite(f) and 0.0 <= f < 1.0):
            raise ClientError(f"min_fake_tolerance must be in [0, 1), got {f!r}")
        object.__setattr__(self, "min_fake_tolerance", float(f))
        n = self.min_users
        if n is not None and (isinstance(n, bool) or not isinstance(n, int)
                              or not 1 <= n <= rules.MAX_USERS):
            raise ClientError(f"min_users must be an integer in [1, {rules.MAX_USERS}], "
                              f"got {n!r}")
        ceiling = self.delta_ceiling
        if ceiling is not None and (
                isinstance(ceiling, bool) or not isinstance(ceiling, (int, float))
                or not (math.isfinite(ceiling) and rules.MIN_DELTA <= ceiling < 1.0)):
            raise ClientError(f"delta_ceiling must be in [{rules.MIN_DELTA:g}, 1), "
                              f"got {ceiling!r}")
        for name in ("allow_unpadded", "allow_variable_size"):
            if not isinstance(getattr(self, name), bool):
                raise ClientError(f"{name} must be True or False")

    def with_fake_tolerance(self, minimum: float) -> ClientPolicy:
        """This policy, requiring at least ``minimum`` fake tolerance (the stricter wins)."""
        floor = ClientPolicy(min_fake_tolerance=minimum).min_fake_tolerance  # validated
        return dataclasses.replace(self, min_fake_tolerance=max(floor,
                                                                self.min_fake_tolerance))

    def with_delta_ceiling(self, ceiling: float) -> ClientPolicy:
        """This policy, accepting at most ``ceiling`` as delta (the stricter wins)."""
        limit = ClientPolicy(delta_ceiling=ceiling).delta_ceiling  # validated
        assert limit is not None
        current = self.delta_ceiling
        return dataclasses.replace(
            self, delta_ceiling=limit if current is None else min(current, limit))

    @property
    def min_users_required(self) -> int:
        """The smallest campaign ``min_users`` accepted: the app's, else the shuffler's
        default floor."""
        return rules.SHUFFLER_MIN_USERS if self.min_users is None else self.min_users

    def users_floor(self, campaign_min_users: int) -> int:
        """The fewest round-1 users a published count may claim."""
        return max(campaign_min_users, self.min_users_required)

    def delta_limit(self) -> float:
        """The largest delta accepted: the app's ceiling, else the fixed default."""
        if self.delta_ceiling is not None:
            return self.delta_ceiling
        return rules.CLIENT_DELTA_CEILING
