"""Checks a client makes before it sends anything that depends on what the server published.

Every check has a name (a field of the configuration or parameters, or one of the
identity checks); a failed check raises :class:`VerificationError` carrying it
(``error.check``, and ``error.checks`` when several failed).  docs/protocol.md
section 6 lists every field and how it is checked.

Round 1 (:func:`verify_campaign`): the view is for the campaign asked about, its
``config_hash`` is the SHA-256 of its canonical configuration, the HPKE key config is
well formed and its key id, the hash of its key, is the key id the view pins.  The
configuration itself (:func:`configuration_problems`) must be one the server could
have been asked to create (every field in range, by the same model the server
validates creation requests with) and within the app's :class:`ClientPolicy`:

- ``padding`` on, unless the app opted in (``allow_unpadded``): without padding ids a
  user holding fewer than s items sends fewer non-null messages, which the accounting
  (exactly s items) does not cover;
- ``fixed_size`` on, unless the app opted in (``allow_variable_size``): otherwise the
  number of ciphertexts reveals the level to the shuffler;
- ``fake_tolerance`` at least the app's ``min_fake_tolerance``, ``min_users`` at least
  the app's ``min_users`` (default the shuffler's default floor, 10), a configured
  ``delta`` at most the app's ceiling (default 1e-3, whatever the server chooses);
- no ``insecure_parameters`` unless the caller allows them (tests only).

Round 2 (:func:`verify_parameters`): the published parameters

- hash to the announced ``parameters_hash`` and pin the same configuration hash and
  key id as round 1;
- repeat the configuration (levels, sizes, privacy domain, message format,
  tolerances, blanket mode) and follow its geometry (:mod:`segshuffle.core.blanket`:
  ``blanket_slots`` = ceil(m), or D in the independent mode; ``messages_per_user`` =
  s + ``blanket_slots``);
- claim a round-1 count n of at least the campaign's (and the app's) ``min_users``,
  with ``accounting_users`` = n_min and ``honest_users`` = h by the rules of
  :mod:`segshuffle.core.rules`, computed from the *configuration's* tolerances.  That n
  is at most the shuffler's own round-1 participant count is checked against the
  shuffler's round status (:func:`verify_round1_count`);
- use the campaign's delta, or the default rule's 0.01 / n when it left delta unset,
  and no more than the app's ceiling (:meth:`ClientPolicy.delta_limit`: a fixed number,
  so neither the campaign's ``min_users`` nor the claimed n can move it);
- publish per level an epsilon e_k with 0 <= e_k <= E_k, and a lower bound that is
  absent or between 0 and e_k (compared once e_k is verified); an MSE bound that is a
  finite non-negative number or absent;
- protect *every* level, not only this user's, at its published epsilon:
  delta_user(e_k) <= delta on the server's full view for the published lambda_k, m, h,
  privacy domain and blanket mode (:func:`segshuffle.client.accountant.user_delta`:
  the numpy accountant or its numpy-free port, whichever is installed).
  As delta_user falls with epsilon, that also protects E_k >= e_k.  Parameters are
  the same for everyone; a server that under-protects one level would learn who sits
  at it from who refuses.  A level whose rate protects E_k but not the published e_k
  fails the ``epsilons`` check (an understated guarantee), one whose rate does not
  protect E_k fails ``lambdas``.  The check first looks, for every level, for an
  exhibited pair of datasets whose divergence at E_k already exceeds delta
  (:func:`segshuffle.client.accountant.refutation`, a certified lower bound, cheap):
  when there is one, those levels fail ``lambdas`` and no upper bound is computed.

Parameters published with ``insecure: true`` (a test-only server flag) are refused
unless the caller explicitly allows them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from segshuffle.core import blanket, rules
from segshuffle.core.blanket import BlanketMode
from segshuffle.crypto import PinnedKey, public_key_from_config
from segshuffle.wire.models import (
    CampaignConfig,
    CampaignCreate,
    CampaignView,
    HpkeConfig,
    PublishedParameters,
    RoundStatus,
)
from segshuffle.wire.validation import reason

from . import accountant
from .errors import VerificationError
from .policy import ClientPolicy

Problem = tuple[str, str]
"""(the check's name, what is wrong)."""

_DEFAULT_POLICY = ClientPolicy()


def _checks(problems: Sequence[Problem]) -> tuple[str, ...]:
    """The names of the failed checks, each once, in order."""
    return tuple(dict.fromkeys(check for check, _ in problems))


def _refusal(prefix: str, problems: Sequence[Problem]) -> VerificationError:
    checks = _checks(problems)
    return VerificationError(f"{prefix}: {'; '.join(text for _, text in problems)}",
                             check=checks[0], checks=checks)


def _policy(policy: ClientPolicy | None, *, min_fake_tolerance: float = 0.0,
            delta_ceiling: float | None = None) -> ClientPolicy:
    """``policy`` (default: the defaults) tightened by the shortcut arguments."""
    result = (policy or _DEFAULT_POLICY).with_fake_tolerance(min_fake_tolerance)
    return result if delta_ceiling is None else result.with_delta_ceiling(delta_ceiling)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value)


