"""The lineage store: every evolved environment on disk, with an index that survives SIGKILL.

Layout of a store directory::

    STORE/tasks/<content-hash[:16]>/   one Harbor task folder per distinct environment (dedup by hash)
    STORE/index.jsonl                  one JSON record per event, appended and fsync'ed
    STORE/config.json                  the run's parameters (checked on resume)

A record is either ``{"kind": "env", ...}`` (an accepted environment: lineage, generation, k,
parent, direction, effort, verdict, mutation metrics, D_T parts, timings, LLM usage, plan) or
``{"kind": "reject", ...}`` (a direction that failed at a generation, with its reasons and its
``cause``, one of :data:`CAUSES`), or ``{"kind": "end", ...}`` (a lineage branch that ended because
every direction failed). :meth:`LineageStore.outcomes` counts children accepted and rejected by
cause per direction; :meth:`LineageStore.rejections` lists the rejected attempts. Env and
verify-stage reject records carry ``hack_gate``: one :func:`gate_row` per verified attempt (the
hack gate's outcome, :mod:`evokit.verify.hacks`), from which :func:`hack_rates` derives the hack
rate per generation and direction.

Crash safety: a task folder is written to ``STORE/.tmp-*`` and renamed into ``tasks/`` (atomic),
*then* its record is appended; a reader ignores a torn last line. A folder without a record
(killed between the two) is harmless: the resumed run recomputes the same environment (every
random choice is keyed by (seed, lineage, generation)), finds the folder by its hash and only
appends the record. So a killed and resumed run ends with the same store as an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from evokit.errors import UserError
from evokit.tasks import content_hash


class StoreError(UserError, RuntimeError):
    """The store is inconsistent or was made with other parameters; the message says which."""


@dataclass(frozen=True)
class EnvRecord:
    """One accepted environment E_{i,g,k}."""

    lineage: str
    generation: int
    k: int
    task: str  # folder name under tasks/
    content_hash: str
    parent: str | None  # content hash of the parent (None for a seed)
    direction: str | None
    effort: str | None
    data: dict  # everything else: plan, difficulty, mutation, verdict, timings, usage

    def to_json(self) -> dict:
        return {"kind": "env", "lineage": self.lineage, "generation": self.generation, "k": self.k,
                "task": self.task, "content_hash": self.content_hash, "parent": self.parent,
                "direction": self.direction, "effort": self.effort, **self.data}

    @staticmethod
    def from_json(row: dict) -> EnvRecord:
        core = {"lineage", "generation", "k", "task", "content_hash", "parent", "direction", "effort", "kind"}
        return EnvRecord(row["lineage"], row["generation"], row["k"], row["task"], row["content_hash"],
                         row.get("parent"), row.get("direction"), row.get("effort"),
                         {k: v for k, v in row.items() if k not in core})


#: Why a direction produced no child, in the order of the harness's stages (EE §4: plan refinement,
#: then environment refinement and the verifiers, then evokit's hack gate).
CAUSES = ("no proposal", "proposal invalid", "review refused", "modifier invalid", "not novel", "build failed",
          "oracle failed", "null passed", "hack gate", "rubric")
_CHECK_CAUSES = {"format": "build failed", "build": "build failed", "oracle": "oracle failed",
                 "null": "null passed", "hack gate": "hack gate", "hack-gate": "hack gate", "rubric": "rubric", "modifier": "modifier invalid",
                 "novel": "not novel"}


def check_cause(reason: str) -> str:
    """The cause of a verify-stage rejection from its first failing check's reason
    (``"oracle: reward 0.0 ..."``, ``"rubric:<rule>: ..."``, ``"hack gate: <probe> ..."``)."""
    head = reason.split(":", 1)[0].strip()
    return _CHECK_CAUSES.get(head, "rubric" if head.startswith("rubric") else head or "unknown")


def reject_cause(row: dict) -> str:
    """A reject record's cause: its ``cause`` field, else read from its reasons (records without one)."""
    if row.get("cause"):
        return row["cause"]
    reasons = row.get("reasons") or [""]
    if row.get("stage") == "verify":
        return check_cause(reasons[0])
    last = reasons[-1]
    if last.startswith("proposer: no edit"):
        return "no proposal"
    return "proposal invalid" if last.startswith("proposer:") else "review refused"


