"""Client SDK: sync and async clients of the shuffler and server, and a population simulator."""
