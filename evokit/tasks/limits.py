"""A task's resource limits (Harbor's ``[environment]`` cpus, memory_mb, storage_mb, and a pid cap),
validated where the task is read.

They are the task's data, checked when the folder loads (:mod:`evokit.tasks.folder`) so that a
typo is an error naming the field before anything is built; the sandbox enforces them through its
control group (:mod:`evokit.sandbox.cgroup`).
"""

from __future__ import annotations

from dataclasses import dataclass

from evokit.errors import UserError

#: The accepted range of each limit, so that a task cannot take the host's resources: ``0`` or a
#: negative value must not mean "unlimited" without a word, ``10**12`` MB is no limit, and
#: ``memory_mb = -1`` or ``cpus = 0.001`` crash the sandbox at start. Outside the range is a :class:`LimitsError`
#: naming the field. The minimums are what a sandbox needs to start at all (cpus: the
#: kernel's smallest CFS quota, 1 ms per 100 ms period); the maximums are far beyond any
#: machine, so only a typo or an adversarial task reaches them.
LIMIT_RANGES: dict[str, tuple[float, float]] = {
    "cpus": (0.01, 1024),
    "memory_mb": (16, 4 * 1024 * 1024),  # 4 TiB
    "storage_mb": (16, 4 * 1024 * 1024),
    "pids": (16, 4 * 1024 * 1024),  # the kernel's pid_max ceiling
}


class LimitsError(UserError, ValueError):
    """A limit that is zero, negative, too small, absurdly large or not a number."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandbox; ``None`` means unlimited. From ``task.toml [environment]``.

    Validated on construction against :data:`LIMIT_RANGES`; leave a field ``None`` (out of
    ``task.toml``) for no limit, never ``0``.
    """

    cpus: float | None = None  # Harbor `cpus`: a CFS quota of cpus × period
    memory_mb: int | None = None  # Harbor `memory_mb`: RAM (+ swap) including the tmpfs upper layer
    storage_mb: int | None = 2048  # Harbor `storage_mb`: size of the writable tmpfs layer
    pids: int | None = 1024  # not in Harbor's schema; what stops a fork bomb

    def __post_init__(self) -> None:
        for name, (low, high) in LIMIT_RANGES.items():
            value = getattr(self, name)
            if value is None:
                continue
            whole = name != "cpus"
            if isinstance(value, bool) or not isinstance(value, int | float) or (whole and not isinstance(value, int)):
                raise LimitsError(f"{name} = {value!r}: must be {'a whole number' if whole else 'a number'}"
                                  f" (leave it out for no limit)")
            if value != value or value in (float("inf"), float("-inf")):
                raise LimitsError(f"{name} = {value!r}: must be a finite number")
            unit = " MB" if name.endswith("_mb") else ""
            if value <= 0:
                raise LimitsError(f"{name} = {value!r}: must be positive; leave it out for no limit "
                                  f"(0 and negative values do not mean unlimited)")
            if value < low:
                raise LimitsError(f"{name} = {value!r}: too small; the least a sandbox can run with is {low}{unit}")
            if value > high:
                raise LimitsError(f"{name} = {value!r}: absurdly large; at most {high}{unit}")
