"""What the server computes at the end of each round (docs/protocol.md sections 2-5); no I/O here.

Round 1 (:func:`publish_parameters`): the level histogram (n_1..n_K), debiased when
levels were reported through eps_p randomized response (clipped at 0), goes to
:func:`segshuffle.core.optimizer.optimize` with delta (default 0.01/n), the privacy
domain d + s (padding ids d..d+s-1 included, docs/architecture.md, "Plaintext") and
the dropout tolerance tau and the fake tolerance f, which account with the
h = ceil((1 - f) n_min) honest users of n_min = ceil((1 - tau) n)
(:func:`segshuffle.core.rules.honest_users`, docs/protocol.md section 2, dropouts
and fake users), and the campaign's blanket mode.  The outcome
is the immutable
:class:`~segshuffle.wire.models.PublishedParameters`, whose ``blanket_slots`` and
``messages_per_user`` come from :mod:`segshuffle.core.blanket` (ceil(m) slots, or
one per item of the privacy domain in the independent mode); the shuffler checks
submission sizes against that ``messages_per_user``.

Round 2 (:func:`decode_results`): with C_j the accepted item messages equal to j and
n2_k the round-2 level counts (debiased likewise),

    W^_j = (C_j - n2 m / D) / sum_k n2_k lambda_k

with standard errors from :func:`segshuffle.core.estimator.estimate_frequencies`
(the blanket term of the variance follows the blanket mode), plus the projection
onto {0 <= w <= 1, sum w = s} as an optional post-processed estimate.  The privacy
report gives, per level, the achieved user-level epsilon (upper bound, and the
paper's lower bound as a tightness audit) for the published (m, lambda_k), h and
blanket mode, and states f and h.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from segshuffle.core import blanket
from segshuffle.core.accounting import user_epsilon
from segshuffle.core.estimator import estimate_frequencies, mse_bound, project_to_simplex
from segshuffle.core.level_privacy import LevelSetting, level_report
from segshuffle.core.levels import debias_histogram
from segshuffle.core.optimizer import LOWER_BOUND_LEVELS, optimize
from segshuffle.core.rules import (
    PUBLICATION_HEADROOM,
    accounting_users,
    default_delta,
    honest_users,
)
from segshuffle.wire.models import CampaignConfig, PublishedParameters


def level_counts(config: CampaignConfig, observed: Sequence[int]) -> list[float]:
    """n_k: observed counts, or their debiased estimates under eps_p level privacy.

    The debiased estimates (clipped at 0) are rescaled to sum to the number of
    participants n, which is known exactly (every participant sends one level
    message).  Unclipped, they already do; clipping only adds mass, and both the
    accounting (n_min = ceil((1 - tau) n)) and the decoder's blanket term n2 m / D
    need the true n.
    """
    if config.level_privacy is None:
        return [float(c) for c in observed]
    estimates = debias_histogram(observed, config.level_privacy)
    total = float(np.sum(estimates))
    users = float(sum(observed))
    if total <= 0.0:
        return [float(c) for c in observed]
    return [float(c) * users / total for c in estimates]


def histogram(counts: Mapping[int, int], size: int) -> list[int]:
    """A dense list of ``size`` counts from the stored sparse value -> count map."""
    dense = [0] * size
    for value, count in counts.items():
        if value >= 0:  # the null row is not a value
            dense[value] += count
    return dense


def publish_parameters(config: CampaignConfig, config_hash: str, key_id: str,
                       observed_levels: Sequence[int]) -> tuple[PublishedParameters,
                                                                dict[str, Any]]:
    """Round-2 parameters from the round-1 histogram; raises ValueError when impossible.

    Returns the parameters and a summary of round 1 kept for the results.
    """
    users = int(sum(observed_levels))
    counts = level_counts(config, observed_levels)
    delta = config.delta if config.delta is not None else default_delta(users)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    domain = config.privacy_domain_size
    s = config.set_size
    mode = blanket.parse_mode(config.blanket_mode)
    insecure = config.insecure_parameters
    if insecure is None:
        result = optimize(counts, config.levels, domain, s, delta,
                          dropout_tolerance=config.dropout_tolerance,
                          fake_tolerance=config.fake_tolerance, blanket_mode=mode,
                          headroom=PUBLICATION_HEADROOM,
                          correlation_ratio=config.correlation_ratio)
        if blanket.parse_mode(result.blanket_mode) is not mode:
            raise ValueError(f"the optimizer chose parameters for the {result.blanket_mode} "
                             f"blanket mode, the campaign uses {mode.value}")
        m = float(result.m)
        lambdas = [float(x) for x in result.lambdas]
        n_min = int(result.accounting_users)
        honest = int(result.honest_users)
        epsilons = list(result.epsilons)
        epsilons_lower = list(result.epsilons_lower)
        bound: float | None = float(result.mse_bound)
    else:
        m = float(insecure.m)
        lambdas = [float(x) for x in insecure.lambdas]
        n_min = accounting_users(float(users), config.dropout_tolerance)
        honest = honest_users(float(users), config.dropout_tolerance, config.fake_tolerance)
        epsilons = [user_epsilon(lam, s, delta, honest, m, domain, mode=mode)
                    for lam in lambdas]
        epsilons_lower = [
            user_epsilon(lam, s, delta, honest, m, domain, lower=True, mode=mode)
            if len(lambdas) <= LOWER_BOUND_LEVELS else None
            for lam in lambdas
        ]
        bound = mse_bound(float(users), m, s, counts, lambdas)
    slots = blanket.blanket_slots(m, domain, mode)
    parameters = PublishedParameters(
        campaign_id=config.id,
        key_id=key_id,
        config_hash=config_hash,
        levels=list(config.levels),
        m=m,
        blanket_mode=mode.value,
        correlation_ratio=config.correlation_ratio,
        blanket_slots=slots,
        lambdas=lambdas,
        domain_size=config.domain_size,
        privacy_domain_size=domain,
        padding_items=config.padding_items,
        set_size=s,
        messages_per_user=blanket.messages_per_user(s, m, domain, mode),
        fixed_size=config.fixed_size,
        level_privacy=config.level_privacy,
        delta=float(delta),
        users=users,
        accounting_users=n_min,
        honest_users=honest,
        dropout_tolerance=config.dropout_tolerance,
        fake_tolerance=config.fake_tolerance,
        epsilons=[None if e is None else float(e) for e in epsilons],
        epsilons_lower=[None if e is None else float(e) for e in epsilons_lower],
        mse_bound=bound if bound is not None and math.isfinite(bound) else None,
        insecure=insecure is not None,
    )
    summary = {"observed_levels": list(map(int, observed_levels)), "level_counts": counts,
               "users": users}
    return parameters, summary


def decode_results(config: CampaignConfig, parameters: PublishedParameters,
                   round1: Mapping[str, Any], observed_levels: Sequence[int],
                   item_counts: Sequence[int]) -> dict[str, Any]:
    """Estimates, standard errors, projection and privacy report of a finished campaign.

    Returns the JSON-ready body of :class:`~segshuffle.wire.models.Results` without the
    message accounting fields the caller adds.
    """
    n2_k = level_counts(config, observed_levels)
    d = config.domain_size
    s = config.set_size
    try:
        estimate = estimate_frequencies(item_counts, n2_k, parameters.lambdas, parameters.m,
                                        mode=parameters.blanket_mode)
        values: list[float | None] = [float(v) for v in estimate.values]
        errors: list[float | None] = [float(e) for e in estimate.standard_errors]
        target = float(s) if config.padding else float(np.clip(np.sum(estimate.values), 0, s))
        projected: list[float | None] = [
            float(v) for v in project_to_simplex(estimate.values, target)]
    except ValueError:  # no signal: every participating level has lambda = 0
        values = errors = projected = [None] * len(item_counts)
    names = config.items

    def entry(j: int) -> dict[str, Any]:
        return {"id": j, "name": names[j] if names is not None and j < d else None,
                "estimate": values[j], "standard_error": errors[j], "projected": projected[j]}

    pairs = level_pairs(config, parameters)
    level_rows = [
        {"level": level, "lam": lam, "epsilon_upper": upper, "epsilon_lower": lower,
         "users_round1": float(n1), "users_round2": float(n2)}
        for level, lam, upper, lower, n1, n2 in zip(
            parameters.levels, parameters.lambdas, parameters.epsilons,
            parameters.epsilons_lower, round1["level_counts"], n2_k, strict=True)
    ]
    return {
        "campaign_id": config.id,
        "phase": "done",
        "items": [entry(j) for j in range(d)],
        "padding": [entry(j) for j in range(d, len(item_counts))],
        "privacy": {
            "delta": parameters.delta,
            "m": parameters.m,
            "blanket_mode": parameters.blanket_mode,
            "messages_per_user": parameters.messages_per_user,
            "lambdas": list(parameters.lambdas),
            "users": parameters.users,
            "accounting_users": parameters.accounting_users,
            "fake_tolerance": parameters.fake_tolerance,
            "honest_users": parameters.honest_users,
            "round2_users": int(sum(observed_levels)),
            "levels": level_rows,
            "insecure": parameters.insecure,
            "level_privacy": config.level_privacy,
            "level_pairs": pairs["pairs"],
            "level_pairs_complete": pairs["complete"],
        },
    }


#: Up to this many distinct rates the results also carry the level pairs' lower bounds.
LEVEL_LOWER_RATES = 4


def level_pairs(config: CampaignConfig, parameters: PublishedParameters) -> dict[str, Any]:
    """Round 2's level guarantee between every two rates (docs/protocol.md section 4.6),
    at the published m, h, privacy domain and delta."""
    try:
        setting = LevelSetting(parameters.honest_users or parameters.accounting_users,
                               parameters.set_size, parameters.privacy_domain_size,
                               parameters.m, blanket.parse_mode(parameters.blanket_mode))
        rates = len(set(parameters.lambdas))
        report = level_report(list(parameters.levels), list(parameters.lambdas), setting,
                              parameters.delta, level_privacy=config.level_privacy,
                              lower=rates <= LEVEL_LOWER_RATES)
    except ValueError:  # parameters outside the accountant's range: not reported
        return {"complete": True, "pairs": None}
    return {"complete": report.complete, "pairs": [
        {"levels": list(pair.levels), "lambdas": list(pair.lambdas),
         "epsilon_upper": pair.epsilon_upper, "epsilon_lower": pair.epsilon_lower,
         "epsilon_both_rounds": pair.epsilon_both_rounds} for pair in report.pairs]}
