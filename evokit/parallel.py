"""Run independent jobs in parallel: a local thread pool by default (placeholder until Ray lands)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor


class LocalExecutor:
    def __init__(self, workers: int = 2):
        self.workers = workers

    def map(self, fn: Callable, items: Sequence) -> list:
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            return list(pool.map(fn, items))