def _digest(document: CampaignConfig | PublishedParameters) -> str | None:
    """The document's hash, or None when it has no canonical JSON (a NaN, an infinity).

    A document without one cannot match any announced hash; its field checks run
    first all the same, so that the refusal names the field.
    """
    try:
        return document.hash_hex()
    except (TypeError, ValueError):
        return None


# -- the configuration ----------------------------------------------------------------------
def _well_formed(config: CampaignConfig) -> list[Problem]:
    """The configuration is one the server could have been asked to create."""
    try:
        CampaignCreate.model_validate(config.model_dump())
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = error["loc"][0] if error["loc"] else "configuration"
            problems.append((str(where), f"{where}: {reason(error)}"))
        return problems
    except (TypeError, ValueError) as exc:  # a value the model cannot even dump
        return [("configuration", f"malformed configuration ({exc})")]
    return []


def configuration_problems(config: CampaignConfig, policy: ClientPolicy, *,
                           allow_insecure: bool = False) -> list[Problem]:
    """What makes ``config`` unacceptable to an app with ``policy`` (module docstring)."""
    problems = _well_formed(config)
    if problems:
        return problems
    if not config.padding and not policy.allow_unpadded:
        problems.append(("padding", (
            "padding: the campaign has no padding ids, so a user holding fewer than s "
            f"= {config.set_size} items would send fewer non-null messages, which the "
            "published epsilon does not account for (the app did not opt in with "
            "allow_unpadded)")))
    if not config.fixed_size and not policy.allow_variable_size:
        problems.append(("fixed_size", (
            "fixed_size: submissions of the campaign carry only the sent slots, so their "
            "number reveals the user's level to the shuffler and the network (the app did "
            "not opt in with allow_variable_size)")))
    if config.fake_tolerance < policy.min_fake_tolerance:
        problems.append(("fake_tolerance", (
            f"fake tolerance: the campaign tolerates a fraction {config.fake_tolerance:g} "
            "of fake or colluding participants, this client requires at least "
            f"{policy.min_fake_tolerance:g}")))
    if config.min_users < policy.min_users_required:
        problems.append(("min_users", (
            f"min_users: the campaign needs {config.min_users} participants, this client "
            f"requires at least {policy.min_users_required}"
            + ("" if policy.min_users is not None else
               " (the shuffler's default floor; an app whose shuffler has a lower one "
               "sets ClientPolicy(min_users=...))"))))
    limit = policy.delta_limit()
    if config.delta is not None and config.delta > limit:
        problems.append(("delta", (
            f"delta: the campaign's {config.delta:g} is above this client's ceiling "
            f"{limit:g}")))
    if config.insecure_parameters is not None and not allow_insecure:
        problems.append(("insecure_parameters", (
            "insecure_parameters: the campaign publishes fixed, unaccounted parameters "
            "(a test-only setting)")))
    return problems


