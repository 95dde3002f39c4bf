"""An exported lineage as a Harbor dataset: ``dataset.toml`` plus a provenance record per task.

Harbor describes a local dataset as a folder of task folders with a ``dataset.toml`` manifest
(``[dataset] name = "org/name"``, one ``[[tasks]]`` entry per task: its ``[task] name`` and the
digest Harbor's packager computes), which ``harbor sync`` keeps current and ``harbor publish``
uploads. Each task also gets ``provenance.json``: the lineage store's record of how it was made
(EE §3: parent, edit direction and effort; the verifiers' evidence, the hack gate's runs, the LLM
calls and their cost where the run recorded them), so a user of the dataset can audit every task
without the store.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from harbor.models.dataset.manifest import DatasetInfo, DatasetManifest, DatasetTaskRef
from harbor.models.dataset.paths import DatasetPaths
from harbor.models.task.config import PackageInfo, TaskConfig
from harbor.publisher.packager import Packager

from evokit.tasks import CONFIG_FILE

ORG = "evokit"  # the org part of every exported name (Harbor names are org/name)
PROVENANCE_FILE = "provenance.json"


def package_name(name: str) -> str:
    """``evokit/<name>`` with characters Harbor's names refuse replaced by ``-``."""
    return f"{ORG}/{re.sub(r'[^A-Za-z0-9._-]', '-', name).lstrip('.-_') or 'task'}"


def write_provenance(task_dir: Path, record: dict, parent_task: str | None) -> None:
    """``provenance.json``: the store's record of this task, less the plan (it is in task.toml)."""
    row = {k: v for k, v in record.items() if k not in ("kind", "plan")}
    row["parent_task"] = parent_task  # the parent's folder in this export, when it was exported too
    (task_dir / PROVENANCE_FILE).write_text(json.dumps(row, indent=2, sort_keys=True, default=str) + "\n")


def name_task(task_dir: Path) -> str:
    """Give the task its Harbor package name (``[task] name``) and return it."""
    path = task_dir / CONFIG_FILE
    config = TaskConfig.model_validate_toml(path.read_text())
    name = package_name(task_dir.name)
    if config.task is None or config.task.name != name:
        config.task = PackageInfo(name=name)
        path.write_text(config.model_dump_toml())
    return name


def write_manifest(out: Path, description: str) -> DatasetManifest:
    """``dataset.toml`` over every task folder in ``out``, with Harbor's digests."""
    refs = []
    for task_dir in sorted(p for p in out.iterdir() if (p / CONFIG_FILE).is_file()):
        name = name_task(task_dir)  # first: task.toml is part of the digest
        digest, _ = Packager.compute_content_hash(task_dir)
        refs.append(DatasetTaskRef(name=name, digest=f"sha256:{digest}"))
    manifest = DatasetManifest(dataset=DatasetInfo(name=package_name(out.resolve().name), description=description),
                               tasks=refs)
    (out / DatasetPaths.MANIFEST_FILENAME).write_text(manifest.to_toml())
    return manifest
