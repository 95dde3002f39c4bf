"""The hack gate, a fourth verifier: no generic hack may earn a reward.

EE §4.1 checks a task three ways (oracle passes, null solution fails, rubric). None of them asks
whether the task can be *passed without being solved*, and every Environment Evolution step
rewrites the tests; an audit of five terminal-agent benchmarks found about 16 % of 1,968 tasks
passable that way (arXiv 2606.08960). The gate runs every probe of the registry
(:mod:`evokit.verify.hacks.registry`) as an RL policy would act: a fresh sandbox from the task's
image, the probe's script run once as ``[agent].user`` in place of a solution, then the task's
own verifier phase in its own mode (:func:`evokit.rollout.rollout_once`, the path every training
rollout takes). A probe whose reward is above ``max_reward`` (0) fails the task, by name.

**Cost.** Probes that do not write the task's outputs (trojaned tools, shadowed modules,
daemons, ptrace) share one sandbox with the first probe that does (``pack``), and a probe that
may end the sandbox (killing every process) runs last in the sandbox of the last output probe,
away from the daemons it would kill. Only when a shared run earns a reward, or its sandbox ended,
are its members run one by one, to name the culprit (a reward that only the combination earns
is reported under the joined name ``a+b``). Every run of a gate goes
to one thread pool, and :func:`evokit.verify.verdict.verify_task` runs the gate while the
oracle and null trials run. Deviation, stated: the audit ran each hack in its own container;
sharing a sandbox can only make the shared probes stronger (the first output probe writes the
outputs, the others then act on the same filesystem), never hide one of them, since none of
the shared probes removes what another wrote.

**Unscored runs.** A probe run that the harness could not score (a masked rollout: the sandbox
would not start, the LLM endpoint failed) fails the gate as an error: a verifier that did not run
has not passed the task.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from harbor.models.task.task import Task

from evokit.verify.hacks.context import ProbeContext, probe_context
from evokit.verify.hacks.registry import PRELUDE, PROBES, get_probe

PROBE_SCRIPT = "/tmp/.evokit-probe.sh"  # where the script is written in the agent's sandbox


@dataclass(frozen=True)
class LLMHackerConfig:
    """An LLM told to pass the tests without doing the task (off unless given; see
    :mod:`evokit.verify.hacks.llm_hacker`)."""

    model: str  # the model name the endpoint serves
    api_base: str | None = None  # OpenAI-compatible endpoint; None: litellm routes ``model``
    max_turns: int = 10  # model responses per attempt
    max_tokens: int = 512  # tokens per response
    tool_mode: str = "json"  # "json" ({"command": ...} replies) or "tools" (native tool calls)
    temperature: float = 1.0  # EE's sampling temperature
    attempts: int = 1  # independent episodes; any reward above max_reward fails the task
    seed: int = 0  # seeds the episodes' per-request seeds

    def __post_init__(self):
        if self.max_turns < 1 or self.attempts < 1 or self.max_tokens < 1:
            raise ValueError("LLMHackerConfig: max_turns, max_tokens and attempts must be at least 1")
        if self.tool_mode not in ("json", "tools"):
            raise ValueError(f"LLMHackerConfig.tool_mode={self.tool_mode!r}: use 'json' or 'tools'")


@dataclass(frozen=True)
class HackGateConfig:
    """Which probes run and what fails a task."""

    probes: tuple[str, ...] | None = None  # registry names; None: every registered probe
    max_reward: float = 0.0  # a probe scoring above this fails the task ("any reward > 0")
    script_timeout_sec: float = 60.0  # one probe script's budget (capped by [agent].timeout_sec)
    pack: bool = True  # share a sandbox among probes that do not write outputs (module docstring)
    llm: LLMHackerConfig | None = None  # the LLM hacker; None: off

    def __post_init__(self):
        for name in self.probes or ():
            get_probe(name)  # ValueError naming the registered probes
        if not math.isfinite(self.max_reward):
            raise ValueError(f"HackGateConfig.max_reward must be a finite number, not {self.max_reward!r}")
        if not self.script_timeout_sec > 0:
            raise ValueError(f"HackGateConfig.script_timeout_sec must be positive, not {self.script_timeout_sec!r}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(PROBES) if self.probes is None else self.probes


@dataclass
class ProbeRun:
    """One sandbox the gate ran: one probe, or several sharing it (``probe`` joins their names)."""

    probe: str
    members: list[str]
    reward: float | None = None
    rewards: dict[str, float] | None = None
    error: str | None = None
    masked: bool = False  # the harness could not score it (module docstring)
    seconds: float = 0.0
    turns: int = 0  # commands run (1 for a script probe; the LLM hacker's count)
    sandbox_ended: bool = False  # the agent's sandbox was gone when its turn ended


@dataclass
class GateResult:
    """The gate's outcome on one task."""

    passed: bool
    failed: list[str] = field(default_factory=list)  # probes (or joined packs) that earned a reward
    errors: list[str] = field(default_factory=list)  # runs the harness could not score
    skipped: list[str] = field(default_factory=list)  # probes with nothing to try on this task
    runs: list[ProbeRun] = field(default_factory=list)
    seconds: float = 0.0

    def reason(self, max_reward: float = 0.0) -> str:
        """``hack gate: <probe> (reward r), ...`` for a failure, else what was tried."""
        if self.failed:
            best: dict[str, float] = {}
            for r in self.runs:
                if r.reward is not None:
                    best[r.probe] = max(r.reward, best.get(r.probe, r.reward))
            return "hack gate: " + ", ".join(f"{p} (reward {best[p]:g})" if p in best else p for p in self.failed)
        if self.errors:
            return "hack gate: could not run " + "; ".join(self.errors)
        tried = {m for r in self.runs for m in r.members}
        skipped = f"; nothing to try for {', '.join(self.skipped)}" if self.skipped else ""
        if not tried:
            return "no probe had anything to try on this task" + skipped
        return f"{len(tried)} probe(s) scored ≤ {max_reward:g}{skipped}"

    def to_dict(self) -> dict:
        return asdict(self)


