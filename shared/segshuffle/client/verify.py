"""Checks a client makes before it sends anything that depends on what the server published.

Round 1 (:func:`verify_campaign`): the view's ``config_hash`` is the SHA-256 of
its canonical configuration, the HPKE key config is well formed, its key id
is the hash of its key and equals the key id the view pins, and the campaign
tolerates at least the fraction of fake or colluding participants the app demands
(``min_fake_tolerance``, default 0: a campaign assuming fewer fakes is refused).

Round 2 (:func:`verify_parameters`): the published parameters

- hash to the announced ``parameters_hash`` and pin the same configuration hash
  and key id as round 1 (a swapped key or campaign would split the anonymity
  set or redirect messages);
- are consistent with the configuration (levels, set size, privacy domain,
  dropout and fake tolerances, fixed size, level privacy, blanket mode: parameters for another
  mode than the configuration's are refused), with the geometry of
  :mod:`segshuffle.core.blanket` for that mode and its caps (``blanket_slots`` =
  ceil(m), or D in the independent mode; ``messages_per_user = s + blanket_slots``)
  and with the rules of :mod:`segshuffle.core.rules` (``accounting_users`` = n_min,
  ``honest_users`` = h = ceil((1 - f) n_min): parameters accounted with any other
  count, such as n_min by a server that ignores f, are refused);
- use the campaign's delta, or the default rule's 0.01 / n when the campaign left
  it unset, and no more than the client's ceiling (1 / n unless the app sets one);
- protect *every* level, not only this user's: delta_user(E_k) <= delta holds on
  the server's full view for each published lambda_k at the published m, h,
  privacy domain and blanket mode (:func:`segshuffle.core.accounting.user_level_holds`).
  Parameters are the same for everyone; a server that under-protects one level
  would learn who sits at it from who refuses.  Tampered parameters such as
  lambda = 1 with m = 0 fail here.

Parameters published with ``insecure: true`` (a test-only server flag) are
refused unless the caller explicitly allows them.
"""

from __future__ import annotations

import functools

from segshuffle.core import accounting, blanket, rules
from segshuffle.core.blanket import BlanketMode
from segshuffle.crypto import PinnedKey, public_key_from_config
from segshuffle.wire.models import CampaignView, HpkeConfig, PublishedParameters

from .errors import VerificationError


def verify_campaign(view: CampaignView, hpke: HpkeConfig, campaign_id: str, *,
                    min_fake_tolerance: float = 0.0) -> PinnedKey:
    """Round-1 checks; returns the verified public key to seal with."""
    if view.id != campaign_id or view.config.id != campaign_id:
        raise VerificationError(f"the server answered for campaign {view.id!r}, "
                                f"not {campaign_id!r}")
    if view.config.hash_hex() != view.config_hash:
        raise VerificationError("config_hash does not match the campaign configuration")
    try:
        pinned = public_key_from_config(hpke)
    except ValueError as exc:
        raise VerificationError(f"invalid HPKE key config: {exc}") from None
    if pinned.key_id != view.key_id or view.hpke_config.key_id != view.key_id:
        raise VerificationError(
            f"key id {pinned.key_id} of the key config is not the campaign's pinned "
            f"key id {view.key_id}"
        )
    if view.hpke_config.public_key != hpke.public_key:
        raise VerificationError("the key config differs from the key in the campaign view")
    _require_fake_tolerance(view.config.fake_tolerance, min_fake_tolerance)
    return pinned


def _require_fake_tolerance(campaign: float, minimum: float) -> None:
    """Refuse a campaign that accounts for fewer fake participants than the app demands."""
    if not 0.0 <= campaign < 1.0:
        raise VerificationError(f"fake tolerance: the campaign's {campaign!r} is not in [0, 1)")
    if not campaign >= minimum:
        raise VerificationError(
            f"fake tolerance: the campaign tolerates a fraction {campaign:g} of fake or "
            f"colluding participants, this client requires at least {minimum:g}")


@functools.lru_cache(maxsize=256)
def _unprotected_levels(levels: tuple[float, ...], lambdas: tuple[float, ...], set_size: int,
                        delta: float, users: int, m: float, domain_size: int,
                        mode: BlanketMode) -> tuple[str, ...]:
    """Every level whose published rate does not meet delta_user(E_k) <= delta.

    All levels, not only the caller's: parameters are the same for everyone, and a
    server that under-protects one level would learn who sits at it from who drops
    out.  Cached: a population shares one parameter set.
    """
    failing = []
    for level, lam in zip(levels, lambdas, strict=True):
        # delta_user <= delta is what user_level_holds checks; computed once, it is
        # also what the refusal reports.
        bound = accounting.user_delta(level, lam, set_size, users, m, domain_size,
                                      mode=mode, delta=delta)
        if not bound <= delta:
            failing.append(f"level {level:g} (lambda={lam:g}: delta_user={bound:.3g})")
    return tuple(failing)


def _honest_users(p: PublishedParameters) -> int | None:
    """h from the published n, tau and f; None when f is not a valid tolerance."""
    try:
        return rules.honest_users(p.users, p.dropout_tolerance, p.fake_tolerance)
    except ValueError:
        return None


