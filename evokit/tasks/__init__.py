"""Harbor task folders: load, write, fingerprint, annotate and import them.

evokit's unit of work is a Harbor task folder (``instruction.md``, ``task.toml``, ``environment/``,
``tests/test.sh``, ``solution/solve.sh``). Whatever evokit evolves must stay a plain Harbor task, so
that ``harbor run``, TRL, SkyRL and rLLM consume it unchanged. Hence:

1. Reading goes through Harbor's own ``Task`` / ``TaskConfig``, so evokit never disagrees with the
   harness about what a valid task is. We only wrap Harbor's errors so that, in a batch over
   hundreds of generated tasks, each one names the folder, the file and the field at fault.
2. evokit's bookkeeping (scenario-skill plan, lineage, content hash) lives in the free-form
   ``[metadata.evokit]`` table of ``task.toml``, which Harbor carries without interpreting; other
   ``[metadata]`` keys (difficulty, category, tags, ...) are kept as they are.
3. ``content_hash`` covers what the agent and the verifier see (instruction, environment, tests,
   solution) and deliberately not ``task.toml``: writing lineage into a task must not change its
   identity, or a child could never name its parent by hash.
4. ``write_task`` and ``migrate_terminal_bench`` build the folder in a temporary sibling, validate it
   with Harbor, then rename it into place, so a crash or a rejected task never leaves a half-written
   folder where a scheduler could pick it up.
"""

from evokit.tasks.folder import (
    CONFIG_FILE,
    HASHED_PARTS,
    IGNORED_NAMES,
    INSTRUCTION_FILE,
    METADATA_KEY,
    TaskFormatError,
    content_hash,
    load_task,
)
from evokit.tasks.metadata import EvokitMetadata, Lineage, read_metadata, write_metadata
from evokit.tasks.migrate import import_terminal_bench, migrate_terminal_bench, terminal_bench_tasks
from evokit.tasks.write import TaskFiles, default_task_config, write_task

__all__ = [
    "CONFIG_FILE", "HASHED_PARTS", "IGNORED_NAMES", "INSTRUCTION_FILE", "METADATA_KEY", "EvokitMetadata",
    "Lineage", "TaskFiles", "TaskFormatError", "content_hash", "default_task_config", "load_task",
    "import_terminal_bench", "migrate_terminal_bench", "read_metadata", "terminal_bench_tasks", "write_metadata", "write_task",
]