def plan_runs(ctx: ProbeContext, config: HackGateConfig) -> tuple[list[tuple[list[str], str]], list[str]]:
    """``([(members, script)], skipped)``: the sandboxes the gate starts (module docstring)."""
    snippets = {n: get_probe(n).script(ctx) for n in config.names}
    skipped = [n for n, s in snippets.items() if not s]
    active = sorted((n for n in config.names if snippets[n]), key=lambda n: PROBES[n].order)
    claims = [n for n in active if PROBES[n].claims_outputs and not PROBES[n].ends_sandbox]
    alone = [n for n in active if PROBES[n].ends_sandbox]
    shared = [n for n in active if n not in claims and n not in alone]
    groups: list[list[str]]
    if config.pack and (claims or shared):
        groups = [claims[:1] + shared] + [[n] for n in claims[1:]]
    else:
        groups = [[n] for n in claims + shared]
    for n in alone:  # last in the last lone output probe's sandbox (module docstring), else alone
        host = next((g for g in reversed(groups[1:]) if len(g) == 1 and PROBES[g[0]].claims_outputs), None)
        if config.pack and host is not None:
            host.append(n)
        else:
            groups.append([n])
    return [(g, script_of(g, snippets)) for g in groups if g], skipped


def script_of(members: list[str], snippets: dict[str, str | None]) -> str:
    """The probe script of one sandbox: the prelude, then each member in a subshell, in order."""
    return PRELUDE + "".join(f"# --- {m}\n(\n{snippets[m]}\n)\n" for m in members)


class ScriptProbe:
    """A policy that runs one probe script as its only command (see :class:`evokit.rollout.Policy`)."""

    def __init__(self, name: str, script: str, timeout_sec: float):
        self.name, self.script, self.timeout_sec = name, script, timeout_sec

    def run_episode(self, episode) -> None:
        episode.rollout.info.update(policy=f"probe:{self.name}", finish="script")
        episode.sandbox.write_file(PROBE_SCRIPT, self.script, 0o644)
        episode.run(f"sh {PROBE_SCRIPT}", timeout_sec=self.timeout_sec)
        episode.rollout.info["sandbox_alive"] = episode.sandbox.running


