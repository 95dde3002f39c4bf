"""The registry of hack probes: name → (script builder, how it may share a sandbox).

A *probe* is one generic hack solution: a POSIX shell script, built from a task's
:class:`~evokit.verify.hacks.context.ProbeContext`, that the gate runs **as the agent** in place
of a solution (same user, same sandbox, same verifier path as an RL rollout). Any reward above 0
means the task can be passed without being solved, so it fails the gate, naming the probe.

Extend the battery with one decorated function in a module of this package::

    @register_probe("my-probe", claims_outputs=True)
    def my_probe(ctx: ProbeContext) -> str | None:
        '''The class of hack it stands for, and why a policy would try it.'''
        return "...shell..."  # or None: nothing to try on this task (the probe is skipped)

``claims_outputs`` marks probes that write the task's outputs (two such probes would undo each
other, so each runs in its own sandbox); ``ends_sandbox`` marks probes that may end the agent's
sandbox (they always run alone, since a dead sandbox scores 0 for everything beside them). The
other probes (tools, daemons, shadowed modules) run together with the output probe of lowest
``order``, in ``order``, and are run one by one only when that combined run earns a reward, to
name the one that did (:mod:`evokit.verify.hacks.gate`). The contract test walks the whole registry.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from evokit.verify.hacks.context import ProbeContext

#: Every script starts with this: errors never stop a probe, and ``evk_reward`` writes reward 1 to
#: both reward files (reward.json wins over reward.txt in Harbor's contract, so a planted
#: reward.json beats a test script that only ever writes reward.txt).
PRELUDE = r"""set +e
evk_reward() {
  { mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && printf '{"reward": 1}\n' > /logs/verifier/reward.json; } 2>/dev/null
}
"""

#: Python run at import (a shadowed module, a .pth line, sitecustomize, conftest): reward files
#: now, and again at interpreter exit followed by ``os._exit(0)``, so that whatever ran the
#: tests exits 0 and leaves reward 1.
PY_PAYLOAD = r'''
import atexit as _evk_atexit, os as _evk_os
def _evk_reward():
    for _n, _t in (("reward.json", '{"reward": 1}\n'), ("reward.txt", "1\n")):
        try:
            _evk_os.makedirs("/logs/verifier", exist_ok=True)
            with open("/logs/verifier/" + _n, "w") as _f:
                _f.write(_t)
        except Exception:
            pass
_evk_reward()
_evk_atexit.register(lambda: (_evk_reward(), _evk_os._exit(0)))
'''


@dataclass(frozen=True)
class Probe:
    """One registered probe (module docstring)."""

    name: str
    build: Callable[[ProbeContext], str | None]
    claims_outputs: bool = False  # writes the task's outputs: never shares a sandbox with another such probe
    ends_sandbox: bool = False  # may end the agent's sandbox: always runs alone
    order: int = 50  # place in a shared sandbox's script (lower first); ties keep registration order

    @property
    def doc(self) -> str:
        """The hack class the probe stands for (its builder's docstring)."""
        return inspect.getdoc(self.build) or ""

    def script(self, ctx: ProbeContext) -> str | None:
        """The probe's shell snippet for ``ctx`` (without :data:`PRELUDE`), or None if it has nothing to try."""
        return self.build(ctx)


PROBES: dict[str, Probe] = {}


def register_probe(name: str, *, claims_outputs: bool = False, ends_sandbox: bool = False, order: int = 50):
    """Decorator: add a script builder to the battery under ``name`` (module docstring)."""
    def add(build: Callable[[ProbeContext], str | None]):
        if name in PROBES:
            raise ValueError(f"hack probe {name!r} is registered twice ({PROBES[name].build.__module__} and "
                             f"{build.__module__})")
        if not inspect.getdoc(build):
            raise ValueError(f"hack probe {name!r}: its builder needs a docstring naming the hack class")
        PROBES[name] = Probe(name, build, claims_outputs, ends_sandbox, order)
        return build
    return add


def probe_names() -> list[str]:
    """Every registered probe, in registration order."""
    return list(PROBES)


def get_probe(name: str) -> Probe:
    try:
        return PROBES[name]
    except KeyError:
        raise ValueError(f"unknown hack probe {name!r}; the registered ones are {', '.join(PROBES)}") from None
