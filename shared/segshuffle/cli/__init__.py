"""The ``segshuffle`` command line (README.md, "Command line")."""