def one_line(text: str, limit: int = 200) -> str:
    """``text`` on one line, cut to ``limit`` characters (a failing test's reason can span many lines)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass(frozen=True)
class Rejection:
    """One direction of one generation that yielded no child, and why."""

    lineage: str
    generation: int
    k: int | str  # the sibling; baseline stores name candidates ("candidate-2")
    direction: str  # "-" in baseline stores (no direction)
    stage: str  # "plan" (proposer ⇄ reviewer) or "verify" (modifier and verifiers)
    cause: str  # one of CAUSES
    reasons: tuple[str, ...]  # the failing checks' reasons (verify) or the last rounds' feedback (plan)


@dataclass(frozen=True)
class Outcomes:
    """What an evolution store holds: children accepted and rejected by cause, per direction."""

    seeds: int  # lineages that started (generation 0 recorded)
    not_started: int  # seeds whose plan could not be extracted
    ended: int  # lineage branches ended because every direction failed
    accepted: dict[str, int] = field(default_factory=dict)  # direction → children (generation ≥ 1)
    rejected: dict[str, dict[str, int]] = field(default_factory=dict)  # direction → cause → attempts

    @property
    def children(self) -> int:
        return sum(self.accepted.values())

    @property
    def rejections(self) -> int:
        return sum(sum(c.values()) for c in self.rejected.values())

    def directions(self) -> list[str]:
        return sorted(set(self.accepted) | set(self.rejected))

    def lines(self) -> list[str]:
        """One line per direction: ``length: 2 accepted, 3 rejected (review refused 2, oracle failed 1)``."""
        out = []
        for d in self.directions():
            causes = self.rejected.get(d, {})
            order = sorted(causes, key=lambda c: (CAUSES.index(c) if c in CAUSES else len(CAUSES), c))
            why = f" ({', '.join(f'{c} {causes[c]}' for c in order)})" if causes else ""
            out.append(f"{d}: {self.accepted.get(d, 0)} accepted, {sum(causes.values())} rejected{why}")
        return out


class LineageStore:
    """Append-only, crash-safe store of lineages; safe for threads of one process."""

    @classmethod
    def open(cls, root: str | Path) -> LineageStore:
        """An existing store (for reading); a folder that holds none is a :class:`StoreError`, and
        nothing is created."""
        root = Path(root)
        if not ((root / "index.jsonl").is_file() or (root / "config.json").is_file()):
            what = "no such folder" if not root.exists() else "not a lineage store (no index.jsonl)"
            raise StoreError(f"{root}: {what}; give a store written by `evokit evolve --out STORE`")
        return cls(root)

    def __init__(self, root: str | Path):
        self.root = Path(root)
        (self.root / "tasks").mkdir(parents=True, exist_ok=True)
        self.index_path = self.root / "index.jsonl"
        self._lock = threading.Lock()
        # (kind, lineage, generation, direction, stage) of every record, so that a resumed run
        # that redoes an interrupted generation does not log its rejections twice.
        self._keys = {self._key(r) for r in self.records()}
        for tmp in [*self.root.glob(".tmp-*"), *self.root.glob(".work-*"), *self.root.glob(".seed-*")]:  # half-written folders of a killed run: never visible
            shutil.rmtree(tmp, ignore_errors=True)

    # ------------------------------------------------------------------ config
    def check_config(self, config: dict, grows: tuple[str, ...] = ()) -> None:
        """First run: record ``config``; resume: refuse a different one (it would mix two runs).

        A key in ``grows`` (an int, e.g. ``generations``) may rise: the run extends the store, and a
        larger value asks only for records that come after the existing ones (every choice is keyed
        by (seed, lineage, generation)), so the store ends as a direct run with that value would.
        It may not fall: the store already holds more than that run would make.
        """
        path = self.root / "config.json"
        if not path.exists():
            _atomic_write(path, json.dumps(config, indent=2, sort_keys=True))
            return
        old = json.loads(path.read_text())
        diff = sorted(k for k in set(old) | set(config) if old.get(k) != config.get(k) and k not in grows)
        if diff:
            raise StoreError(f"{self.root} was made with other parameters ({', '.join(diff)}); "
                             "use a new --out or the same parameters to resume")
        smaller = [f"{k} {config[k]} < {old[k]}" for k in grows if k in old and k in config and config[k] < old[k]]
        if smaller:
            raise StoreError(f"{self.root} already holds a larger run ({', '.join(smaller)}); "
                             "give at least the store's value to resume or extend it, or use a new --out")
        if old != config:
            _atomic_write(path, json.dumps(config, indent=2, sort_keys=True))

    # ------------------------------------------------------------------ reading
    def records(self) -> Iterator[dict]:
        if not self.index_path.exists():
            return
        with open(self.index_path) as f:
            for line in f:
                if not line.endswith("\n"):
                    break  # a torn last line from a killed writer
                yield json.loads(line)

    def envs(self) -> list[EnvRecord]:
        return [EnvRecord.from_json(r) for r in self.records() if r["kind"] == "env"]

    def lineage(self, lineage_id: str) -> list[EnvRecord]:
        return sorted((e for e in self.envs() if e.lineage == lineage_id), key=lambda e: (e.generation, e.k))

    def lineages(self) -> list[str]:
        return sorted({e.lineage for e in self.envs()})

    def hack_rates(self, lineage: str | None = None) -> list[dict]:
        """The hack rate per generation and direction of this store (:func:`hack_rates`)."""
        return hack_rates(self.records(), lineage)

    def rejections(self, lineage: str | None = None) -> list[Rejection]:
        """Every rejected direction (reject records of the plan and verify stages), in record order."""
        return [Rejection(r["lineage"], r["generation"], r.get("k", 1), r.get("direction") or "-", r["stage"],
                          reject_cause(r), tuple(r.get("reasons", ())))
                for r in self.records() if r["kind"] == "reject" and r.get("stage") in ("plan", "verify")
                and (lineage is None or r["lineage"] == lineage)]

    def outcomes(self) -> Outcomes:
        """Children accepted and rejected by cause per direction, with the lineages started and ended."""
        accepted: dict[str, int] = {}
        for e in self.envs():
            if e.generation:
                accepted[e.direction or "-"] = accepted.get(e.direction or "-", 0) + 1
        rejected: dict[str, dict[str, int]] = {}
        for r in self.rejections():
            causes = rejected.setdefault(r.direction, {})
            causes[r.cause] = causes.get(r.cause, 0) + 1
        ends = [r for r in self.records() if r["kind"] == "end"]
        return Outcomes(seeds=len({e.lineage for e in self.envs() if e.generation == 0}),
                        not_started=sum(r["generation"] == 0 for r in ends),
                        ended=sum(r["generation"] > 0 for r in ends), accepted=accepted, rejected=rejected)

    def ended(self) -> set[str]:
        return {r["lineage"] for r in self.records() if r["kind"] == "end"}

    def path(self, rec: EnvRecord) -> Path:
        return self.root / "tasks" / rec.task

    # ------------------------------------------------------------------ writing
    def add_task(self, folder: Path) -> tuple[str, str]:
        """Move a verified task folder into the store (or find its twin); returns (name, hash)."""
        h = content_hash(folder)
        name = h[:16]
        dest = self.root / "tasks" / name
        if dest.exists():
            shutil.rmtree(folder, ignore_errors=True)
            return name, h
        tmp = self.root / f".tmp-{name}-{os.getpid()}-{threading.get_ident()}"
        shutil.copytree(folder, tmp, symlinks=True)
        try:
            os.rename(tmp, dest)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not dest.exists():
                raise
        shutil.rmtree(folder, ignore_errors=True)
        return name, h

    @staticmethod
    def _key(row: dict) -> tuple:
        return (row["kind"], row.get("lineage"), row.get("generation"), row.get("k"), row.get("direction"),
                row.get("stage"))

    def append(self, row: dict) -> bool:
        """Append one record durably; a record already logged (same key) is skipped. Returns whether written."""
        line = json.dumps(row, sort_keys=True, default=str) + "\n"
        with self._lock:
            key = self._key(row)
            if key in self._keys:
                return False
            with open(self.index_path, "a") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            self._keys.add(key)
            return True

    def add_env(self, rec: EnvRecord) -> None:
        self.append(rec.to_json())

    # ------------------------------------------------------------------ checks and export
    def check(self) -> list[str]:
        """Index vs folders: every env record's folder exists and has the recorded hash."""
        problems = []
        for e in self.envs():
            p = self.path(e)
            if not p.is_dir():
                problems.append(f"{e.lineage} g{e.generation}: folder {e.task} missing")
            elif content_hash(p) != e.content_hash:
                problems.append(f"{e.lineage} g{e.generation}: {e.task} does not match its recorded hash")
        return problems

    def export(self, out: str | Path, *, generation: int | None = None) -> list[Path]:
        """Copy environments (one generation, or all) into a Harbor dataset folder.

        Each task folder gets its ``[task] name`` and ``provenance.json`` (:mod:`evokit.dataset`),
        and ``out/dataset.toml`` lists every task folder there with Harbor's digest.
        """
        from evokit.dataset import write_manifest, write_provenance

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        envs = self.envs()
        folder = {e.content_hash: f"{e.lineage}-g{e.generation:02d}-k{e.k}" for e in reversed(envs)
                  if generation is None or e.generation == generation}
        written = []
        for e in envs:
            if generation is not None and e.generation != generation:
                continue
            dest = out / f"{e.lineage}-g{e.generation:02d}-k{e.k}"
            if not dest.exists():
                shutil.copytree(self.path(e), dest, symlinks=True)
            write_provenance(dest, e.to_json(), folder.get(e.parent) if e.parent else None)
            written.append(dest)
        write_manifest(out, f"evolved environments from the lineage store {self.root.resolve().name}")
        return written


