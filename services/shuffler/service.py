"""The shuffler's operations, independent of HTTP: :class:`ShufflerService`.

The HTTP layer (:mod:`.app`) authenticates, parses bodies and calls these methods; they
check the campaign's phase through the server link, store submissions in one transaction
after every check has passed, and start or resume releases.  Refusals are raised as
domain errors (:mod:`segshuffle.services.errors`).  Blocking storage calls run in the thread pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, TypeVar

from starlette.concurrency import run_in_threadpool

from segshuffle.services import errors
from segshuffle.wire.models import (
    TERMINAL_PHASES,
    CampaignView,
    ReleaseResponse,
    RoundStatus,
)
from segshuffle.wire.submissions import DecodedSubmission

from ..storage_calls import storage_call
from .cache import Fetched, SingleFlightCache
from .enrollment import (
    AuthenticationError,
    EnrollmentPolicy,
    EnrollmentRefusedError,
    token_weakness,
)
from .release import DATA, LEVELS, Releaser, required_participants, threshold_reason
from .settings import Settings
from .storage_api import (
    FAILED,
    OPEN,
    RELEASING,
    AlreadySubmittedError,
    LoopStatements,
    NotEnoughParticipantsError,
    ReplayedCiphertextError,
    RoundClosedError,
    ShufflerStorage,
    UnknownTokenError,
)
from .upstream import Document, LookupBudgetError, ServerLink, UpstreamError
from .vault import RoundKeyMissingError, RoundKeys, seal_submission

T = TypeVar("T")
log = logging.getLogger("segshuffle.shuffler")

PHASE_OF_ROUND = {1: "round1", 2: "round2"}


class ShufflerRoundStatus(RoundStatus):
    """:class:`RoundStatus` plus the release state: ``open``, ``releasing`` or ``released``."""

    state: Literal["open", "releasing", "released", "failed"]
    batch_id: str | None = None
    last_error: str | None = None
    """While releasing: why the latest delivery attempt failed, or why forwarding stopped."""
    reason: str | None = None
    """Once failed: why the round ended without results (its data is forgotten)."""
    enrollment: Literal["invitations", "open"] = "invitations"
    """The shuffler's enrollment mode; ``open`` lets anyone add fake participants."""
    floor: int = 0
    """The shuffler's own floor on participants per release (``SEGSHUFFLE_SHUFFLER_MIN_USERS``):
    ``required`` is the largest of it, the campaign's ``min_users`` and, in round 2, n_min."""
    waiting_for: str | None = None
    """While the round is open and short of ``required``: which rule sets the threshold."""
    key_missing: bool = False
    """The round holds messages but its key file is gone: they cannot be released (the
    shuffler is not ready until the key is restored or the campaign aborted)."""


#: The domain error of each reason an enrollment is refused for.
REFUSALS: dict[str, type[errors.DomainError]] = {
    "required": errors.InvitationRequiredError,
    "malformed": errors.InvalidInvitationError,
    "signature": errors.InvalidInvitationError,
    "campaign": errors.InvitationWrongCampaignError,
    "expired": errors.InvitationExpiredError,
    "used": errors.InvitationUsedError,
    "token": errors.ConflictError,
}


def upstream_refusal(exc: UpstreamError) -> errors.DomainError:
    """A failed upstream request as the client's problem: ``unavailable`` (503, retry in a
    second) when the server cannot be reached or is saturated, or (retry when the cap
    has room again) when the cap on lookups of unknown campaigns refused the request;
    ``upstream-failed`` (502) when the server gave a wrong answer."""
    if isinstance(exc, LookupBudgetError):
        return errors.UnavailableError(str(exc),
                                       headers={"Retry-After": str(exc.seconds)})
    if exc.status is None or exc.status in (429, 503):
        return errors.UnavailableError("the server cannot be reached right now",
                                       headers={"Retry-After": "1"})
    return errors.UpstreamFailedError("the server could not answer")


def require_random_token(proposed: str) -> None:
    """Refuse a proposed user token that is plainly not random (:func:`token_weakness`):
    ``invalid-field`` (422) naming the check in its ``check`` member, before the campaign
    is looked up or an invitation used, so the client can draw a proper token and retry."""
    weakness = token_weakness(proposed)
    if weakness is not None:
        check, why = weakness
        raise errors.InvalidRequestError(
            f"token: {why}; propose 32 bytes from a cryptographic random generator",
            extra={"check": check, "errors": [{"loc": ["body", "token"], "msg": why}]})