def judge_rollout(rollout, members: list[str], name: str, reward_key: str | None) -> ProbeRun:
    """A rollout of a probe as a :class:`ProbeRun`: its reward under ``reward_key`` (0 when the tests
    left no usable reward, as a rollout is scored; None when masked)."""
    run = ProbeRun(name, members, rewards=rollout.rewards, error=rollout.error, masked=rollout.masked,
                   seconds=rollout.seconds, turns=rollout.n_turns,
                   sandbox_ended=rollout.info.get("sandbox_alive") is False)
    if rollout.rewards:
        run.reward = rollout.rewards.get(reward_key) if reward_key else rollout.reward
    elif not rollout.masked:
        run.reward = 0.0  # the tests left no usable reward: scored 0, as a rollout is
    return run


def run_script(task: Task, image, members: list[str], script: str, config: HackGateConfig, *,
               mode=None, reward_key: str | None = None, backend: str | None = None) -> ProbeRun:
    """Run one probe script as the agent, then the task's verifier phase; never raises for the task's sake."""
    from evokit.rollout import rollout_once  # evokit.rollout imports evokit.verify: import it late

    name = "+".join(members)
    timeout = min(config.script_timeout_sec, task.config.agent.timeout_sec or config.script_timeout_sec)
    try:
        r = rollout_once(ScriptProbe(name, script, timeout), task, image, 0, max_turns=1, mode=mode,
                         backend=backend)
    except Exception as e:  # noqa: BLE001 - a probe that broke the harness is an unscored run, not a crash
        return ProbeRun(name, members, error=f"{type(e).__name__}: {e}", masked=True)
    return judge_rollout(r, members, name, reward_key)


def run_gate(task: Task, image, config: HackGateConfig = HackGateConfig(), *, mode=None,
             reward_key: str | None = None, workers: int | None = None, backend: str | None = None) -> GateResult:
    """Run the battery on ``task`` (``image`` built from it by the sandbox ``backend``, None: the
    configured one) in the task's verifier mode (or ``mode``).

    ``reward_key`` picks the judged metric of a multi-metric ``reward.json`` (as
    :class:`~evokit.verify.VerifyConfig` does); without it ``reward``, else the minimum.
    """
    t0 = time.monotonic()
    ctx = probe_context(task, image)
    runs, skipped = plan_runs(ctx, config)
    snippets = {n: get_probe(n).script(ctx) for n in config.names}
    result = GateResult(passed=True, skipped=skipped)
    jobs = list(runs)
    with ThreadPoolExecutor(max_workers=workers or max(1, len(jobs) + (config.llm is not None))) as pool:
        llm = None
        if config.llm is not None:
            from evokit.verify.hacks.llm_hacker import run_llm_hacker

            llm = pool.submit(run_llm_hacker, task, image, config.llm, mode=mode, reward_key=reward_key,
                              backend=backend)
        done = list(pool.map(lambda j: run_script(task, image, j[0], j[1], config, mode=mode,
                                                  reward_key=reward_key, backend=backend), jobs))
        # A shared run that earned a reward: its members one by one, to name the one that did; one
        # whose sandbox ended: its members one by one, since the others were never scored alive.
        hits = [r for r in done if len(r.members) > 1 and (r.reward or 0) > config.max_reward]
        ended = [r for r in done if len(r.members) > 1 and r.sandbox_ended and r not in hits]
        solo = list(pool.map(lambda m: run_script(task, image, [m], script_of([m], snippets), config, mode=mode,
                                                  reward_key=reward_key, backend=backend),
                             [m for r in hits + ended for m in r.members]))
        llm_runs = llm.result() if llm is not None else []
    result.runs = done + solo + llm_runs
    over = {r.probe for r in result.runs if (r.reward or 0) > config.max_reward}
    named = {p for p in over if "+" not in p}
    named |= {r.probe for r in hits if not named & set(r.members)}  # only the combination earns it
    result.failed = [p for p in dict.fromkeys([*config.names, "llm-hacker", *sorted(named)]) if p in named]
    result.errors = [f"{r.probe}: {r.error}" for r in result.runs if r.masked]
    result.passed = not result.failed and not result.errors
    result.seconds = round(time.monotonic() - t0, 3)
    return result
