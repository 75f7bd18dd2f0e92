"""The server (analyzer) service: campaigns, keys, aggregation, optimization, decoding."""
