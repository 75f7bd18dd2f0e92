"""State and logic shared by :class:`~segshuffle.client.Client` and
:class:`~segshuffle.client.AsyncClient`; the two differ only in how they wait for I/O.

A :class:`UserSession` is one user in one campaign: the pinned key and
configuration hash from round 1, the enrollment token, the level and the level
report.  Its methods turn answers into verified objects and build request bodies;
they never touch the network.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import ValidationError

from segshuffle.crypto import PinnedKey
from segshuffle.crypto.documents import (
    SignatureError,
    parse_server_key,
    verify_campaign_signature,
    verify_end_signature,
    verify_parameters_signature,
)
from segshuffle.wire.models import (
    CampaignView,
    EnrollmentResponse,
    HpkeConfig,
    PublishedParameters,
    RoundStatus,
)

from .errors import CampaignEndedError, ClientError, ServiceError, VerificationError
from .messages import (
    SentRound1,
    SentRound2,
    data_slots,
    report_level,
    round1_body,
    round2_body,
)
from .tls import certificate_error
from .verify import verify_campaign, verify_parameters

PROBLEM_PREFIX = "urn:segshuffle:error:"


PHASE_ORDER = {"round1": 0, "round2": 1, "done": 2}


def phase_reached(view: CampaignView, phase: str) -> bool:
    """Whether the campaign has reached ``phase`` (``round2`` or ``done``).

    Raises :class:`CampaignEndedError` once it has ended without results, so that no
    one waits for a phase that will never come.
    """
    if view.phase in ("failed", "aborted"):
        raise CampaignEndedError(view.phase, view.end_reason)
    return PHASE_ORDER[view.phase] >= PHASE_ORDER[phase]


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of transient failures: ``attempts`` tries, exponential backoff with jitter."""

    attempts: int = 6
    initial: float = 0.2
    maximum: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.initial < 0 or self.maximum < self.initial:
            raise ValueError("retry policy needs attempts >= 1 and 0 <= initial <= maximum")

    def delay(self, attempt: int) -> float:
        """Wait before try ``attempt + 1`` (attempt counts from 0): full jitter in [d/2, d]."""
        ceiling = min(self.maximum, self.initial * 2.0**attempt)
        return ceiling * (0.5 + 0.5 * random.random())


class PublicCache:
    """A small shared cache of public documents (campaign view, key config, round status).

    Many simulated users of one process can share it, as users behind one HTTP
    cache or CDN would: the documents are public and the same for everyone, and
    every user still verifies what it gets.  Entries live ``ttl`` seconds; a
    client bypasses the cache when a cached document does not have what it needs
    yet (e.g. parameters not published when it was fetched).
    """

    def __init__(self, ttl: float = 1.0) -> None:
        self.ttl = ttl
        self._entries: dict[str, tuple[float, Any]] = {}

    def get(self, url: str) -> Any | None:
        entry = self._entries.get(url)
        if entry is None or time.monotonic() - entry[0] > self.ttl:
            return None
        return entry[1]

    def put(self, url: str, value: Any) -> None:
        self._entries[url] = (time.monotonic(), value)


def service_error(response: httpx.Response, what: str) -> ServiceError:
    """A :class:`ServiceError` from a non-2xx answer, with its problem type if any."""
    problem = detail = None
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        kind = body.get("type")
        if isinstance(kind, str) and kind.startswith(PROBLEM_PREFIX):
            problem = kind.removeprefix(PROBLEM_PREFIX)
        if isinstance(body.get("detail"), str):
            detail = body["detail"]
    message = f"{what}: HTTP {response.status_code}"
    if problem:
        message += f" {problem}"
    if detail:
        message += f": {detail}"
    return ServiceError(message, status=response.status_code, problem=problem, detail=detail)


def network_error(exc: httpx.HTTPError, what: str) -> ServiceError:
    """A :class:`ServiceError` for a request that got no answer.

    A refused certificate is final (retrying cannot help): its error says so and is not
    :attr:`~ServiceError.transient`.
    """
    refused = certificate_error(exc)
    if refused is not None:
        return ServiceError(f"{what}: the service's TLS certificate is not trusted: {refused} "
                            f"(ca_file= trusts a private CA)", certificate=True)
    return ServiceError(f"{what}: {type(exc).__name__}: {exc}")


def parse(model: type[Any], response: httpx.Response, what: str) -> Any:
    try:
        return model.model_validate(response.json())
    except (ValueError, ValidationError):
        raise ServiceError(f"{what}: the answer is not a valid {model.__name__}",
                           status=response.status_code) from None