def verify_campaign(view: CampaignView, hpke: HpkeConfig, campaign_id: str, *,
                    policy: ClientPolicy | None = None, min_fake_tolerance: float = 0.0,
                    allow_insecure: bool = False) -> PinnedKey:
    """Round-1 checks; returns the verified public key to seal with.

    ``min_fake_tolerance`` tightens the policy's (the stricter applies).
    """
    policy = _policy(policy, min_fake_tolerance=min_fake_tolerance)
    if view.id != campaign_id or view.config.id != campaign_id:
        raise VerificationError(f"the server answered for campaign {view.id!r}, "
                                f"not {campaign_id!r}", check="campaign")
    digest = _digest(view.config)
    if digest is not None and digest != view.config_hash:
        raise VerificationError("config_hash does not match the campaign configuration",
                                check="config_hash")
    try:
        pinned = public_key_from_config(hpke)
    except ValueError as exc:
        raise VerificationError(f"invalid HPKE key config: {exc}", check="key") from None
    if pinned.key_id != view.key_id or view.hpke_config.key_id != view.key_id:
        raise VerificationError(
            f"key id {pinned.key_id} of the key config is not the campaign's pinned "
            f"key id {view.key_id}", check="key")
    if view.hpke_config.public_key != hpke.public_key:
        raise VerificationError("the key config differs from the key in the campaign view",
                                check="key")
    problems = configuration_problems(view.config, policy, allow_insecure=allow_insecure)
    if problems:
        raise _refusal("the campaign's settings are not acceptable", problems)
    if digest is None:
        raise VerificationError("the campaign configuration has no canonical form",
                                check="config_hash")
    return pinned


# -- the parameters -------------------------------------------------------------------------
def _geometry_problems(p: PublishedParameters, config: CampaignConfig,
                       mode: BlanketMode) -> list[Problem]:
    """What is wrong with m, ``blanket_slots`` and ``messages_per_user`` in ``mode``."""
    domain = config.privacy_domain_size
    try:  # refuses a non-finite or negative m, and m > D in the independent mode
        if not _finite(p.m):
            raise ValueError("not a finite number")
        slots = blanket.blanket_slots(p.m, domain, mode)
        messages = blanket.messages_per_user(config.set_size, p.m, domain, mode)
    except (TypeError, ValueError) as exc:
        return [("m", f"blanket rate (m = {p.m!r}: {exc})")]
    problems = []
    if p.blanket_slots != slots:
        problems.append(("blanket_slots", f"blanket rate ({p.blanket_slots!r} blanket "
                                          f"slots, m = {p.m:g} gives {slots})"))
    if p.messages_per_user != messages:
        problems.append(("messages_per_user", f"messages per user ({p.messages_per_user!r}, "
                                              f"the campaign's geometry gives {messages})"))
    return problems


def _repeats_configuration(p: PublishedParameters, config: CampaignConfig) -> list[Problem]:
    """Every field the parameters copy from the configuration must equal it."""
    copied: list[tuple[str, Any, Any]] = [
        ("campaign_id", p.campaign_id, config.id),
        ("levels", list(p.levels), list(config.levels)),
        ("set_size", p.set_size, config.set_size),
        ("domain_size", p.domain_size, config.domain_size),
        ("privacy_domain_size", p.privacy_domain_size, config.privacy_domain_size),
        ("padding_items", p.padding_items, config.padding_items),
        ("fixed_size", p.fixed_size, config.fixed_size),
        ("level_privacy", p.level_privacy, config.level_privacy),
        ("dropout_tolerance", p.dropout_tolerance, config.dropout_tolerance),
        ("fake_tolerance", p.fake_tolerance, config.fake_tolerance),
        ("blanket_mode", p.blanket_mode, config.blanket_mode),
        ("correlation_ratio", p.correlation_ratio, config.correlation_ratio),
    ]
    problems = []
    for name, published, configured in copied:
        # type() too: True == 1 and 1.0 == 1, but a bool or int is not the configured value
        if published != configured or type(published) is not type(configured):
            problems.append((name, f"{name.replace('_', ' ')} ({published}, the "
                                   f"campaign uses {configured})"))
    return problems