def unauthorized(detail: str) -> errors.UnauthorizedError:
    """``unauthorized`` with the shuffler's ``WWW-Authenticate`` challenge."""
    return errors.UnauthorizedError(detail, headers={"WWW-Authenticate": 'Bearer realm="shuffler"'})


def _streams(view: CampaignView, round_number: int,
             body: DecodedSubmission) -> dict[str, Sequence[bytes]]:
    """The ciphertexts of a submission by stream, once the number of data messages is
    checked against the published parameters (``wrong-submission-size`` if it does not
    fit).  ``view`` is in the round's phase."""
    streams: dict[str, Sequence[bytes]] = {LEVELS: (body.level,)}
    if round_number == 2:
        parameters = view.parameters
        if parameters is None or body.data is None:  # pragma: no cover - by the phase
            raise errors.WrongPhaseError("round-2 parameters are not published yet")
        expected = parameters.messages_per_user
        sent = len(body.data)
        if (parameters.fixed_size and sent != expected) or sent > expected:
            raise errors.WrongSubmissionSizeError(
                f"round 2 takes {'exactly' if parameters.fixed_size else 'at most'} "
                f"{expected} data messages, got {sent}",
                extra={"expected": expected, "received": sent},
            )
        streams[DATA] = body.data
    return streams


@contextlib.contextmanager
def _storage_refusals() -> Iterator[None]:
    """The store's refusals of a submission as the client's problems."""
    try:
        yield
    except AlreadySubmittedError as exc:
        raise errors.AlreadySubmittedError(str(exc)) from None
    except ReplayedCiphertextError as exc:
        raise errors.ReplayedCiphertextError(str(exc)) from None
    except RoundClosedError as exc:
        raise errors.WrongPhaseError(str(exc)) from None


