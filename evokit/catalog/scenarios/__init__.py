"""Scenario modules; importing this package registers them all."""

from evokit.catalog.scenarios import logs, records, tabular  # noqa: F401