def _delta_problems(p: PublishedParameters, configured: float | None,
                    ceiling: float | None) -> list[str]:
    """delta must be the campaign's, or the default rule's, and within the client's ceiling."""
    expected = configured if configured is not None else rules.default_delta(p.users)
    problems = []
    if p.delta != expected:
        problems.append(f"delta ({p.delta:g}, the campaign's rule gives {expected:g})")
    limit = rules.client_delta_ceiling(p.users) if ceiling is None else ceiling
    if p.delta > limit:
        problems.append(f"delta ({p.delta:g} is above this client's ceiling {limit:g})")
    return problems


def _geometry_problems(p: PublishedParameters, mode: BlanketMode) -> list[str]:
    """What is wrong with m, ``blanket_slots`` and ``messages_per_user`` in ``mode``."""
    domain = p.privacy_domain_size
    try:  # refuses a non-finite or negative m, and m > D in the independent mode
        slots = blanket.blanket_slots(p.m, domain, mode)
        messages = blanket.messages_per_user(p.set_size, p.m, domain, mode)
    except ValueError:
        return ["blanket rate"]
    problems = []
    if p.blanket_slots != slots:
        problems.append("blanket rate")
    if p.messages_per_user != messages:
        problems.append("messages per user")
    return problems


def verify_parameters(
    view: CampaignView,
    *,
    level_index: int,
    key_id: str,
    config_hash: str,
    allow_insecure: bool = False,
    delta_ceiling: float | None = None,
    min_fake_tolerance: float = 0.0,
) -> PublishedParameters:
    """Round-2 checks for a user at ``level_index``; returns the verified parameters.

    ``delta_ceiling`` is the largest delta the app accepts (default 1 / n);
    ``min_fake_tolerance`` the smallest fake tolerance f it accepts (default 0).
    """
    p = view.parameters
    if p is None or view.parameters_hash is None:
        raise VerificationError("the round-2 parameters are not published")
    if p.hash_hex() != view.parameters_hash:
        raise VerificationError("parameters_hash does not match the published parameters")
    if view.config_hash != config_hash or p.config_hash != config_hash:
        raise VerificationError("the campaign configuration changed since round 1")
    if p.key_id != key_id or view.key_id != key_id:
        raise VerificationError(f"the parameters pin key id {p.key_id}, round 1 used {key_id}")
    config = view.config
    s = config.set_size
    k = len(config.levels)
    problems = []
    if p.campaign_id != config.id:
        problems.append("campaign id")
    if list(p.levels) != list(config.levels) or len(p.lambdas) != k:
        problems.append("levels")
    if p.set_size != s or p.domain_size != config.domain_size:
        problems.append("set or domain size")
    if (p.privacy_domain_size != config.privacy_domain_size
            or p.padding_items != config.padding_items):
        problems.append("privacy domain")
    if p.fixed_size != config.fixed_size or p.level_privacy != config.level_privacy:
        problems.append("message format")
    if p.dropout_tolerance != config.dropout_tolerance:
        problems.append("dropout tolerance")
    if p.fake_tolerance != config.fake_tolerance:
        problems.append("fake tolerance")
    mode = blanket.parse_mode(config.blanket_mode)
    if p.blanket_mode != config.blanket_mode:
        problems.append(f"blanket mode ({p.blanket_mode}, the campaign uses "
                        f"{config.blanket_mode})")
    problems.extend(_geometry_problems(p, mode))
    if (not 1 <= p.users <= rules.MAX_USERS
            or p.accounting_users != rules.accounting_users(p.users, p.dropout_tolerance)):
        problems.append("user counts")
    elif (honest := _honest_users(p)) is None:
        problems.append(f"fake tolerance ({p.fake_tolerance!r} is not in [0, 1))")
    elif p.honest_users != honest:
        problems.append(f"honest users ({p.honest_users}, the campaign's rule gives "
                        f"ceil((1 - {p.fake_tolerance:g}) {p.accounting_users}) = {honest})")
    if not all(0.0 <= lam <= 1.0 for lam in p.lambdas):
        problems.append("Poisson rates")
    if not rules.MIN_DELTA <= p.delta < 1.0:
        problems.append("delta")
    elif 1 <= p.users <= rules.MAX_USERS:
        problems.extend(_delta_problems(p, config.delta, delta_ceiling))
    if problems:
        raise VerificationError("the published parameters are inconsistent with the "
                                f"campaign: {', '.join(problems)}")
    _require_fake_tolerance(config.fake_tolerance, min_fake_tolerance)
    if not 0 <= level_index < k:
        raise VerificationError(f"level index {level_index} is not one of the {k} levels")
    if p.insecure:
        if allow_insecure:
            return p
        raise VerificationError("the server published insecure (unaccounted) parameters")
    try:
        failing = _unprotected_levels(tuple(config.levels), tuple(p.lambdas), s, p.delta,
                                      p.honest_users, p.m, p.privacy_domain_size, mode)
    except ValueError as exc:
        raise VerificationError(f"the published parameters cannot be accounted: {exc}") from None
    if failing:
        raise VerificationError(
            f"the published parameters would not protect {', '.join(failing)} at "
            f"delta={p.delta:g} with m={p.m:g} ({mode.value} blanket), "
            f"h={p.honest_users} honest of n_min={p.accounting_users} (f={p.fake_tolerance:g}), "
            f"d={p.privacy_domain_size}"
        )
    return p
