"""Deployable services: the shuffler and the server (analyzer)."""
