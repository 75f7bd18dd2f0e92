"""The synchronous client: one user, one campaign, both rounds over HTTP (httpx).

Typical use::

    with Client(shuffler_url, "survey-1") as client:
        client.campaign()                  # fetch + verify the configuration and key
        client.enroll(invitation)          # the operator's invitation buys a one-time token
        client.submit_level(level_index)   # round 1
        ...                                # the operator releases round 1
        client.fetch_parameters()          # verified for this user's level, or refused
        client.submit_data(my_items)       # round 2

The client talks to the shuffler only.  The shuffler relays the server's public
documents (the campaign view and key config) unmodified and the client verifies them
(hashes, key pin, parameters), so the server never sees a client's address or timing.
The server signs every view with its document-signing key: an app that ships that
public key passes it as ``server_key`` and refuses any view, key, parameters or ending
the server did not sign, so a relay cannot substitute a key of its own.  Without it the
first view a client accepts pins the campaign's key (trust on first use; ``key_id`` pins
a key id known out of band).

Every request that fails transiently (no answer, 5xx, 429) is retried with
exponential backoff, or after the service's ``Retry-After`` where that is longer (a rate
limit on enrollment or submissions), within the :class:`RetryPolicy`'s budget.  A
submission retried after an ambiguous failure (the request may have arrived) that then
meets ``already-submitted`` counts as done: the earlier attempt got through.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from segshuffle.wire.models import (
    CampaignView,
    EnrollmentResponse,
    HpkeConfig,
    PublishedParameters,
    RoundStatus,
)

from .errors import ServiceError
from .messages import SentRound1, SentRound2
from .policy import ClientPolicy
from .session import (
    M,
    PublicCache,
    Received,
    RetryPolicy,
    UserSession,
    network_error,
    parse,
    receive,
    service_error,
)
from .tls import shared_context


class Client:
    """Synchronous SDK client (see the module docstring)."""

    def __init__(
        self,
        shuffler_url: str,
        campaign_id: str,
        *,
        rng: object = None,
        retry: RetryPolicy | None = None,
        timeout: float = 30.0,
        policy: ClientPolicy | None = None,
        allow_insecure: bool = False,
        min_fake_tolerance: float = 0.0,
        key_id: str | None = None,
        server_key: str | None = None,
        http: httpx.Client | None = None,
        cache: PublicCache | None = None,
        ca_file: str | os.PathLike[str] | None = None,
    ) -> None:
        """``ca_file``: PEM certificates of the private CA that signed the shuffler's
        certificate, trusted instead of the system's store (:mod:`.tls`); ``http``: a
        client to share, which brings its own trust settings (not both).  Clients without
        ``http`` share one verifying TLS context per process (per CA file with
        ``ca_file``) instead of building their own."""
        self.session = UserSession(campaign_id, rng, policy=policy, allow_insecure=allow_insecure,
                                   min_fake_tolerance=min_fake_tolerance, key_id=key_id,
                                   server_key=server_key)
        self.shuffler_url = shuffler_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self.cache = cache
        self._own_http = http is None
        if http is not None and ca_file is not None:
            raise ValueError("pass ca_file or http, not both (http brings its own trust)")
        self._http = http or httpx.Client(timeout=timeout, verify=shared_context(ca_file))

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- saving and resuming -------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """This user's session as a JSON-serialisable dict, for :meth:`resume` in a later
        process (an app restarted between round 1 and round 2; the invitation cannot be
        used twice).  The document is versioned (``segshuffle.client.STATE_VERSION``).

        **It holds the user's bearer token and their privacy level**: anyone who reads it
        can submit as this user and learns the level they chose.  Store it like a secret
        (the platform's keystore or an encrypted file), never in logs or analytics.
        Save it after :meth:`enroll` and again after :meth:`submit_level`.
        """
        return self.session.state()

    @classmethod
    def resume(
        cls,
        shuffler_url: str,
        state: Mapping[str, Any] | str | bytes,
        *,
        campaign_id: str | None = None,
        rng: object = None,
        retry: RetryPolicy | None = None,
        timeout: float = 30.0,
        policy: ClientPolicy | None = None,
        allow_insecure: bool = False,
        min_fake_tolerance: float = 0.0,
        key_id: str | None = None,
        server_key: str | None = None,
        http: httpx.Client | None = None,
        cache: PublicCache | None = None,
        ca_file: str | os.PathLike[str] | None = None,
    ) -> Client:
        """A client for the user whose :meth:`state` is ``state`` (the dict, or its JSON).

        The restored client keeps every check: the round-1 pins (key and configuration
        hash) come from the state and every view it fetches must match them, with the
        server's signatures when the state or ``server_key`` carries the server's key;
        the round-2 parameters are fetched and verified for the saved level.  Give
        ``campaign_id`` to refuse a state saved for another campaign.  A state that is
        malformed, altered (checksum), of another version, for another campaign, or at
        odds with ``key_id`` / ``server_key`` is refused with a
        :class:`~segshuffle.client.errors.ClientError`; nothing is fetched here.
        """
        session = UserSession.from_state(
            state, campaign_id=campaign_id, rng=rng, policy=policy,
            allow_insecure=allow_insecure,
            min_fake_tolerance=min_fake_tolerance, key_id=key_id, server_key=server_key)
        client = cls(shuffler_url, session.campaign_id, rng=session.rng, retry=retry,
                     timeout=timeout, allow_insecure=allow_insecure, http=http, cache=cache,
                     ca_file=ca_file)
        client.session = session
        return client

    # -- transport -----------------------------------------------------------------------
    def _request(self, method: str, url: str, what: str, *, submission: bool = False,
                 **kwargs: Any) -> httpx.Response:
        ambiguous, waited = False, 0.0
        for attempt in range(self.retry.attempts):
            try:
                response = self._http.request(method, url, **kwargs)
            except httpx.HTTPError as exc:
                error = network_error(exc, what)
                if error.certificate:
                    raise error from None
                ambiguous = ambiguous or not isinstance(exc, httpx.ConnectError)
            else:
                if response.status_code < 400:
                    return response
                error = service_error(response, what)
                if submission and ambiguous and error.problem == "already-submitted":
                    return response  # an earlier attempt arrived
                if not error.transient:
                    raise error
                ambiguous = ambiguous or response.status_code >= 500
            wait = self.retry.wait(attempt, error.retry_after, waited)
            if wait is None:
                break
            time.sleep(wait)
            waited += wait
        raise error

    def _fetch(self, model: type[M], url: str, what: str, *,
               fresh: bool = False) -> Received[M]:
        """GET a public document, through the shared cache unless ``fresh``; with the
        digest of its bytes, which lets the session share verdicts on it."""
        if self.cache is not None and not fresh:
            cached = self.cache.get(url)
            if cached is not None:
                return cached  # type: ignore[no-any-return]
        value = receive(model, self._request("GET", url, what), what)
        if self.cache is not None:
            self.cache.put(url, value)
        return value

    def _get(self, model: type[M], url: str, what: str, *, fresh: bool = False) -> M:
        """:meth:`_fetch`'s document alone."""
        return self._fetch(model, url, what, fresh=fresh).value

    # -- API -----------------------------------------------------------------------------
    def _view(self, *, fresh: bool = False) -> Received[CampaignView]:
        url = self.shuffler_url + self.session.campaign_path
        return self._fetch(CampaignView, url, "campaign", fresh=fresh)

    def campaign(self) -> CampaignView:
        """Fetch the campaign view and key config, verify them, pin key id and config hash."""
        s = self.session
        view = self._view()
        hpke = self._fetch(HpkeConfig, self.shuffler_url + s.campaign_path + "/hpke-config",
                           "key config")
        return s.accept_campaign(view, hpke)

    def enroll(self, invitation: str | None = None) -> str:
        """Obtain a one-time user token from the shuffler with the user's invitation (None
        only for a shuffler with open enrollment).  The client proposes the token, so a
        retry after an ambiguous failure gets it back rather than ``invitation-used``."""
        body = self.session.enrollment_body(invitation)  # the same body on every retry
        url = self.shuffler_url + self.session.campaign_path + "/enrollments"
        response = self._request("POST", url, "enrollment", json=body)
        return self.session.accept_enrollment(
            parse(EnrollmentResponse, response, "enrollment"))

    def submit_level(self, level_index: int) -> SentRound1:
        """Round 1: send the (possibly randomized) level, sealed."""
        s = self.session
        if s.view is None:
            self.campaign()
        body, sent = s.round1(level_index)
        url = self.shuffler_url + s.round_path(1) + "/submissions"
        self._request("POST", url, "round-1 submission", submission=True,
                      json=body, headers=s.auth())
        s.round1_sent(sent)
        return sent

    def round_status(self, round_number: int, *, fresh: bool = False) -> RoundStatus:
        """The shuffler's view of a round: participants, threshold, release state."""
        url = self.shuffler_url + self.session.round_path(round_number)
        return self._get(RoundStatus, url, "round status", fresh=fresh)

    def fetch_parameters(self, level_index: int | None = None) -> PublishedParameters:
        """Fetch the round-2 parameters and verify them for this user's level.

        Raises :class:`~segshuffle.client.errors.VerificationError` if they do not
        give the level its guarantee (nothing is sent then).
        """
        s = self.session
        if level_index is not None:
            s.level_index = level_index
        if s.view is None:  # not fetched yet, or resumed from a saved state
            self.campaign()
        view = self._view()
        if view.value.parameters is None:  # a cached view from before the publication
            view = self._view(fresh=True)
        parameters = s.accept_parameters(view)
        # The claimed round-1 n against the shuffler's own count (a status cached from
        # before the release of round 1 is fetched again).
        status = self.round_status(1)
        if not status.released:
            status = self.round_status(1, fresh=True)
        s.check_round1_count(status)
        s.check_release_threshold(self.round_status(2))
        return parameters

    def item_ids(self, items: Iterable[int | str]) -> list[int]:
        """The ids of ``items`` (ids, or names when the campaign has item names), checked
        against the campaign's domain; an unknown name or an id outside [0, d) is a
        :class:`~segshuffle.client.errors.ClientError` naming the item."""
        if self.session.view is None:
            self.campaign()
        return self.session.item_ids(items)

    def submit_data(self, items: Iterable[int | str]) -> SentRound2:
        """Round 2: randomize the item set with the verified parameters, seal, send.

        ``items``: the user's items as ids (0..d-1) or, when the campaign has item names,
        as names (:meth:`item_ids`); anything else is a ``ClientError`` and nothing is
        sent."""
        s = self.session
        if s.parameters is None:
            self.fetch_parameters()
        body, sent = s.round2(items)
        url = self.shuffler_url + s.round_path(2) + "/submissions"
        self._request("POST", url, "round-2 submission", submission=True,
                      json=body, headers=s.auth())
        return sent

    def wait_for_phase(self, phase: str, timeout: float = 60.0,
                       interval: float = 0.2) -> CampaignView:
        """Poll the campaign until it reaches ``phase`` (``round2`` or ``done``).

        Raises :class:`~segshuffle.client.errors.CampaignEndedError` if it ends without
        results, and ``ServiceError`` after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            view = self._view(fresh=True).value
            if self.session.reached(view, phase):
                return view
            if time.monotonic() > deadline:
                raise ServiceError(f"campaign still in phase {view.phase!r} after {timeout}s")
            time.sleep(interval)
