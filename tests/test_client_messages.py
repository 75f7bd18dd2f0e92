"""Client-side message construction: slot counts, nulls, padding, level reports, sealing."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from segshuffle.client.errors import ClientError, VerificationError
from segshuffle.client.messages import data_slots, report_level, round1_body, round2_body
from segshuffle.client.session import PublicCache, RetryPolicy
from segshuffle.client.verify import verify_parameters
from segshuffle.core.blanket import blanket_slots, messages_per_user
from segshuffle.crypto import DecryptError, build_info, generate_private_key, key_config, open_
from segshuffle.crypto import public_key_from_config as pin
from segshuffle.wire.models import (
    CampaignConfig,
    CampaignView,
    PublishedParameters,
    b64url_decode,
)
from segshuffle.wire.plaintext import Kind, decode_plaintext


def _view(*, padding: bool = True, fixed_size: bool = True, level_privacy: float | None = None,
          m: float = 2.5, lambdas: tuple[float, ...] = (0.4, 1.0),
          blanket_mode: str = "slots") -> tuple[CampaignView, object]:
    private = generate_private_key()
    hpke = key_config(private)
    config = CampaignConfig(id="c1", items=None, domain_size=10, set_size=3, levels=[1.0, 2.0],
                            delta=1e-5, min_users=10, dropout_tolerance=0.1,
                            level_privacy=level_privacy, fixed_size=fixed_size,
                            padding=padding, blanket_mode=blanket_mode)
    domain = config.privacy_domain_size
    parameters = PublishedParameters(
        campaign_id="c1", key_id=hpke.key_id, config_hash=config.hash_hex(),
        levels=[1.0, 2.0], m=m, blanket_mode=blanket_mode,
        blanket_slots=blanket_slots(m, domain, blanket_mode), lambdas=list(lambdas),
        domain_size=10, privacy_domain_size=domain,
        padding_items=config.padding_items, set_size=3,
        messages_per_user=messages_per_user(3, m, domain, blanket_mode), fixed_size=fixed_size,
        level_privacy=level_privacy,
        delta=1e-5, users=100, accounting_users=90, dropout_tolerance=0.1,
        epsilons=[1.0, 2.0], epsilons_lower=[1.0, 2.0], mse_bound=0.1,
    )
    view = CampaignView(id="c1", phase="round2", config=config, config_hash=config.hash_hex(),
                        key_id=hpke.key_id, hpke_config=hpke, parameters=parameters,
                        parameters_hash=parameters.hash_hex())
    return view, private


def test_fixed_size_sends_s_plus_ceil_m_slots_with_padding() -> None:
    view, _ = _view()
    p = view.parameters
    assert p is not None
    rng = np.random.default_rng(1)
    for items in ([1], [1, 2, 3], [0, 1, 2, 3, 4, 5, 6]):
        fitted, slots = data_slots(items, p, 1, rng)  # lambda = 1 at level index 1
        assert len(fitted) == 3 and len(slots) == 3 + 3
        assert list(slots[:3]) == list(fitted)  # every item is sent at lambda = 1
        assert all(j is None or 0 <= j < 13 for j in slots)
    fitted, _ = data_slots([4], p, 1, rng)
    assert 4 in fitted and all(j in (4, 10, 11, 12) for j in fitted)  # padding ids d..d+s-1


def test_without_padding_a_set_smaller_than_s_is_refused_before_sealing() -> None:
    """Nulls in place of missing items would reveal the set's size."""
    view, _ = _view(padding=False)
    p = view.parameters
    assert p is not None
    for items in ([7], [7, 8]):
        with pytest.raises(ClientError, match=r"no padding ids: a set of \d items"):
            data_slots(items, p, 1, np.random.default_rng(2))
    fitted, slots = data_slots([7, 8, 9], p, 1, np.random.default_rng(2))
    assert sorted(fitted) == [7, 8, 9] and len(slots) == 6
    assert list(slots[:3]) == list(fitted)  # lambda = 1: every item is sent, none is null
    assert all(j is None or j < 10 for j in slots)


def test_variable_size_sends_only_sent_slots() -> None:
    view, _ = _view(fixed_size=False, m=0.0, lambdas=(0.0, 1.0))
    p = view.parameters
    assert p is not None
    _, slots = data_slots([1, 2, 3], p, 0, np.random.default_rng(3))
    assert slots == [None]  # nothing sent at lambda = 0: one null keeps the body valid
    _, slots = data_slots([1, 2, 3], p, 1, np.random.default_rng(3))
    assert slots == [1, 2, 3]


def test_poisson_and_blanket_rates() -> None:
    view, _ = _view(m=2.5, lambdas=(0.4, 1.0))
    p = view.parameters
    assert p is not None
    rng = np.random.default_rng(4)
    sent_items = blanket = 0
    trials = 4000
    for _ in range(trials):
        _, slots = data_slots([1, 2, 3], p, 0, rng)
        sent_items += sum(j is not None for j in slots[:3])
        blanket += sum(j is not None for j in slots[3:])
    assert abs(sent_items / (3 * trials) - 0.4) < 0.02
    assert abs(blanket / trials - 2.5) < 0.05  # gamma * ceil(m) = m per user


