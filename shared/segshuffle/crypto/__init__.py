"""HPKE (RFC 9180) sealing and opening of protocol messages (SPEC section 7)."""