def gate_row(gate: dict, attempt: int) -> dict:
    """What a store keeps of one hack-gate run (a ``GateResult.to_dict()``) on attempt ``attempt``
    of a child: whether it passed, the probes that earned a reward, and how many runs went unscored."""
    return {"attempt": attempt, "passed": bool(gate.get("passed")), "failed": list(gate.get("failed", [])),
            "errors": len(gate.get("errors", [])), "seconds": gate.get("seconds")}


def hack_rates(records: Iterable[dict], lineage: str | None = None) -> list[dict]:
    """The hack rate per (generation, direction): of the children the gate checked (every verified
    attempt, accepted or not), the share that a probe passed; with the count per probe.

    Rows ``{"generation", "direction", "checked", "hacked", "errors", "rate", "probes": {probe: n}}``,
    sorted by generation then direction; ``lineage`` keeps one lineage's records.
    """
    rows: dict[tuple, dict] = {}
    for r in records:
        if r.get("kind") not in ("env", "reject") or not r.get("hack_gate"):
            continue
        if lineage is not None and r.get("lineage") != lineage:
            continue
        key = (r["generation"], r.get("direction") or "seed")
        row = rows.setdefault(key, {"generation": key[0], "direction": key[1], "checked": 0, "hacked": 0,
                                    "errors": 0, "probes": {}})
        for g in r["hack_gate"]:
            row["checked"] += 1
            row["hacked"] += bool(g["failed"])
            row["errors"] += bool(g.get("errors")) and not g["failed"]
            for p in g["failed"]:
                row["probes"][p] = row["probes"].get(p, 0) + 1
    out = [rows[k] for k in sorted(rows)]
    for row in out:
        row["rate"] = row["hacked"] / row["checked"] if row["checked"] else None
    return out


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