def _count_problems(p: PublishedParameters, config: CampaignConfig,
                    policy: ClientPolicy) -> list[Problem]:
    """n, n_min and h, by the rules, from the configuration's tolerances."""
    floor = policy.users_floor(config.min_users)
    users = p.users
    if not (isinstance(users, int) and not isinstance(users, bool)
            and floor <= users <= rules.MAX_USERS):
        return [("users", f"user counts (n = {users!r}; the campaign needs at least "
                          f"{floor} round-1 participants)")]
    problems = []
    n_min = rules.accounting_users(users, config.dropout_tolerance)
    if p.accounting_users != n_min or isinstance(p.accounting_users, bool):
        problems.append(("accounting_users", f"user counts (n_min = {p.accounting_users!r}, "
                                             f"the campaign's rule gives {n_min})"))
    honest = rules.honest_users(users, config.dropout_tolerance, config.fake_tolerance)
    if p.honest_users != honest or isinstance(p.honest_users, bool):
        problems.append(("honest_users", (
            f"honest users ({p.honest_users!r}, the campaign's rule gives ceil((1 - "
            f"{config.fake_tolerance:g}) {n_min}) = {honest})")))
    return problems


def _delta_problems(p: PublishedParameters, config: CampaignConfig,
                    policy: ClientPolicy) -> list[Problem]:
    """delta must be the campaign's, or the default rule's, and within the app's ceiling."""
    if not (_finite(p.delta) and rules.MIN_DELTA <= p.delta < 1.0):
        return [("delta", f"delta ({p.delta!r} is not in [{rules.MIN_DELTA:g}, 1))")]
    problems = []
    users_valid = isinstance(p.users, int) and 1 <= p.users <= rules.MAX_USERS
    if config.delta is not None or users_valid:
        expected = config.delta if config.delta is not None else rules.default_delta(p.users)
        if p.delta != expected:
            problems.append(("delta", f"delta ({p.delta:g}, the campaign's rule gives "
                                      f"{expected:g})"))
    limit = policy.delta_limit()
    if p.delta > limit:
        problems.append(("delta", f"delta ({p.delta:g} is above this client's ceiling "
                                  f"{limit:g})"))
    return problems


def _rate_problems(p: PublishedParameters, levels: int) -> list[Problem]:
    lambdas = p.lambdas
    if len(lambdas) != levels or not all(_finite(lam) and 0.0 <= lam <= 1.0
                                         for lam in lambdas):
        return [("lambdas", f"Poisson rates ({lambdas!r}: one per level, each in [0, 1])")]
    return []


def _report_problems(p: PublishedParameters, config: CampaignConfig) -> list[Problem]:
    """The published epsilons, their lower bounds and the MSE bound, as numbers."""
    problems = []
    uppers = p.epsilons
    if len(uppers) != len(config.levels) or not all(
            _finite(e) and 0.0 <= e <= level
            for e, level in zip(uppers, config.levels, strict=False)):
        problems.append(("epsilons", f"epsilons ({uppers!r}: one per level, each in "
                                     "[0, the level])"))
    lowers = p.epsilons_lower
    if len(lowers) != len(config.levels) or not all(
            lower is None or (_finite(lower) and 0.0 <= lower <= level)
            for lower, level in zip(lowers, config.levels, strict=False)):
        problems.append(("epsilons_lower", f"epsilon lower bounds ({lowers!r}: one per "
                                           "level, each absent or in [0, the level])"))
    if p.mse_bound is not None and not (_finite(p.mse_bound) and p.mse_bound >= 0.0):
        problems.append(("mse_bound", f"MSE bound ({p.mse_bound!r} is not a finite number "
                                      ">= 0)"))
    return problems


