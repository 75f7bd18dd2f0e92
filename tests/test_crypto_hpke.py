"""HPKE seal/open, info binding, key configs and key files."""

from __future__ import annotations

import os
import stat

import pytest

from segshuffle.crypto import (
    DecryptError,
    build_info,
    generate_private_key,
    key_config,
    key_id_for,
    load_private_key,
    open_,
    private_key_bytes,
    public_key_from_config,
    save_private_key,
    seal,
)
from segshuffle.wire.models import CIPHERTEXT_LENGTH, HpkeConfig
from segshuffle.wire.plaintext import item_plaintext, level_plaintext, null_plaintext

HASH = bytes(range(32))


@pytest.fixture(scope="module")
def key():
    return generate_private_key()


def info_for(key, round_=1, campaign="camp", context=HASH):
    return build_info(campaign, round_, key_id_for(key), context)


def test_info_layout(key):
    info = info_for(key, 2)
    assert info == b"segshuffle/v1\x00camp\x002\x00" + key_id_for(key).encode() + b"\x00" + HASH
    with pytest.raises(ValueError):
        build_info("bad\x00id", 1, key_id_for(key), HASH)
    with pytest.raises(ValueError):
        build_info("camp", 3, key_id_for(key), HASH)
    with pytest.raises(ValueError):
        build_info("camp", 1, key_id_for(key), HASH[:31])
    with pytest.raises(ValueError):
        build_info("camp", 1, "XYZ", HASH)


def test_round_trip_and_fixed_length(key):
    info = info_for(key)
    for plaintext in (null_plaintext(), level_plaintext(2), item_plaintext(99)):
        sealed = seal(key.public_key(), info, plaintext)
        assert len(sealed) == CIPHERTEXT_LENGTH
        assert open_(key, info, sealed) == plaintext


def test_two_seals_of_one_plaintext_differ_in_their_ephemeral_key(key):
    info = info_for(key)
    plaintext = item_plaintext(4)
    first, second = seal(key.public_key(), info, plaintext), seal(key.public_key(), info, plaintext)
    assert first != second
    assert first[:32] != second[:32]  # enc: a fresh ephemeral key per message


@pytest.mark.parametrize(
    "other",
    [
        {"round_": 2},
        {"campaign": "other"},
        {"context": bytes(32)},
    ],
)
def test_wrong_info_fails(key, other):
    sealed = seal(key.public_key(), info_for(key), item_plaintext(1))
    with pytest.raises(DecryptError):
        open_(key, info_for(key, **other), sealed)


def test_wrong_key_fails(key):
    info = info_for(key)
    sealed = seal(key.public_key(), info, item_plaintext(1))
    with pytest.raises(DecryptError):
        open_(generate_private_key(), info, sealed)


@pytest.mark.parametrize("position", [0, 31, 32, 50, 79])
def test_tampered_ciphertext_fails(key, position):
    info = info_for(key)
    sealed = bytearray(seal(key.public_key(), info, item_plaintext(1)))
    sealed[position] ^= 0x01
    with pytest.raises(DecryptError):
        open_(key, info, bytes(sealed))


def test_wrong_length_fails(key):
    info = info_for(key)
    sealed = seal(key.public_key(), info, item_plaintext(1))
    for bad in (sealed[:-1], sealed + b"\x00", b""):
        with pytest.raises(DecryptError):
            open_(key, info, bad)


def test_key_config_round_trip_and_pinning(key):
    config = key_config(key)
    assert config.kem_id == 0x20 and config.kdf_id == 1 and config.aead_id == 1
    pinned = public_key_from_config(HpkeConfig.model_validate_json(config.model_dump_json()))
    assert pinned.key_id == key_id_for(key) == config.key_id
    sealed = seal(pinned.public_key, info_for(key), item_plaintext(3))
    assert open_(key, info_for(key), sealed) == open_(key, info_for(key), sealed)
    swapped = config.model_copy(update={"key_id": key_id_for(generate_private_key())})
    with pytest.raises(ValueError, match="key_id"):
        public_key_from_config(swapped)
    with pytest.raises(ValueError, match="suite"):
        public_key_from_config(config.model_copy(update={"aead_id": 3}))


def test_private_key_file_mode_and_no_overwrite(tmp_path, key):
    path = tmp_path / "keys" / "camp.pem"
    save_private_key(path, key)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert private_key_bytes(load_private_key(path)) == private_key_bytes(key)
    with pytest.raises(FileExistsError):
        save_private_key(path, generate_private_key())
    assert [p.name for p in path.parent.iterdir()] == ["camp.pem"]
