"""Shared by the LLM-backend tests: a two-step parent plan and the proposal items an LLM would send back."""

from __future__ import annotations

from evokit.plan import Plan, Step

PARENT = Plan((Step("access-log", "topk-count", (("data", 1),)), Step("text-list", "count-records", (), 1)))
SEED = 3


def item(pair: str, reads: bool = False, **other) -> dict:
    """One step of a proposal reply, as the LLM proposer's JSON schema asks for it."""
    return {"pair": pair, "other_scenario": other.get("s", "none"), "other_skill": other.get("k", "none"),
            "reads_previous": reads}


KEPT = [item("access-log/topk-count"), item("text-list/count-records", True)]  # the parent, unchanged
