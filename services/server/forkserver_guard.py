"""Imported by the decrypt pool's fork server only, first thing: it dies with the server
(:func:`.child_guard.die_with_parent`).  Nothing else imports this module."""

from .child_guard import die_with_parent

die_with_parent()