class UserSession:
    """One user's protocol state in one campaign."""

    def __init__(self, campaign_id: str, rng: np.random.Generator | None = None,
                 *, allow_insecure: bool = False, min_fake_tolerance: float = 0.0,
                 key_id: str | None = None, server_key: str | None = None) -> None:
        """``min_fake_tolerance``: refuse campaigns that tolerate a smaller fraction f of
        fake or colluding participants than the app requires (default 0: any).
        ``key_id``: the campaign's key id if the app knows it out of band.
        ``server_key``: the server's document-signing public key (base64url, from
        ``segshuffle admin signing-key``), shipped with the app.  With it, every view must
        carry the server's signatures (docs/wire.md section 9): the campaign statement
        (config hash, key id, HPKE key) before round 1, the parameters statement before
        round 2, the end statement for a terminal phase; a relay then cannot substitute a
        key, parameters or an ending.  Without it the client trusts the first view it
        accepts (trust on first use, plus the optional ``key_id`` pin): a shuffler that
        answers a client's first request with a key of its own can read that client's
        messages."""
        if not (math.isfinite(min_fake_tolerance) and 0.0 <= min_fake_tolerance < 1.0):
            raise ClientError(f"min_fake_tolerance must be in [0, 1), got "
                              f"{min_fake_tolerance!r}")
        try:
            self.server_key: Ed25519PublicKey | None = (
                None if server_key is None else parse_server_key(server_key))
        except ValueError as exc:
            raise ClientError(f"server_key: {exc}") from None
        self.campaign_id = campaign_id
        self.expected_key_id = key_id
        """The campaign's key id as the app learnt it out of band, if it did: the view and
        key config relayed by the shuffler must then pin exactly this key."""
        self.rng = rng if rng is not None else np.random.default_rng()
        self.allow_insecure = allow_insecure
        self.min_fake_tolerance = float(min_fake_tolerance)
        self.view: CampaignView | None = None
        self.key: PinnedKey | None = None
        self.config_hash: str | None = None
        self.token: str | None = None
        self.level_index: int | None = None
        self.reported_level: int | None = None
        self.parameters: PublishedParameters | None = None

    # -- paths ---------------------------------------------------------------------------
    @property
    def campaign_path(self) -> str:
        return f"/v1/campaigns/{quote(self.campaign_id, safe='')}"

    def round_path(self, round_number: int) -> str:
        return f"{self.campaign_path}/rounds/{round_number}"

    def auth(self) -> dict[str, str]:
        if self.token is None:
            raise ClientError("not enrolled: call enroll() first")
        return {"Authorization": f"Bearer {self.token}"}

    # -- answers -------------------------------------------------------------------------
    def check_signatures(self, view: CampaignView, *, parameters: bool = False) -> None:
        """With a ``server_key``: the view's campaign statement, its end statement if the
        phase is terminal, and with ``parameters`` its parameters statement, must carry
        the server's signature (:class:`VerificationError` naming the check)."""
        if self.server_key is None:
            return
        try:
            verify_campaign_signature(self.server_key, view)
            if parameters:
                verify_parameters_signature(self.server_key, view)
            verify_end_signature(self.server_key, view)
        except SignatureError as exc:
            raise VerificationError(f"server signature ({exc.check}): {exc}") from None

    def reached(self, view: CampaignView, phase: str) -> bool:
        """:func:`phase_reached` on a view whose signatures (with a ``server_key``) hold:
        a relay cannot end a campaign for a client by forging ``failed`` or ``aborted``."""
        if view.id != self.campaign_id:
            raise VerificationError(f"the answer is for campaign {view.id!r}, "
                                    f"not {self.campaign_id!r}")
        self.check_signatures(view)
        return phase_reached(view, phase)

    def accept_campaign(self, view: CampaignView, hpke: HpkeConfig) -> CampaignView:
        """Verify a fetched view; the first one pins the key id and configuration hash."""
        key = verify_campaign(view, hpke, self.campaign_id,
                              min_fake_tolerance=self.min_fake_tolerance)
        self.check_signatures(view)
        if self.expected_key_id is not None and key.key_id != self.expected_key_id:
            raise VerificationError(f"the campaign's key {key.key_id} is not the expected "
                                    f"key {self.expected_key_id}")
        if self.key is None:
            self.key, self.config_hash = key, view.config_hash
        elif key.key_id != self.key.key_id or view.config_hash != self.config_hash:
            raise VerificationError("the campaign's key or configuration changed since it "
                                    "was first fetched")
        self.view = view
        return view

    def accept_enrollment(self, enrollment: EnrollmentResponse) -> str:
        if enrollment.campaign_id != self.campaign_id or not enrollment.token:
            raise ServiceError("the shuffler issued a token for another campaign")
        self.token = enrollment.token
        return self.token

    def accept_parameters(self, view: CampaignView) -> PublishedParameters:
        if self.level_index is None:
            raise ClientError("no level chosen: submit_level() comes first")
        assert self.key is not None and self.config_hash is not None
        self.check_signatures(view, parameters=view.parameters is not None)
        self.parameters = verify_parameters(
            view, level_index=self.level_index, key_id=self.key.key_id,
            config_hash=self.config_hash, allow_insecure=self.allow_insecure,
            min_fake_tolerance=self.min_fake_tolerance,
        )
        self.view = view
        return self.parameters

    def check_release_threshold(self, status: RoundStatus) -> None:
        """The shuffler must hold round 2 until n_min users took part.

        docs/protocol.md section 2, dropouts.
        """
        assert self.parameters is not None
        if status.required < self.parameters.accounting_users:
            raise VerificationError(
                f"the shuffler would release round 2 with {status.required} participants, "
                f"the guarantee needs {self.parameters.accounting_users}"
            )

    # -- bodies --------------------------------------------------------------------------
    def round1(self, level_index: int) -> tuple[dict[str, str], SentRound1]:
        if self.view is None or self.key is None:
            raise ClientError("fetch the campaign first")
        reported = report_level(level_index, self.view, self.rng)
        body = round1_body(self.view, self.key, reported)
        return body, SentRound1(level_index=level_index, reported_level=reported,
                                level_ciphertext=body["level"])

    def round1_sent(self, sent: SentRound1) -> None:
        self.level_index = sent.level_index
        self.reported_level = sent.reported_level

    def round2(self, items: Iterable[int]) -> tuple[dict[str, object], SentRound2]:
        if self.parameters is None or self.view is None or self.key is None:
            raise ClientError("fetch and verify the parameters first")
        assert self.level_index is not None
        reported = self.reported_level
        if reported is None:
            reported = report_level(self.level_index, self.view, self.rng)
        fitted, slots = data_slots(items, self.parameters, self.level_index, self.rng)
        body = round2_body(self.view, self.key, reported, slots)
        sent = SentRound2(level_index=self.level_index, reported_level=reported,
                          items=fitted, slots=tuple(slots))
        return body, sent
