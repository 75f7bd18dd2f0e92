"""Building a user's sealed submissions (paper Algorithm 2; docs/protocol.md sections 2-3).

Round 1: one level message carrying the level index, or, when the campaign uses
eps_p level privacy, the index after K-ary randomized response.

Round 2: the same reported level again (the level stream of docs/protocol.md section 2 lets
the server count round-2 participants per level; repeating the round-1 report
instead of randomizing afresh means the level stream reveals nothing beyond
round 1), and the data slots:

1. fit the set to exactly s items (:func:`segshuffle.core.randomizers.fit_set`),
   padding ids d..d+s-1 when the campaign pads.  A campaign without padding takes
   only sets of at least s items: a smaller one would send fewer non-null messages,
   which the accounting (exactly s items) does not cover, so it is refused before
   anything is sealed;
2. ``fixed_size_slots``: item i with probability lambda_k, then the blanket
   slots of the campaign's ``blanket_mode`` (:mod:`segshuffle.core.blanket`):
   ceil(m) slots each carrying a uniform item of the privacy domain with
   probability gamma = m / ceil(m) (``slots``), or one slot per item t of the
   privacy domain carrying t with probability m / D (``independent``).  Unsent
   slots are null messages, so every user of every level sends exactly the
   published ``messages_per_user`` data ciphertexts (s + ceil(m), or s + D).
   Without ``fixed_size`` only the sent slots travel (at least one message: a
   null when nothing is sent).

Every message is its own 32-byte plaintext, sealed by its own HPKE call under an
``info`` binding campaign, round, key id and the round's context hash.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from segshuffle.core.randomizers import fit_set, fixed_size_slots, randomize_level
from segshuffle.crypto import PinnedKey, build_info, seal
from segshuffle.wire.models import CampaignView, PublishedParameters, b64url_encode
from segshuffle.wire.plaintext import item_plaintext, level_plaintext, null_plaintext

from .errors import ClientError


@dataclass(frozen=True)
class SentRound1:
    """What a user sent in round 1 (kept for tests and audits; never leaves the client)."""

    level_index: int
    reported_level: int
    level_ciphertext: str = ""


@dataclass(frozen=True)
class SentRound2:
    """What a user sent in round 2: the level report and every data slot (None = null)."""

    level_index: int
    reported_level: int
    items: tuple[int, ...]
    slots: tuple[int | None, ...]


def report_level(level_index: int, view: CampaignView, rng: object) -> int:
    """The level index to send: exact, or through K-ary randomized response (eps_p)."""
    levels = view.config.levels
    if not 0 <= level_index < len(levels):
        raise ValueError(f"level index must be in [0, {len(levels)}), got {level_index}")
    eps_p = view.config.level_privacy
    if eps_p is None:
        return level_index
    return randomize_level(level_index, len(levels), eps_p, rng)


def _seal_all(key: PinnedKey, info: bytes, plaintexts: Iterable[bytes]) -> list[str]:
    return [b64url_encode(seal(key.public_key, info, p)) for p in plaintexts]


def round1_body(view: CampaignView, key: PinnedKey, reported_level: int) -> dict[str, str]:
    """``{"level": ct}`` for round 1, bound to the campaign's configuration hash."""
    info = build_info(view.id, 1, key.key_id, view.context_hash_for(1))
    (level,) = _seal_all(key, info, [level_plaintext(reported_level)])
    return {"level": level}


def data_slots(items: Iterable[int], parameters: PublishedParameters, level_index: int,
               rng: object) -> tuple[tuple[int, ...], list[int | None]]:
    """(the fitted item set, the data slots to send) for a user at ``level_index``."""
    s = parameters.set_size
    d = parameters.domain_size
    fitted = fit_set(items, s, d, rng)
    held = sum(1 for i in fitted if i < d)
    if parameters.padding_items == 0 and held < s:
        raise ClientError(
            f"this campaign has no padding ids: a set of {held} items (fewer than s = "
            f"{s}) would reveal its size, which the published epsilon does not cover; "
            "nothing was sent")
    lam = parameters.lambdas[level_index]
    slots = fixed_size_slots(fitted, lam, parameters.m, parameters.privacy_domain_size, rng,
                             mode=parameters.blanket_mode)
    if not parameters.fixed_size:
        slots = [j for j in slots if j is not None] or [None]
    return fitted, slots


def round2_body(view: CampaignView, key: PinnedKey, reported_level: int,
                slots: Sequence[int | None]) -> dict[str, object]:
    """``{"level": ct, "data": [ct, ...]}`` for round 2, bound to the parameters hash."""
    info = build_info(view.id, 2, key.key_id, view.context_hash_for(2))
    (level,) = _seal_all(key, info, [level_plaintext(reported_level)])
    data = _seal_all(key, info, (null_plaintext() if j is None else item_plaintext(j)
                                 for j in slots))
    return {"level": level, "data": data}
