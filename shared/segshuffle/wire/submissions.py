"""A submission body decoded in one pass, for the shuffler's request path.

The models :class:`~.models.Round1Submission` and :class:`~.models.Round2Submission`
define what a submission body is; the shuffler reads every user's body, so it first
tries :func:`decode_submission`, which accepts only the plain form every client sends
and returns the ciphertexts' bytes at once:

- UTF-8 starting with ``{`` (Python's JSON reader would take a byte-order mark that
  the models refuse);
- no backslash anywhere, so every JSON string is literal and a member name can be
  counted in the raw bytes (``"level"`` occurs once, as does ``"data"`` in round 2:
  no member twice, which the I-JSON check of the general path refuses);
- an object with exactly the round's members, a ``data`` list of 1 to
  :data:`~.models.MAX_MESSAGES_PER_SUBMISSION` items in round 2;
- every ciphertext exactly :data:`~.models.CIPHERTEXT_B64_LENGTH` characters of the
  base64url alphabet whose unused trailing bits are zero (the canonical encoding), so
  that it decodes to :data:`~.models.CIPHERTEXT_LENGTH` bytes.

Anything else gives ``None``, and the caller takes the general path (strict JSON, the
model, its problem documents), which decides: it refuses what is invalid with the
usual problem and accepts what is valid in an unusual form (escapes, whitespace, a
UTF-16 body).  So the fast path may only ever accept less than the models, never more,
and what it accepts decodes to the same bytes; ``tests/test_wire_submissions.py`` holds
it to that.  It saves the shuffler parsing each body twice (the I-JSON check and the
model) and decoding each ciphertext twice (the model's check and the storage).
"""

from __future__ import annotations

import base64
import json
import re
from typing import NamedTuple

from .models import (
    CIPHERTEXT_B64_LENGTH,
    CIPHERTEXT_LENGTH,
    MAX_MESSAGES_PER_SUBMISSION,
    Round1Submission,
    Round2Submission,
    b64url_decode,
)

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_CIPHERTEXT_TEXT = re.compile(f"[A-Za-z0-9_-]{{{CIPHERTEXT_B64_LENGTH}}}")
_UNUSED_BITS = {0: 0, 2: 4, 3: 2}[CIPHERTEXT_B64_LENGTH % 4]
"""Bits of the last character beyond the data: they are zero in the canonical form."""
_CANONICAL_LAST = frozenset(c for value, c in enumerate(_ALPHABET)
                            if value % (1 << _UNUSED_BITS) == 0)
_PADDING = "=" * (-CIPHERTEXT_B64_LENGTH % 4)
_LEVEL, _DATA = b'"level"', b'"data"'


class DecodedSubmission(NamedTuple):
    """A submission's ciphertexts as bytes: the level message, and round 2's data."""

    level: bytes
    data: tuple[bytes, ...] | None


def decode_ciphertext(text: object) -> bytes | None:
    """The bytes of a canonical unpadded base64url ciphertext, ``None`` for anything else."""
    if (type(text) is not str or _CIPHERTEXT_TEXT.fullmatch(text) is None
            or text[-1] not in _CANONICAL_LAST):
        return None
    return base64.urlsafe_b64decode(text + _PADDING)


def decode_submission(raw: bytes, round_number: int) -> DecodedSubmission | None:
    """The ciphertexts of a submission body in its plain form, else ``None`` (see above)."""
    if raw[:1] != b"{" or b"\\" in raw or raw.count(_LEVEL) != 1:
        return None
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if type(body) is not dict:
        return None
    level = decode_ciphertext(body.get("level"))
    if level is None:
        return None
    if round_number == 1:
        return DecodedSubmission(level, None) if len(body) == 1 else None
    texts = body.get("data")
    if (len(body) != 2 or type(texts) is not list or raw.count(_DATA) != 1
            or not 1 <= len(texts) <= MAX_MESSAGES_PER_SUBMISSION):
        return None
    data = tuple(decode_ciphertext(text) for text in texts)
    if None in data:
        return None
    return DecodedSubmission(level, data)  # type: ignore[arg-type]


def decoded(body: Round1Submission | Round2Submission) -> DecodedSubmission:
    """A submission the general path accepted (the models), as bytes."""
    data = body.data if isinstance(body, Round2Submission) else None
    return DecodedSubmission(
        b64url_decode(body.level, CIPHERTEXT_LENGTH),
        None if data is None else tuple(b64url_decode(text, CIPHERTEXT_LENGTH)
                                        for text in data))
