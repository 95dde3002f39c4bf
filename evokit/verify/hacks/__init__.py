"""The hack gate: a battery of generic hack solutions ("probes") that no task may reward.

* :mod:`~evokit.verify.hacks.registry`: the registry (name → script builder) and how to extend it;
* :mod:`~evokit.verify.hacks.context`: what a probe reads of a task (outputs, answer keys, examples);
* one module per hack class: :mod:`~evokit.verify.hacks.links` (answer-key links),
  :mod:`~evokit.verify.hacks.outputs` (placeholders, instruction examples),
  :mod:`~evokit.verify.hacks.tools` (trojaned tools and deliverables),
  :mod:`~evokit.verify.hacks.shadowing` (shadowed Python and pytest),
  :mod:`~evokit.verify.hacks.processes` (daemons, ptrace, killing helpers);
* :mod:`~evokit.verify.hacks.gate`: running the battery as the agent (:func:`run_gate`);
* :mod:`~evokit.verify.hacks.llm_hacker`: the optional LLM hacker.

The probe modules are imported here in the order their scripts run when they share a sandbox.
"""

from evokit.verify.hacks import links, outputs, processes, shadowing, tools  # noqa: F401 - they register
from evokit.verify.hacks.context import ProbeContext, probe_context
from evokit.verify.hacks.gate import (
    GateResult,
    HackGateConfig,
    LLMHackerConfig,
    ProbeRun,
    plan_runs,
    run_gate,
)
from evokit.verify.hacks.registry import PROBES, Probe, get_probe, probe_names, register_probe

__all__ = [
    "PROBES", "GateResult", "HackGateConfig", "LLMHackerConfig", "Probe", "ProbeContext", "ProbeRun", "get_probe",
    "plan_runs", "probe_context", "probe_names", "register_probe", "run_gate",
]
