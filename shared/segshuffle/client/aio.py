"""The asynchronous client: the same API as :class:`~segshuffle.client.Client`, on
``httpx.AsyncClient``; several users can share one connection pool (``http=``) and one
:class:`~segshuffle.client.session.PublicCache` (``cache=``), which is how
:mod:`segshuffle.testing.population` simulates thousands of users.

Retries, waits, submission outcomes and verification behave exactly as in
:mod:`segshuffle.client.sync` (this module mirrors it method for method).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import httpx

from segshuffle.wire.models import (
    CampaignView,
    EnrollmentResponse,
    HpkeConfig,
    PublishedParameters,
    RoundStatus,
)

from .errors import (
    ServiceError,
    SubmissionRefusedError,
    WaitTimeoutError,
)
from .messages import SentRound1, SentRound2
from .policy import ClientPolicy
from .retry import DEFAULT_WAIT_BUDGET, Tries
from .session import (
    Delivery,
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


class AsyncClient:
    """Asynchronous SDK client: the API of :class:`~segshuffle.client.Client`, awaited."""

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
        http: httpx.AsyncClient | None = None,
        cache: PublicCache | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        wait_budget: float = DEFAULT_WAIT_BUDGET,
        on_state_change: Callable[[dict[str, Any]], object] | None = None,
    ) -> None:
        """``ca_file``: PEM certificates of the private CA that signed the shuffler's
        certificate, trusted instead of the system's store (:mod:`.tls`); ``http``: a
        client to share, which brings its own trust settings (not both).  Clients without
        ``http`` share one verifying TLS context per process (per CA file with
        ``ca_file``) instead of building their own.

        ``wait_budget`` and ``on_state_change`` as in :class:`~segshuffle.client.Client`
        (``on_state_change`` may be a coroutine function: it is awaited)."""
        self.session = UserSession(campaign_id, rng, policy=policy, allow_insecure=allow_insecure,
                                   min_fake_tolerance=min_fake_tolerance, key_id=key_id,
                                   server_key=server_key)
        self.shuffler_url = shuffler_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        if not (math.isfinite(wait_budget) and wait_budget >= 0):
            raise ValueError("wait_budget must be a number of seconds >= 0")
        self.wait_budget = float(wait_budget)
        self.on_state_change = on_state_change
        self._told: str | None = None  # the checksum of the document last told
        # looked up at each call, so that a test's patch of the time module applies
        self._clock: Callable[[], float] = lambda: time.monotonic()
        self._sleep: Callable[[float], Awaitable[object]] = lambda seconds: asyncio.sleep(seconds)
        self.cache = cache
        self._own_http = http is None
        if http is not None and ca_file is not None:
            raise ValueError("pass ca_file or http, not both (http brings its own trust)")
        self._http = http or httpx.AsyncClient(timeout=timeout, verify=shared_context(ca_file))

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- saving and resuming -------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """This user's session as a JSON-serialisable dict, for :meth:`resume` in a later
        process (an app restarted between round 1 and round 2; the invitation cannot be
        used twice).  The document is versioned (``segshuffle.client.STATE_VERSION``).

        **It holds the user's bearer token and their privacy level**: anyone who reads it
        can submit as this user and learns the level they chose (and, once round 2 is
        begun, what it sends).  Store it like a secret (the platform's keystore or an
        encrypted file), never in logs or analytics.  Save it whenever it changes
        (``on_state_change`` says when): after :meth:`enroll`, and before and after each
        submission, which it records as sent before anything of it leaves.
        """
        return self.session.state()

    def outcome(self, round_number: int) -> str | None:
        """What is known of the round's submission: ``None`` (not sent, or certainly not
        stored), ``"unknown"`` (sent, its answer lost: calling the submit method again
        finds out) or ``"stored"`` (the shuffler holds it; it is never sent again)."""
        return self.session.outcome(round_number)

    async def _changed(self) -> None:
        """Tell ``on_state_change`` the saved document, when it changed."""
        if self.on_state_change is None or self.session.token is None:
            return
        state = self.session.state()
        if state["checksum"] != self._told:
            self._told = state["checksum"]
            told = self.on_state_change(state)
            if inspect.isawaitable(told):
                await told

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
        http: httpx.AsyncClient | None = None,
        cache: PublicCache | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        wait_budget: float = DEFAULT_WAIT_BUDGET,
        on_state_change: Callable[[dict[str, Any]], object] | None = None,
    ) -> AsyncClient:
        """A client for the user whose :meth:`state` is ``state`` (the dict, or its JSON).

        The restored client keeps every check: the round-1 pins (key and configuration
        hash) come from the state and every view it fetches must match them, with the
        server's signatures when the state or ``server_key`` carries the server's key;
        the round-2 parameters are fetched and verified for the saved level.  The rounds'
        outcomes come from the state too: a round it records as stored is never sent
        again, one of unknown outcome is sent again as it was, with the same token, by
        the same submit method.  Give ``campaign_id`` to refuse a state saved for
        another campaign.  A state that is
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
                     ca_file=ca_file, wait_budget=wait_budget,
                     on_state_change=on_state_change)
        client.session = session
        client._told = session.state()["checksum"]
        return client

    # -- transport -----------------------------------------------------------------------
    async def _request(self, method: str, url: str, what: str, *,
                       delivery: Delivery | None = None, until: float | None = None,
                       **kwargs: Any) -> httpx.Response:
        """:meth:`Client._request <segshuffle.client.sync.Client._request>`, awaited."""
        tries = Tries(self.retry, until=until, clock=self._clock)
        while True:
            try:
                response = await self._http.request(method, url, **kwargs)
            except httpx.HTTPError as exc:
                error = network_error(exc, what)
                if error.certificate:
                    raise (error if delivery is None else delivery.gave_up(error)) from None
                if delivery is not None:
                    delivery.no_answer(exc)
            else:
                if response.status_code < 400:
                    return response
                error = service_error(response, what)
                if delivery is not None and delivery.stored_by(error):
                    return response  # an earlier try arrived
                if not error.transient:
                    raise error if delivery is None else delivery.refusal(error)
                if delivery is not None:
                    delivery.failed(error)
            wait = tries.wait(error.retry_after)
            if wait is None:
                raise error if delivery is None else delivery.gave_up(error)
            await self._sleep(wait)

    async def _fetch(self, model: type[M], url: str, what: str, *,
                     fresh: bool = False, until: float | None = None) -> Received[M]:
        """GET a public document, through the shared cache unless ``fresh``; with the
        digest of its bytes, which lets the session share verdicts on it."""
        if self.cache is None or fresh:
            return await self._download(model, url, what, until)
        cached = self.cache.get(url)
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        return await self.cache.fetch_once(url,
                                           lambda: self._download(model, url, what, until))

    async def _download(self, model: type[M], url: str, what: str,
                        until: float | None = None) -> Received[M]:
        """GET a public document (into the shared cache, if any)."""
        value = receive(model, await self._request("GET", url, what, until=until), what)
        if self.cache is not None:
            self.cache.put(url, value)
        return value

    async def _get(self, model: type[M], url: str, what: str, *, fresh: bool = False,
                   until: float | None = None) -> M:
        """:meth:`_fetch`'s document alone."""
        return (await self._fetch(model, url, what, fresh=fresh, until=until)).value

    # -- API -----------------------------------------------------------------------------
    async def _view(self, *, fresh: bool = False,
                    until: float | None = None) -> Received[CampaignView]:
        url = self.shuffler_url + self.session.campaign_path
        return await self._fetch(CampaignView, url, "campaign", fresh=fresh, until=until)

    async def campaign(self) -> CampaignView:
        """Fetch the campaign view and key config, verify them, pin key id and config hash."""
        return await self._campaign()

    async def _campaign(self, until: float | None = None) -> CampaignView:
        s = self.session
        view = await self._view(until=until)
        hpke = await self._fetch(HpkeConfig,
                                 self.shuffler_url + s.campaign_path + "/hpke-config",
                                 "key config", until=until)
        accepted = s.accept_campaign(view, hpke)
        await self._changed()
        return accepted

    async def enroll(self, invitation: str | None = None) -> str:
        """Obtain a one-time user token from the shuffler with the user's invitation (None
        only for a shuffler with open enrollment).  The client proposes the token, so a
        retry after an ambiguous failure gets it back rather than ``invitation-used``."""
        body = self.session.enrollment_body(invitation)  # the same body on every retry
        url = self.shuffler_url + self.session.campaign_path + "/enrollments"
        response = await self._request("POST", url, "enrollment", json=body)
        token = self.session.accept_enrollment(
            parse(EnrollmentResponse, response, "enrollment"))
        await self._changed()
        return token

    async def submit_level(self, level_index: int) -> SentRound1:
        """Round 1: send the (possibly randomized) level, sealed; returns once the shuffler
        holds it (outcomes as :meth:`Client.submit_level
        <segshuffle.client.sync.Client.submit_level>`)."""
        s = self.session
        s.require_round1_level(level_index)
        if s.outcome(1) is None and s.view is None:
            await self.campaign()
        prepared = s.submission(1, lambda: s.round1(level_index))
        sent = s.sent_round1()
        if prepared is not None:
            await self._deliver(prepared[1], prepared[0])
        return sent

    async def _deliver(self, delivery: Delivery, body: dict[str, Any]) -> None:
        """Send a submission the session recorded as begun until its outcome is known,
        and record the outcome (the app is told before anything leaves and after)."""
        s = self.session
        await self._changed()
        url = self.shuffler_url + s.round_path(delivery.round) + "/submissions"
        try:
            await self._request("POST", url, f"round-{delivery.round} submission",
                                delivery=delivery, until=self._clock() + self.wait_budget,
                                json=body, headers=s.auth())
        except SubmissionRefusedError:
            s.settle(delivery.round, stored=False)
            await self._changed()
            raise
        s.settle(delivery.round, stored=True)
        await self._changed()

    async def round_status(self, round_number: int, *, fresh: bool = False) -> RoundStatus:
        """The shuffler's view of a round: participants, threshold, release state."""
        return await self._status(round_number, fresh=fresh)

    async def _status(self, round_number: int, *, fresh: bool = False,
                      until: float | None = None) -> RoundStatus:
        url = self.shuffler_url + self.session.round_path(round_number)
        return await self._get(RoundStatus, url, "round status", fresh=fresh, until=until)

    async def fetch_parameters(self, level_index: int | None = None) -> PublishedParameters:
        """Fetch the round-2 parameters and verify them for this user's level, waiting
        for them within ``wait_budget`` (as :meth:`Client.fetch_parameters
        <segshuffle.client.sync.Client.fetch_parameters>`).

        Raises :class:`~segshuffle.client.errors.VerificationError` if they do not
        give the level its guarantee (nothing is sent then).
        """
        s = self.session
        if level_index is not None:
            s.level_index = level_index
        try:
            parameters = await self._await_parameters()
        except BaseException:
            s.parameters = None  # nothing half-checked stays for submit_data
            raise
        await self._changed()
        return parameters

    async def _await_parameters(self) -> PublishedParameters:
        tries = Tries(self.retry, until=self._clock() + self.wait_budget, clock=self._clock)
        assert tries.until is not None
        fresh = False
        while True:
            try:
                if self.session.view is None:  # not fetched yet, or resumed from a state
                    await self._campaign(tries.until)
                found = await self._published(tries.until, fresh)
            except ServiceError as exc:
                if not exc.transient:
                    raise
                raise WaitTimeoutError(
                    f"round-2 parameters: the services kept failing for "
                    f"{self.wait_budget:g} s: {exc}", waiting_for="service", status=exc.status,
                    problem=exc.problem, detail=exc.detail, retry_after=exc.retry_after,
                ) from exc
            if isinstance(found, PublishedParameters):
                return found
            wait = tries.wait()
            if wait is None:
                raise WaitTimeoutError(f"round-2 parameters: {found[1]} after "
                                       f"{self.wait_budget:g} s", waiting_for=found[0])
            await self._sleep(wait)
            fresh = True

    async def _published(self, until: float,
                         fresh: bool) -> PublishedParameters | tuple[str, str]:
        """One look at what the round-2 check needs: the verified parameters, or what is
        not there yet (``(waiting_for, why)``); a failed check raises."""
        s = self.session
        view = await self._view(fresh=fresh, until=until)
        if view.value.parameters is None and not fresh:  # a cached view from before
            view = await self._view(fresh=True, until=until)
        s.reached(view.value, "round1")  # a campaign that ended raises
        if view.value.parameters is None:
            return "parameters", "the parameters are not published yet"
        parameters = s.accept_parameters(view)
        # The claimed round-1 n against the shuffler's own count (a status cached from
        # before the release of round 1 is fetched again).
        status = await self._status(1, fresh=fresh, until=until)
        if not status.released and not fresh:
            status = await self._status(1, fresh=True, until=until)
        if s.round1_pending(status):
            return "round1-release", "the shuffler's round-1 status does not say released yet"
        s.check_round1_count(status)
        s.check_release_threshold(await self._status(2, until=until))
        return parameters

    async def item_ids(self, items: Iterable[int | str]) -> list[int]:
        """The ids of ``items`` (ids, or names when the campaign has item names), checked
        against the campaign's domain; an unknown name or an id outside [0, d) is a
        :class:`~segshuffle.client.errors.ClientError` naming the item."""
        if self.session.view is None:
            await self.campaign()
        return self.session.item_ids(items)

    async def submit_data(self, items: Iterable[int | str]) -> SentRound2:
        """Round 2: randomize the item set with the verified parameters, seal, send;
        returns once the shuffler holds it (items and outcomes as :meth:`Client.submit_data
        <segshuffle.client.sync.Client.submit_data>`)."""
        s = self.session
        if s.outcome(2) is None and s.parameters is None:
            await self.fetch_parameters()
        prepared = s.submission(2, lambda: s.round2(items))
        sent = s.sent2
        assert sent is not None
        if prepared is not None:
            await self._deliver(prepared[1], prepared[0])
        return sent

    async def wait_for_phase(self, phase: str, timeout: float = 60.0,
                             interval: float = 0.2) -> CampaignView:
        """Poll the campaign until it reaches ``phase`` (``round2`` or ``done``).

        Raises :class:`~segshuffle.client.errors.CampaignEndedError` if it ends without
        results, and :class:`~segshuffle.client.errors.WaitTimeoutError` (a
        ``ServiceError``) after ``timeout`` seconds, transient failures of the shuffler
        included.
        """
        deadline = self._clock() + timeout
        while True:
            try:
                view = (await self._view(fresh=True, until=deadline)).value
            except ServiceError as exc:
                if not exc.transient:
                    raise
                raise WaitTimeoutError(f"campaign: the shuffler kept failing for {timeout}s: "
                                       f"{exc}", waiting_for="service", status=exc.status,
                                       problem=exc.problem, detail=exc.detail) from exc
            if self.session.reached(view, phase):
                return view
            if self._clock() > deadline:
                raise WaitTimeoutError(f"campaign still in phase {view.phase!r} after "
                                       f"{timeout}s", waiting_for="phase")
            await self._sleep(interval)