@functools.lru_cache(maxsize=256)
def _unprotected_levels(levels: tuple[float, ...], epsilons: tuple[float, ...],
                        lambdas: tuple[float, ...], set_size: int, delta: float, users: int,
                        m: float, domain_size: int, mode: BlanketMode,
                        accountant_name: str) -> tuple[Problem, ...]:
    """Every level whose rate fails delta_user(e_k) <= delta at its published epsilon.

    All levels, not only the caller's (module docstring).  Cached: a population shares
    one parameter set.  ``accountant_name`` picks the implementation
    (:func:`segshuffle.client.accountant.accountant_name`).
    """
    user_delta = accountant.implementation(accountant_name)
    # First an exhibited pair of datasets per level, at the level itself (cheap): a level
    # whose pair already exceeds delta is refused whatever the upper bounds say, and when
    # one is, the upper bounds are not computed.
    refute = accountant.refutation(accountant_name)
    refuted: list[Problem] = []
    for level, lam in zip(levels, lambdas, strict=True):
        lower = refute(level, lam, set_size, users, m, domain_size, mode=mode, delta=delta)
        if lower is not None:
            refuted.append(("lambdas", f"level {level:g} (lambda={lam:g}: delta_user>="
                                       f"{lower:.3g}, shown by an exhibited pair of datasets)"))
    if refuted:
        return tuple(refuted)
    failing: list[Problem] = []
    for level, eps, lam in zip(levels, epsilons, lambdas, strict=True):
        # Compared with delta only: the accountant may stop at the first bound that
        # certifies it (above delta every bound is taken, so the reported value is the least).
        bound = user_delta(eps, lam, set_size, users, m, domain_size,
                           mode=mode, delta=delta, enough=delta)
        if bound <= delta:
            continue
        at_level = bound if eps == level else user_delta(
            level, lam, set_size, users, m, domain_size, mode=mode, delta=delta)
        if at_level <= delta:
            failing.append(("epsilons", (
                f"level {level:g} at its published epsilon {eps:g} (lambda={lam:g}: "
                f"delta_user={bound:.3g}; an understated guarantee)")))
        else:
            failing.append(("lambdas", f"level {level:g} (lambda={lam:g}: "
                                       f"delta_user={at_level:.3g})"))
    return tuple(failing)


