"""Wire messages: fixed-length plaintexts, HTTP bodies and problem types (docs/architecture.md)."""
