"""Scenario modules; importing this package registers them all."""

from evokit.catalog.scenarios import logs, records, repos, science, stores, sysadmin, tabular  # noqa: F401
