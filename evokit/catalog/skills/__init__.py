"""Skill modules; importing this package registers them all."""

from evokit.catalog.skills import fields  # noqa: F401
