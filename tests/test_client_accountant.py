"""segshuffle.client.accountant: which accountant a client checks parameters with."""

from __future__ import annotations

import pytest

from segshuffle.client import accountant
from segshuffle.client.errors import VerificationError
from segshuffle.client.verify import verify_parameters
from segshuffle.wire.models import CampaignView

from .vector_documents import VECTORS, vector_view


def test_a_light_install_tries_the_numpy_import_once_per_process(monkeypatch):
    """Without numpy the default is decided once: a failed import is not cached by the
    loader, so deciding at every call would repeat the import's file-system search."""
    attempts = []

    def missing(name):
        attempts.append(name)
        raise ImportError(name)

    monkeypatch.setattr(accountant, "_load", missing)
    monkeypatch.delenv(accountant.ENVIRONMENT_VARIABLE, raising=False)
    accountant._default_name.cache_clear()
    try:
        assert [accountant.accountant_name() for _ in range(3)] == ["portable"] * 3
        assert attempts == ["numpy"]
    finally:
        accountant._default_name.cache_clear()


def _accepted_view() -> tuple[CampaignView, str, str]:
    case = next(c for c in VECTORS["parameters"] if c["client_accepts"])
    view = vector_view(case)
    return view, view.key_id, case["config_hash"]


def test_an_invalid_accountant_setting_is_not_blamed_on_the_parameters(monkeypatch):
    """A misspelt SEGSHUFFLE_ACCOUNTANT is the client's own error: a ValueError naming the
    variable, not a VerificationError saying the server's parameters cannot be accounted."""
    view, key_id, config_hash = _accepted_view()
    verify_parameters(view, level_index=0, key_id=key_id, config_hash=config_hash)
    monkeypatch.setenv(accountant.ENVIRONMENT_VARIABLE, "nympy")
    with pytest.raises(ValueError, match=accountant.ENVIRONMENT_VARIABLE) as raised:
        verify_parameters(view, level_index=0, key_id=key_id, config_hash=config_hash)
    assert not isinstance(raised.value, VerificationError)