def test_independent_mode_sends_one_slot_per_domain_item() -> None:
    view, _ = _view(m=3.25, lambdas=(0.4, 1.0), blanket_mode="independent")
    p = view.parameters
    assert p is not None and p.messages_per_user == 3 + 13 and p.blanket_slots == 13
    rng = np.random.default_rng(6)
    sent = np.zeros(13)
    trials = 3000
    for _ in range(trials):
        fitted, slots = data_slots([1, 2, 3], p, 1, rng)
        assert len(slots) == p.messages_per_user
        assert list(slots[:3]) == list(fitted)
        blanket = slots[3:]
        assert all(j is None or j == t for t, j in enumerate(blanket))  # slot t: item t
        sent += [j is not None for j in blanket]
    rate = 3.25 / 13  # m / D on every item of the privacy domain, padding ids included
    assert np.all(np.abs(sent / trials - rate) < 4.5 * math.sqrt(rate * (1 - rate) / trials))
    variable, _ = _view(fixed_size=False, m=13.0, lambdas=(0.0, 1.0),
                        blanket_mode="independent")
    assert variable.parameters is not None
    _, slots = data_slots([1, 2, 3], variable.parameters, 0, rng)
    assert slots == list(range(13))  # m = D: every item once, no item message at lambda 0


def test_verifier_checks_the_independent_geometry() -> None:
    view, _ = _view(m=3.25, blanket_mode="independent")
    p = view.parameters
    assert p is not None

    def verify(**changes: object) -> None:
        forged = p.model_copy(update=changes)
        verify_parameters(view.model_copy(update={"parameters": forged,
                                                  "parameters_hash": forged.hash_hex()}),
                          level_index=0, key_id=view.key_id, config_hash=view.config_hash)

    # the slots geometry for the same m, slots-mode parameters, m > D: all refused
    with pytest.raises(VerificationError, match=r"blanket rate.*messages per user") as refused:
        verify(blanket_slots=4, messages_per_user=7)
    assert refused.value.checks == ("blanket_slots", "messages_per_user")
    with pytest.raises(VerificationError, match=r"blanket mode \(slots, the campaign uses "
                                                r"independent\)"):
        verify(blanket_mode="slots", blanket_slots=4, messages_per_user=7)
    with pytest.raises(VerificationError, match="blanket rate"):
        verify(m=13.5)
    with pytest.raises(VerificationError, match="messages per user"):
        verify(messages_per_user=17)


def test_sealed_messages_open_only_in_their_context() -> None:
    view, private = _view()
    key = pin(view.hpke_config)
    body1 = round1_body(view, key, 1)
    info1 = build_info("c1", 1, key.key_id, view.context_hash_for(1))
    plain = decode_plaintext(open_(private, info1, b64url_decode(body1["level"])))
    assert (plain.kind, plain.value) == (Kind.LEVEL, 1)
    body2 = round2_body(view, key, 0, [5, None, 12])
    info2 = build_info("c1", 2, key.key_id, view.context_hash_for(2))
    opened = [decode_plaintext(open_(private, info2, b64url_decode(c))) for c in body2["data"]]
    assert [(o.kind, o.value) for o in opened] == [(Kind.ITEM, 5), (Kind.NULL, 0),
                                                    (Kind.ITEM, 12)]
    assert len({c for c in body2["data"]}) == 3  # every message sealed separately
    with pytest.raises(DecryptError):  # a round-2 message does not open as round 1
        open_(private, info1, b64url_decode(body2["level"]))


def test_level_randomized_response_rate() -> None:
    view, _ = _view(level_privacy=1.0)
    rng = np.random.default_rng(5)
    reports = Counter(report_level(0, view, rng) for _ in range(5000))
    keep = math.e / (math.e + 1)
    assert abs(reports[0] / 5000 - keep) < 0.03
    exact, _ = _view()
    assert {report_level(1, exact, rng) for _ in range(50)} == {1}
    with pytest.raises(ValueError):
        report_level(2, exact, rng)


def test_retry_policy_and_cache() -> None:
    policy = RetryPolicy(attempts=5, initial=0.1, maximum=0.4)
    for attempt in range(6):
        ceiling = min(0.4, 0.1 * 2**attempt)
        assert ceiling / 2 <= policy.delay(attempt) <= ceiling
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)
    cache = PublicCache(ttl=0.0)
    cache.put("u", 1)
    assert cache.get("u") in (None, 1)
    cache = PublicCache(ttl=60)
    cache.put("u", 2)
    assert cache.get("u") == 2 and cache.get("v") is None
