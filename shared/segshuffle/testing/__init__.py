"""Operator and test tooling, kept out of the client SDK.

- :mod:`.localstack`: both services as local subprocesses, with the admin and operator
  tokens to create campaigns, release rounds and read results (demos and tests).
- :mod:`.population`: many simulated users at once against live services (demos, load
  tests).
- :mod:`.static_site`: the web client's files on loopback (its browser test and demo).

Nothing here is needed to take part in a campaign: a user's device needs only
:mod:`segshuffle.client`.  :mod:`.localstack` starts ``segshuffle serve``, which needs the
``server`` extra.
"""
