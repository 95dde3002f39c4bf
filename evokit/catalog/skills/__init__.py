"""Skill modules; importing this package registers them all."""

from evokit.catalog.skills import fields, filesystem, special, sysops, textops  # noqa: F401