class ShufflerService:
    """Enrollment, submissions, round status and release over storage and the server link."""

    def __init__(self, settings: Settings, storage: ShufflerStorage, policy: EnrollmentPolicy,
                 server: ServerLink, releaser: Releaser) -> None:
        self.settings = settings
        self.storage = storage
        self.policy = policy
        self.server = server
        self.releaser = releaser
        self.keys: RoundKeys = releaser.keys
        self.statuses: SingleFlightCache[bytes] = SingleFlightCache(
            max_entries=settings.document_cache_entries, ttl=settings.campaign_cache_seconds)
        releaser.on_change = self.status_changed
        self._loop_statements = storage if isinstance(storage, LoopStatements) else None
        """The storage, if it can run per-request statements on the event loop (checked
        once: a protocol check per request would cost as much as it saves)."""
        self._authenticate_async = getattr(policy, "authenticate_async", None)
        """The policy's token check with a lookup run on the loop, if it has one."""
        self._enroll_async = getattr(policy, "enroll_async", None)
        """The policy's enrollment with its statements run on the loop, if it has one."""
        self._participant_of: Callable[[str], bytes] | None = getattr(
            policy, "participant_of", None)
        """The policy's participant key of a token, unchecked (:meth:`submit_as`), if its
        tokens are the ones the store can check itself."""
        self.submits_as = self._participant_of is not None
        """Whether :meth:`submit_as` can ever take a submission (else it is not tried)."""

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> int:
        """Resume unacknowledged releases; returns how many."""
        return self.releaser.resume_all()

    async def open(self) -> None:
        """Open the storage's event-loop connections, where it has them (PostgreSQL)."""
        if self._loop_statements is not None:
            await self._loop_statements.open_async()

    async def close(self) -> None:
        """Stop forwarding, close the server link and the storage."""
        await self.releaser.shutdown()
        await self.server.aclose()
        if self._loop_statements is not None:
            await self._loop_statements.close_async()
        self.storage.close()

    async def ready(self) -> None:
        """Raise ``unavailable`` unless the database answers and the server is reachable."""
        try:
            ok = await run_in_threadpool(self.storage.ping)
        except Exception:  # a closed or broken database
            ok = False
        if not ok:
            raise errors.UnavailableError("the database is not available")
        if not self.keys.writable():
            raise errors.UnavailableError("the round-key directory is not writable")
        holding = await run_in_threadpool(self.storage.rounds_holding_messages)
        missing = self.keys.missing(holding)
        if missing:
            for campaign_id, round_number in missing:
                self.status_changed(campaign_id, round_number)  # the status says so at once
            listed = ", ".join(f"campaign {c!r} round {r}" for c, r in missing[:10])
            raise errors.UnavailableError(
                f"the round key of {listed} is missing: its stored messages cannot be "
                "released (restore the key file, or abort the campaign)",
                extra={"missing_round_keys": [{"campaign_id": c, "round": r}
                                              for c, r in missing[:100]]})
        if not await self.server.alive():
            raise errors.UnavailableError("the server cannot be reached")

    async def _storage_call(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` on this service's storage (:func:`..storage_calls.storage_call`)."""
        return await storage_call(self.storage, function, *args)

    # -- checks ------------------------------------------------------------------------
    def check_operator(self, token: str | None) -> None:
        """Require the operator token (compared in constant time)."""
        if token is None:
            raise unauthorized("the operator token is required")
        if not hmac.compare_digest(token.encode(), self.settings.operator_token.encode()):
            raise errors.ForbiddenError("these credentials may not release rounds")

    async def document(self, kind: str, campaign_id: str, *, fresh: bool = False) -> Document:
        """A public document of a campaign (``view`` or ``hpke-config``), as the server sent
        it (cached by the link, one upstream request per miss whoever asks)."""
        try:
            document = await self.server.document(kind, campaign_id, fresh=fresh)
        except LookupBudgetError as exc:  # counted in the metrics: one line per flood request
            log.debug("campaign %s refused: campaign=%s (%s)", kind, campaign_id, exc)
            raise upstream_refusal(exc) from None
        except UpstreamError as exc:
            log.warning("campaign %s unavailable: campaign=%s (%s)", kind, campaign_id, exc)
            raise upstream_refusal(exc) from None
        if document is None:
            raise errors.UnknownCampaignError(f"no campaign {campaign_id!r}")
        return document

    async def campaign_view(self, campaign_id: str, *, fresh: bool = False) -> CampaignView:
        """The server's public view of a campaign (cached by the link).  Every route has
        checked the id against ``ID_PATTERN`` first (``valid_campaign_id`` in :mod:`.app`)."""
        view = (await self.document("view", campaign_id, fresh=fresh)).value
        assert isinstance(view, CampaignView)
        if view.phase in ("failed", "aborted"):
            await self._forget_ended(view)
        return view

    async def _forget_ended(self, view: CampaignView) -> None:
        """Forget the rounds of a campaign that ended without results (idempotent).

        Open rounds are closed as failed; a round whose forwarding is not running any
        more is finished as failed (a running one finds out from the server itself).
        """
        reason = f"the campaign {view.phase}: {view.end_reason or 'no reason given'}"
        for round_number in (1, 2):
            record = await run_in_threadpool(self.storage.round_record, view.id, round_number)
            if record is None:
                await run_in_threadpool(self.storage.discard_round, view.id, round_number,
                                        reason)
                await run_in_threadpool(self.keys.destroy, view.id, round_number)
                log.warning("round forgotten: campaign=%s round=%d (%s)", view.id,
                            round_number, reason)
            elif (record.state == RELEASING
                  and not self.releaser.forwarding(view.id, round_number)):
                await run_in_threadpool(self.releaser.finish, record, FAILED, reason)
            else:
                continue  # already forgotten: nothing changed, keep the cached status
            self.status_changed(view.id, round_number)

    async def view_in_phase(self, campaign_id: str, round_number: int) -> CampaignView:
        """The campaign view, refreshed once if the cached phase does not fit the round."""
        wanted = PHASE_OF_ROUND[round_number]
        view = await self.campaign_view(campaign_id)
        if view.phase != wanted:
            view = await self.campaign_view(campaign_id, fresh=True)
        if view.phase != wanted:
            raise errors.WrongPhaseError(
                f"campaign {campaign_id!r} is in phase {view.phase!r}, "
                f"round {round_number} needs {wanted!r}",
                extra={"phase": view.phase})
        return view

    def required_for(self, view: CampaignView, round_number: int) -> int:
        """The release threshold of a round (docs/architecture.md, "Shuffler details")."""
        round1 = self.storage.round_record(view.id, 1) if round_number == 2 else None
        return required_participants(view, round_number, self.settings.min_users,
                                      None if round1 is None else round1.participants)

    # -- operations --------------------------------------------------------------------
    async def enroll(self, campaign_id: str, invitation: str | None,
                     proposed: str | None = None) -> str:
        """A one-time user token for the campaign, if the enrollment policy agrees (the
        client's ``proposed`` token, which makes a repeated request idempotent, if it
        looks random: :func:`require_random_token`)."""
        if proposed is not None:
            require_random_token(proposed)
        view = await self.campaign_view(campaign_id)
        if view.phase in TERMINAL_PHASES:
            raise errors.WrongPhaseError(f"campaign {campaign_id!r} has ended ({view.phase})",
                                         extra={"phase": view.phase})
        try:
            return await self._enroll(campaign_id, invitation, proposed)
        except EnrollmentRefusedError as exc:
            error = REFUSALS.get(exc.reason, errors.ForbiddenError)
            headers = {"WWW-Authenticate": 'Invitation realm="shuffler"'} \
                if exc.reason == "required" else None
            raise error(str(exc), headers=headers) from None

    async def _enroll(self, campaign_id: str, invitation: str | None,
                      proposed: str | None) -> str:
        """The policy's token: on the event loop where the store runs its statements there
        and the policy can use them, else as a storage call."""
        on_loop = self._on_loop()
        enroll_async = self._enroll_async
        if on_loop is not None and enroll_async is not None:
            return str(await enroll_async(campaign_id, invitation, proposed, on_loop))
        return str(await self._storage_call(self.policy.enroll, campaign_id, invitation,
                                            proposed))

    async def authenticate(self, campaign_id: str, token: str) -> bytes:
        """The participant key of a user token for the campaign (before any body is read).

        Tokens are forgotten once round 2 is released, so a late user's token is unknown:
        for an ended campaign the answer says it ended (``wrong-phase``), not that the
        token is bad."""
        participant, _ = await self.authenticate_with_view(campaign_id, token)
        return participant

    async def authenticate_with_view(self, campaign_id: str,
                                     token: str) -> tuple[bytes, CampaignView]:
        """:meth:`authenticate`, and the campaign view it was checked against (which
        :meth:`submit` can use instead of looking it up again)."""
        view = await self.campaign_view(campaign_id)
        try:
            participant = await self._authenticate(campaign_id, token)
            return bytes(participant), view
        except AuthenticationError as exc:
            raise await self._token_refusal(campaign_id, view, str(exc)) from None

    async def _token_refusal(self, campaign_id: str, view: CampaignView,
                             detail: str) -> errors.DomainError:
        """What a refused token answers: ``wrong-phase`` if the campaign has ended (tokens
        are forgotten once round 2 is released, so a late user's token is unknown), else
        ``unauthorized``.  The view is refreshed once unless it already shows the end."""
        if view.phase not in TERMINAL_PHASES:  # the cached view may predate the end
            view = await self.campaign_view(campaign_id, fresh=True)
        if view.phase in TERMINAL_PHASES:
            return errors.WrongPhaseError(
                f"campaign {campaign_id!r} has ended ({view.phase}): it takes no more "
                "submissions", extra={"phase": view.phase})
        return unauthorized(detail)

    async def _authenticate(self, campaign_id: str, token: str) -> bytes:
        """The participant key of ``token``: on the event loop where the store runs its
        statements there and the policy can use it, else as a storage call."""
        on_loop = self._on_loop()
        authenticate_async = self._authenticate_async
        if on_loop is not None and authenticate_async is not None:
            return bytes(await authenticate_async(campaign_id, token,
                                                  on_loop.token_campaign_async))
        return bytes(await self._storage_call(self.policy.authenticate, campaign_id, token))

    def _on_loop(self) -> LoopStatements | None:
        """The storage, if its statements can run on the event loop right now."""
        storage = self._loop_statements
        return storage if storage is not None and storage.async_ready else None

    async def submit(self, campaign_id: str, round_number: int, participant: bytes,
                     body: DecodedSubmission, *, view: CampaignView | None = None) -> None:
        """Store one authenticated user's submission of a round after every check.

        ``body``: the ciphertexts of a valid submission body of the round
        (:mod:`segshuffle.wire.submissions`).  ``view``: the campaign view the request
        was just authenticated against; used if it is in the round's phase (else, or
        without it, the view is looked up, and refreshed once, as :meth:`view_in_phase`
        does)."""
        if view is None or view.id != campaign_id or view.phase != PHASE_OF_ROUND[round_number]:
            view = await self.view_in_phase(campaign_id, round_number)
        streams = _streams(view, round_number, body)
        with _storage_refusals():
            count = await self._store(campaign_id, round_number, participant, streams)
        await self._stored(view, round_number, count)

    async def submit_as(self, campaign_id: str, round_number: int, token: str,
                        body: DecodedSubmission) -> bool:
        """Authenticate ``token`` and store its submission in one storage statement, where
        that gives the same answer as :meth:`authenticate` then :meth:`submit`; returns
        False, having done nothing, where it might not.

        The usual order checks the token first (a storage call of its own: one round
        trip to a PostgreSQL store, a lookup and a call on SQLite), then the body, then
        stores (a second one).  The store can check the token inside the submission's
        own transaction instead (:meth:`.storage_api.ShufflerStorage.submit_as`, or
        :meth:`.storage_api.LoopStatements.submit_as_async` on the event loop).  That is
        only taken when every check that does not need the token has passed: the body is
        in the plain form (the caller's part), the cached view is in the round's phase,
        the number of data messages fits and the round's key is at hand.  Then the only
        refusal the token could have taken precedence over is the token's own, which the
        store makes first, and a refused token answers as :meth:`authenticate` would.
        Anything else (a body or phase problem, a token of the wrong form, the round's
        first submission) returns False for the usual order, which answers a bad token
        with ``unauthorized`` before any body problem."""
        participant_of = self._participant_of
        if participant_of is None:
            return False
        view = await self.campaign_view(campaign_id)
        if view.phase != PHASE_OF_ROUND[round_number]:
            return False
        try:
            participant = participant_of(token)
            streams = _streams(view, round_number, body)
            key = self.keys.get(campaign_id, round_number)
        except (AuthenticationError, errors.WrongSubmissionSizeError, RoundKeyMissingError):
            return False
        messages = seal_submission(key, campaign_id, round_number, streams)
        on_loop = self._on_loop()
        try:
            with _storage_refusals():
                if on_loop is not None:
                    count = await on_loop.submit_as_async(campaign_id, round_number,
                                                          participant, messages)
                else:
                    count = await self._storage_call(self.storage.submit_as, campaign_id,
                                                     round_number, participant, messages)
        except UnknownTokenError as exc:
            raise await self._token_refusal(campaign_id, view, str(exc)) from None
        await self._stored(view, round_number, count)
        return True

    async def _stored(self, view: CampaignView, round_number: int, count: int) -> None:
        """After a submission was stored: the round's status changed; release it if the
        shuffler releases rounds by count and this one has reached it.

        ``count`` may leave out submissions that were in flight (at most the store's
        ``count_lag``).  Where those could reach the threshold, the committed count is
        read again now that this submission has committed: of the submissions that
        complete the threshold, the last to commit then reads them all, so the release
        is not missed."""
        self.status_changed(view.id, round_number)
        threshold = self.settings.auto_release
        if threshold and count < threshold <= count + self.storage.count_lag:
            count = await self._storage_call(self.storage.participants, view.id, round_number)
        if threshold and count >= threshold:
            await self._auto_release(view, round_number)

    async def _store(self, campaign_id: str, round_number: int, participant: bytes,
                     streams: dict[str, Sequence[bytes]]) -> int:
        """Seal and store a submission; returns the round's participant count.  Where the
        store runs statements on the event loop and the round's key is at hand, both
        happen on the loop; otherwise in one storage call (one thread hop at most)."""
        on_loop = self._on_loop()
        if on_loop is not None:
            try:
                key = self.keys.get(campaign_id, round_number)
            except RoundKeyMissingError:  # the round's first submission: see _seal_and_store
                pass
            else:
                return await on_loop.submit_async(
                    campaign_id, round_number, participant,
                    seal_submission(key, campaign_id, round_number, streams))
        return await self._storage_call(self._seal_and_store, campaign_id, round_number,
                                        participant, streams)

    def _seal_and_store(self, campaign_id: str, round_number: int, participant: bytes,
                        streams: dict[str, Sequence[bytes]]) -> int:
        """Seal the submission under the round's key (made on the round's first use) and
        store it; returns the round's participant count. One call, so one thread hop.

        A round whose key exists needs no check here: ``storage.submit`` refuses a closed
        round atomically.  Only before making a key is the round looked up, so that no key
        is made for a round that is over."""
        try:
            key = self.keys.get(campaign_id, round_number)
        except RoundKeyMissingError:
            if self.storage.round_record(campaign_id, round_number) is not None:
                raise RoundClosedError(
                    f"round {round_number} has already been released") from None
            key = self.keys.get(campaign_id, round_number, create=True)
        messages = seal_submission(key, campaign_id, round_number, streams)
        return self.storage.submit(campaign_id, round_number, participant, messages)

    async def _start_release(self, view: CampaignView, round_number: int) -> tuple[Any, bool]:
        """Start (or find) the release of a round; returns (record, newly_started)."""
        existing = await run_in_threadpool(self.storage.round_record, view.id, round_number)
        if existing is not None:
            return existing, False
        required = await run_in_threadpool(self.required_for, view, round_number)
        try:
            record = await run_in_threadpool(self.releaser.start, view.id, round_number,
                                             required)
        except NotEnoughParticipantsError as exc:
            raise errors.NotEnoughParticipantsError(
                str(exc), extra={"participants": exc.participants,
                                 "required": exc.required}) from None
        self.status_changed(view.id, round_number)
        return record, True

    async def _auto_release(self, view: CampaignView, round_number: int) -> None:
        try:
            record, started = await self._start_release(view, round_number)
        except errors.NotEnoughParticipantsError:
            return  # not enough participants for the campaign's threshold yet
        if started:
            log.info("automatic release: campaign=%s round=%d", view.id, round_number)
            self.releaser.schedule(record)

    async def round_status(self, campaign_id: str, round_number: int) -> ShufflerRoundStatus:
        """Participants, threshold and release state of a round."""
        view = await self.campaign_view(campaign_id)
        participants, record, required = await self._storage_call(
            self._status_rows, view, round_number)
        state = OPEN if record is None else record.state
        key_missing = (participants > 0 and state in (OPEN, RELEASING)
                       and bool(self.keys.missing([(campaign_id, round_number)])))
        last_error = self.releaser.last_error.get((campaign_id, round_number)) \
            if state == RELEASING else None
        if key_missing:
            last_error = ("the round key is missing: the stored messages cannot be released "
                          "(restore the key file, or abort the campaign)")
        return ShufflerRoundStatus(
            campaign_id=campaign_id, round=round_number, participants=participants,
            required=required, released=state == "released", state=state,  # type: ignore[arg-type]
            batch_id=None if record is None or not record.batch_id else record.batch_id,
            last_error=last_error, key_missing=key_missing,
            reason=None if record is None else record.reason,
            enrollment="open" if self.settings.enrollment == "open" else "invitations",
            floor=self.settings.min_users,
            waiting_for=threshold_reason(view, round_number, self.settings.min_users, required)
            if state == OPEN and participants < required else None,
        )

    def _status_rows(self, view: CampaignView, round_number: int) -> tuple[int, Any, int]:
        """The storage reads of a round status, in one trip to the thread pool."""
        return (self.storage.participants(view.id, round_number),
                self.storage.round_record(view.id, round_number),
                self.required_for(view, round_number))

    async def round_status_json(self, campaign_id: str, round_number: int) -> bytes:
        """The serialized round status, shared by concurrent and repeated requests for up
        to ``campaign_cache_seconds`` (single flight); submissions and releases of this
        process refresh it at once, the progress of a release in the background within
        that time."""
        async def fetch() -> Fetched[bytes]:
            status = await self.round_status(campaign_id, round_number)
            return Fetched(status.model_dump_json().encode())

        return (await self.statuses.get((campaign_id, round_number), fetch)).value

    def status_changed(self, campaign_id: str, round_number: int) -> None:
        """Forget the cached status of a round (after a submission or a release step)."""
        self.statuses.discard((campaign_id, round_number))

    async def release(self, campaign_id: str, round_number: int,
                      wait: bool) -> tuple[ReleaseResponse, bool]:
        """Close, permute and forward a round; returns (answer, acknowledged by the server)."""
        view = await self.campaign_view(campaign_id)
        existing = await run_in_threadpool(self.storage.round_record, campaign_id,
                                           round_number)
        if existing is None:
            view = await self.view_in_phase(campaign_id, round_number)
        record, _ = await self._start_release(view, round_number)
        if record.state == FAILED:
            raise errors.WrongPhaseError(f"round {round_number} ended without results: "
                                         f"{record.reason}", extra={"state": record.state})
        done = record.state == "released"
        if not done:
            task = self.releaser.schedule(record, force=True)
            if wait:
                try:
                    record = await asyncio.wait_for(asyncio.shield(task),
                                                    self.settings.release_wait)
                    done = True
                except TimeoutError:
                    pass  # still forwarding: 202, the round status shows why
                if record.state == FAILED:
                    raise errors.WrongPhaseError(
                        f"round {round_number} was delivered but ended without results: "
                        f"{record.reason}", extra={"state": record.state})
        answer = ReleaseResponse(
            campaign_id=campaign_id, round=round_number, batch_id=record.batch_id,
            messages=sum(record.stream_sizes.values()),
            chunks=sum(record.chunk_count(s) for s in record.stream_sizes),
        )
        return answer, done