def verify_parameters(
    view: CampaignView,
    *,
    level_index: int,
    key_id: str,
    config_hash: str,
    policy: ClientPolicy | None = None,
    allow_insecure: bool = False,
    delta_ceiling: float | None = None,
    min_fake_tolerance: float = 0.0,
) -> PublishedParameters:
    """Round-2 checks for a user at ``level_index``; returns the verified parameters.

    ``policy`` holds the app's limits (default :class:`ClientPolicy`); ``delta_ceiling``
    and ``min_fake_tolerance`` tighten it.
    """
    policy = _policy(policy, min_fake_tolerance=min_fake_tolerance,
                     delta_ceiling=delta_ceiling)
    p = view.parameters
    if p is None or view.parameters_hash is None:
        raise VerificationError("the round-2 parameters are not published",
                                check="parameters")
    digest = _digest(p)
    if digest is not None and digest != view.parameters_hash:
        raise VerificationError("parameters_hash does not match the published parameters",
                                check="parameters_hash")
    if view.config_hash != config_hash or p.config_hash != config_hash:
        raise VerificationError("the campaign configuration changed since round 1",
                                check="config_hash")
    if p.key_id != key_id or view.key_id != key_id:
        raise VerificationError(f"the parameters pin key id {p.key_id}, round 1 used "
                                f"{key_id}", check="key")
    config = view.config
    problems = configuration_problems(config, policy, allow_insecure=allow_insecure)
    if problems:
        raise _refusal("the campaign's settings are not acceptable", problems)
    mode = blanket.parse_mode(config.blanket_mode)
    problems = _repeats_configuration(p, config)
    problems += _geometry_problems(p, config, mode)
    problems += _count_problems(p, config, policy)
    problems += _rate_problems(p, len(config.levels))
    problems += _delta_problems(p, config, policy)
    if p.insecure is not (config.insecure_parameters is not None):
        problems.append(("insecure", f"insecure ({p.insecure!r}: the campaign "
                                     f"{'has' if config.insecure_parameters else 'has no'} "
                                     "insecure parameters)"))
    elif not p.insecure:
        problems += _report_problems(p, config)
    if problems:
        raise _refusal("the published parameters are inconsistent with the campaign",
                       problems)
    if digest is None:
        raise VerificationError("the published parameters have no canonical form",
                                check="parameters_hash")
    if not 0 <= level_index < len(config.levels):
        raise VerificationError(f"level index {level_index} is not one of the "
                                f"{len(config.levels)} levels", check="level_index")
    if p.insecure:
        if allow_insecure:
            return p
        raise VerificationError("the server published insecure (unaccounted) parameters",
                                check="insecure")
    # Read first: an invalid SEGSHUFFLE_ACCOUNTANT is the client's own setting, not a
    # problem with the server's parameters, so its ValueError must not be caught below.
    accountant_name = accountant.accountant_name()
    try:
        failing = _unprotected_levels(
            tuple(config.levels), tuple(float(e) for e in p.epsilons), tuple(p.lambdas),
            config.set_size, p.delta, p.honest_users, p.m, config.privacy_domain_size, mode,
            accountant_name)
    except ValueError as exc:
        raise VerificationError(f"the published parameters cannot be accounted: {exc}",
                                check="lambdas") from None
    if failing:
        checks = _checks(failing)
        raise VerificationError(
            f"the published parameters would not protect "
            f"{', '.join(text for _, text in failing)} at delta={p.delta:g} "
            f"with m={p.m:g} ({mode.value} blanket), h={p.honest_users} honest of "
            f"n_min={p.accounting_users} (f={p.fake_tolerance:g}), "
            f"d={p.privacy_domain_size}", check=checks[0], checks=checks)
    # Only now, with the upper bounds verified: a lower bound above one is false.
    above = [f"level {level:g} ({lower:g} > {upper:g})" for level, lower, upper
             in zip(config.levels, p.epsilons_lower, p.epsilons, strict=True)
             if lower is not None and lower > upper]
    if above:
        raise VerificationError(f"the published epsilon lower bounds exceed the verified "
                                f"upper bounds: {', '.join(above)}", check="epsilons_lower")
    return p


# -- the shuffler's counts ------------------------------------------------------------------
def verify_round1_count(parameters: PublishedParameters, status: RoundStatus) -> None:
    """The claimed round-1 n is at most the participants the shuffler released in round 1.

    The server cannot have decoded more level messages than the shuffler forwarded
    (it may have decoded fewer: malformed messages of fake users are dropped).
    """
    if status.round != 1 or status.campaign_id != parameters.campaign_id:
        raise VerificationError("the round status is not round 1 of this campaign",
                                check="round1_participants")
    if not status.released or parameters.users > status.participants:
        raise VerificationError(
            f"the parameters claim n = {parameters.users} round-1 participants, the "
            f"shuffler released round 1 with {status.participants}"
            f"{'' if status.released else ' (not released)'}", check="round1_participants")


def verify_release_threshold(parameters: PublishedParameters, status: RoundStatus) -> None:
    """The shuffler must hold round 2 until n_min users took part (docs/protocol.md 2)."""
    if status.required < parameters.accounting_users:
        raise VerificationError(
            f"the shuffler would release round 2 with {status.required} participants, "
            f"the guarantee needs {parameters.accounting_users}", check="release_threshold")
