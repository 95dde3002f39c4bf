"""GenEnv's two accumulating pools, D_train (valid agent traces) and D_env (weighted simulator generations).

Append-only JSONL (:mod:`evokit.rows`), reloaded on resume; D_env exports as the weighted SFT data set
an LLM simulator trains on (:func:`export_sft_dataset`, :mod:`evokit.trl_trainer.simulator`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from evokit.genenv.simulator import plan_context
from evokit.grpo import group_stats, usable
from evokit.plan import Plan
from evokit.rollout import Rollout
from evokit.rows import append_rows, dumps, keep_rows, read_rows


def valid_trace(row: dict) -> bool:
    """GenEnv's Valid(E_t): a well-formed, evaluable trace — a usable rollout (:func:`evokit.grpo.usable`)."""
    return usable(row)


class Pools:
    """GenEnv's two accumulating pools, append-only JSONL under ``root`` (reloaded on resume).

    ``d_train``: valid agent traces (base data + earlier + new on-policy traces);
    ``d_env``: weighted simulator generations, rows of :func:`env_row`.
    """

    FILES = {"d_train": "d_train.jsonl", "d_env": "d_env.jsonl"}

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.d_train = read_rows(self.root / self.FILES["d_train"])
        self.d_env = read_rows(self.root / self.FILES["d_env"])

    def keep_before(self, epoch: int) -> None:
        """Drop the rows of epochs ≥ ``epoch``: an epoch that a killed run did not finish is redone."""
        for name, file in self.FILES.items():
            keep_rows(self.root / file, lambda r: r.get("epoch", 0) < epoch)
            setattr(self, name, read_rows(self.root / file))

    def _append(self, name: str, rows: list[dict]) -> int:
        append_rows(self.root / self.FILES[name], rows)
        getattr(self, name).extend(json.loads(dumps(r)) for r in rows)  # as a reload would see them
        return len(rows)

    def add_traces(self, rows: Iterable[dict], valid: Callable[[dict], bool] = valid_trace) -> int:
        """D_train ← D_train ∪ Valid(E_t); returns how many were kept."""
        return self._append("d_train", [r for r in rows if valid(r)])

    def add_env(self, rows: Iterable[dict]) -> int:
        """D_env ← D_env ∪ D̃_env,t (rows of :func:`env_row`)."""
        rows = list(rows)
        for r in rows:
            if not {"plan", "weight", "context"} <= r.keys():
                raise ValueError(f"D_env row needs 'context', 'plan' and 'weight' (see env_row); got {sorted(r)}")
        return self._append("d_env", rows)

    def train_groups(self, before_epoch: int) -> list[list[dict]]:
        """D_train's traces of epochs < ``before_epoch`` as GRPO groups: rows of one (epoch, task), in order."""
        groups: dict[tuple, list[dict]] = {}
        for r in self.d_train:
            if r.get("epoch", 0) < before_epoch:
                # a CPU-loop row names its task; a TRL row its slot in the batch
                groups.setdefault((r.get("epoch", 0), r.get("task", r.get("slot"))), []).append(r)
        return list(groups.values())

    def replay(self, before_epoch: int, n: int, rng: np.random.Generator) -> list[list[Rollout]]:
        """``n`` groups of D_train (epochs < ``before_epoch``) for the agent's update, drawn without replacement.

        Only partially solved groups are drawn: a group whose rewards are all equal has zero GRPO
        advantage and would add nothing to the update. Each row becomes a :class:`~evokit.rollout.Rollout`
        with its stored ``info`` (the chosen skills and their log-probabilities under the policy that
        acted, the ratio's denominator in :func:`evokit.cpu_agent.policy.grpo_update`).
        """
        live = [g for g in self.train_groups(before_epoch) if not group_stats(g).dead]
        if n <= 0 or not live:
            return []
        pick = sorted(rng.choice(len(live), size=min(n, len(live)), replace=False).tolist())
        return [[Rollout(task=str(r.get("task", r.get("slot"))), index=r.get("index", i), reward=r["reward"], masked=r.get("masked", False),
                         info=r.get("info") or {}) for i, r in enumerate(live[j])] for j in pick]

    def env_records(self) -> list[tuple[Plan, float]]:
        """D_env as (plan, weight) records for :func:`rwr_update`."""
        return [(Plan.from_records(r["plan"], r.get("goal", "")), float(r["weight"])) for r in self.d_env]


def env_row(plan: Plan, weight: float, *, p_hat: float, r_env: float, epoch: int, context: str | None = None,
            **extra) -> dict:
    """One D_env record: the conditioning context, the generated plan and its RWR weight."""
    return {"context": context or plan_context(plan), "plan": plan.to_records(), "goal": plan.goal,
            "weight": float(weight), "p_hat": float(p_hat), "r_env": float(r_env), "epoch": int(epoch), **extra}


def context_prompt(context: str) -> str:
    """The text an LLM simulator is conditioned on for ``context`` (a catalog domain)."""
    return (f"Domain: {context}\nPropose a terminal task as a JSON plan: a list of steps, each naming a catalog "
            "\"scenario\" and \"skill\"; a step may read an earlier step's output (\"input\": its 1-based index).")


def export_sft_dataset(pools: Pools, path: str | Path, prompt: Callable[[str], str] = context_prompt) -> int:
    """Write the weighted D_env as JSONL rows {"prompt", "completion", "weight"} for TRL's SFTTrainer.

    ``completion`` is the plan as JSON text (:meth:`Plan.to_json`). Training an LLM simulator on
    it (with the weight in the loss and a KL to the initial model) is :mod:`evokit.trl_trainer.simulator`'s part.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in pools.d_env:
            plan = Plan.from_records(r["plan"], r.get("goal", ""))
            f.write(json.dumps({"prompt": prompt(r["context"]), "completion": plan.to_json(),
                                "weight": float(r["weight"])}, sort_keys=True) + "\n")
    return len(pools.d_env)


