"""Wire messages: fixed-length plaintexts, HTTP bodies and problem types (docs/architecture.md).

- :mod:`~segshuffle.wire.plaintext`: the 32-byte plaintext of every message.
- :mod:`~segshuffle.wire.models`: pydantic models of every HTTP body, canonical JSON
  (RFC 8785) and context hashes.
- :mod:`~segshuffle.wire.problems`: the ``urn:segshuffle:error:*`` problem types of the
  RFC 9457 ``application/problem+json`` error bodies (no web framework; the services'
  handlers are in :mod:`segshuffle.services.http_edge`).
- :mod:`~segshuffle.wire.validation`: what a validation refused, in the project's words
  (the command line, the settings, the problem documents and the client say it so).
"""
