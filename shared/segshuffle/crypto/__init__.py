"""HPKE (RFC 9180) sealing and opening of protocol messages (docs/wire.md).

Everything lives in :mod:`segshuffle.crypto.hpke` and is re-exported here::

    from segshuffle.crypto import build_info, seal, open_, public_key_from_config
"""

from .hpke import (
    SUITE,
    DecryptError,
    PinnedKey,
    build_info,
    generate_private_key,
    key_config,
    key_id_for,
    load_private_key,
    open_,
    private_key_bytes,
    private_key_from_bytes,
    public_key_bytes,
    public_key_from_bytes,
    public_key_from_config,
    save_private_key,
    seal,
)

__all__ = [
    "SUITE",
    "DecryptError",
    "PinnedKey",
    "build_info",
    "generate_private_key",
    "key_config",
    "key_id_for",
    "load_private_key",
    "open_",
    "private_key_bytes",
    "private_key_from_bytes",
    "public_key_bytes",
    "public_key_from_bytes",
    "public_key_from_config",
    "save_private_key",
    "seal",
]
