"""Tests for evokit.tasks: Harbor task folders written, read, hashed, annotated and imported.

Checks that written folders are accepted by Harbor's own ``Task`` model, that the content hash is
stable under copies and metadata edits yet changes with every part the agent or verifier sees,
that evokit metadata survives next to foreign ``[metadata]`` keys, that malformed folders fail
with errors naming folder, file and field, that Terminal-Bench 1 tasks import through Harbor's
mapper, and that the bundled example tasks meet the contract evokit relies on.
"""

import hashlib
import os
import re
import shutil
import stat
import tomllib
from pathlib import Path

import pytest
from harbor.models.task.config import NetworkMode, TaskConfig, TaskOS
from harbor.models.task.task import Task
from tb1_support import tb1_task

from evokit.tasks import (
    EvokitMetadata,
    Lineage,
    TaskFiles,
    TaskFormatError,
    content_hash,
    default_task_config,
    load_task,
    migrate_terminal_bench,
    read_metadata,
    write_metadata,
    write_task,
)

os.environ["HARBOR_TELEMETRY"] = "0"

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (REPO / "examples" / "tasks").iterdir() if p.is_dir())
TB2_FIXTURE = REPO / "tests" / "data" / "tb2_style" / "csv-to-parquet-lite"

TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /app/out.txt 2>/dev/null)" = "42" ]; then echo 1; else echo 0; fi \\
  > /logs/verifier/reward.txt
"""


def _files() -> dict:
    return dict(
        instruction="Write 42 to /app/out.txt.\n",
        dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\nCOPY data.txt /app/data.txt\n",
        environment_files={"data.txt": "6 7\n", "nested/blob.bin": bytes(range(256))},
        tests={"test.sh": TEST_SH, "expected.txt": "42\n"},
        solution={"solve.sh": "#!/bin/bash\necho 42 > /app/out.txt\n", "helper.py": "x = 1\n"},
    )


@pytest.fixture
def task(tmp_path: Path) -> Path:
    return write_task(tmp_path / "answer-42", **_files())


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# ------------------------------------------------------------------------------- write and load


def test_written_task_loads_with_harbor_and_defaults(task: Path) -> None:
    harbor_task = Task(task)
    assert harbor_task.instruction == "Write 42 to /app/out.txt.\n"
    cfg = load_task(task).config
    assert cfg.schema_version == TaskConfig().schema_version
    assert cfg.agent.timeout_sec == 120 and cfg.verifier.timeout_sec == 120
    env = cfg.environment
    assert env.network_mode == NetworkMode.NO_NETWORK
    assert (env.cpus, env.memory_mb, env.storage_mb, env.workdir) == (1, 1024, 1024, "/app")
    assert read_metadata(task) is None  # no metadata given: a plain Harbor task


def test_written_files_round_trip_with_modes(task: Path) -> None:
    assert TaskFiles.from_folder(task) == TaskFiles(**_files())
    assert (task / "environment" / "nested" / "blob.bin").read_bytes() == bytes(range(256))
    assert _mode(task / "tests" / "test.sh") == 0o755
    assert _mode(task / "solution" / "solve.sh") == 0o755
    assert _mode(task / "tests" / "expected.txt") == 0o644
    assert _mode(task / "solution" / "helper.py") == 0o644
    assert _mode(task) == 0o755


def test_write_task_as_kwargs_round_trip(task: Path, tmp_path: Path) -> None:
    copy = write_task(tmp_path / "copy", **TaskFiles.from_folder(task).as_kwargs())
    assert content_hash(copy) == content_hash(task)


def test_write_task_refuses_existing_folder_unless_overwrite(task: Path) -> None:
    with pytest.raises(FileExistsError, match="overwrite=True"):
        write_task(task, **_files())
    files = _files() | {"instruction": "Write 43 to /app/out.txt.\n"}
    write_task(task, overwrite=True, **files)
    assert (task / "instruction.md").read_text() == files["instruction"]
    assert [p.name for p in task.parent.iterdir()] == [task.name]  # no temp or backup left


def test_overwrite_refuses_a_folder_that_is_not_a_task(tmp_path: Path) -> None:
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a task folder"):
        write_task(precious, overwrite=True, **_files())
    assert (precious / "notes.txt").read_text() == "keep me"


def test_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    config = default_task_config()
    config.metadata = {"note": None}  # TOML cannot store None: refused after staging began
    with pytest.raises(TaskFormatError, match=r"\['metadata'\]"):
        write_task(tmp_path / "t", config=config, **_files())
    assert list(tmp_path.iterdir()) == []


def test_write_task_never_publishes_a_folder_harbor_rejects(tmp_path: Path) -> None:
    config = default_task_config()
    config.environment.os = TaskOS.WINDOWS  # Harbor then wants tests/test.bat, which we lack
    with pytest.raises(TaskFormatError, match="tests/test.bat: missing"):
        write_task(tmp_path / "t", config=config, **_files())
    assert list(tmp_path.iterdir()) == []


def test_custom_config_is_used_and_not_mutated(tmp_path: Path) -> None:
    config = default_task_config()
    config.agent.timeout_sec = 30.0
    config.metadata = {"difficulty": "easy"}
    meta = EvokitMetadata(lineage=Lineage())
    dest = write_task(tmp_path / "t", config=config, metadata=meta, **_files())
    assert load_task(dest).config.agent.timeout_sec == 30.0
    assert load_task(dest).config.metadata["difficulty"] == "easy"
    assert "evokit" not in config.metadata


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tests": {"check.sh": "true"}}, "test.sh"),
        ({"solution": {"other.sh": "true"}}, "solve.sh"),
        ({"environment_files": {"../escape": "x"}}, "relative POSIX path"),
        ({"environment_files": {"/etc/passwd": "x"}}, "relative POSIX path"),
        ({"environment_files": {"Dockerfile": "FROM x"}}, "dockerfile"),
    ],
)
def test_task_files_reject_bad_layouts(change: dict, message: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=message):
        write_task(tmp_path / "t", **(_files() | change))
    assert not (tmp_path / "t").exists()


# ------------------------------------------------------------------------------------ the hash


def test_hash_ignores_location_name_mtime_and_junk(task: Path, tmp_path: Path) -> None:
    before = content_hash(task)
    assert re.fullmatch(r"[0-9a-f]{64}", before)
    elsewhere = tmp_path / "deeper" / "other-name"
    shutil.copytree(task, elsewhere)  # copytree keeps modes but sets fresh mtimes on dirs
    for path in elsewhere.rglob("*"):
        os.utime(path, (0, 0))
    (elsewhere / "tests" / "__pycache__").mkdir()
    (elsewhere / "tests" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    (elsewhere / "environment" / ".DS_Store").write_bytes(b"junk")
    assert content_hash(elsewhere) == before


def test_hash_pins_its_encoding(tmp_path: Path) -> None:
    """A fixed tree has a fixed hash: changing the encoding must be a deliberate version bump."""
    root = tmp_path / "t"
    (root / "tests").mkdir(parents=True)
    (root / "instruction.md").write_bytes(b"hi\n")
    (root / "tests" / "test.sh").write_bytes(b"true\n")
    os.chmod(root / "instruction.md", 0o644)
    os.chmod(root / "tests" / "test.sh", 0o755)

    # Spelled out: domain tag, then per file in path order: kind+exec flag, len+path, len+bytes.
    def n(b: bytes) -> bytes:
        return len(b).to_bytes(8, "big") + b

    expected = hashlib.sha256(
        b"evokit-content-hash-v1\0"
        + b"F-"
        + n(b"instruction.md")
        + n(b"hi\n")
        + b"Fx"
        + n(b"tests/test.sh")
        + n(b"true\n")
    ).hexdigest()
    assert content_hash(root) == expected
    assert expected == "d7b49d584329324a4212c9876467111576598bd01608569c701d0d46916ddd18"


def _edit_instruction(t: Path) -> None:
    (t / "instruction.md").write_text("Write 43 to /app/out.txt.\n")


def _edit_dockerfile(t: Path) -> None:
    (t / "environment" / "Dockerfile").write_text("FROM debian:bookworm\n")


def _edit_env_data(t: Path) -> None:
    (t / "environment" / "nested" / "blob.bin").write_bytes(bytes(range(255)))


def _add_env_file(t: Path) -> None:
    (t / "environment" / "extra.txt").write_text("")


def _edit_tests(t: Path) -> None:
    (t / "tests" / "expected.txt").write_text("43\n")


def _edit_solution(t: Path) -> None:
    (t / "solution" / "helper.py").write_text("x = 2\n")


def _rename_file(t: Path) -> None:
    (t / "solution" / "helper.py").rename(t / "solution" / "helper2.py")


def _move_between_parts(t: Path) -> None:
    (t / "solution" / "helper.py").rename(t / "tests" / "helper.py")


def _toggle_exec_bit(t: Path) -> None:
    os.chmod(t / "solution" / "helper.py", 0o755)


def _replace_with_symlink(t: Path) -> None:
    data = t / "environment" / "data.txt"
    data.unlink()
    data.symlink_to("nested/blob.bin")


@pytest.mark.parametrize(
    "edit",
    [
        _edit_instruction,
        _edit_dockerfile,
        _edit_env_data,
        _add_env_file,
        _edit_tests,
        _edit_solution,
        _rename_file,
        _move_between_parts,
        _toggle_exec_bit,
        _replace_with_symlink,
    ],
)
def test_hash_changes_with_every_part(task: Path, edit) -> None:
    before = content_hash(task)
    edit(task)
    assert content_hash(task) != before


def test_hash_ignores_task_toml(task: Path) -> None:
    before = content_hash(task)
    toml_path = task / "task.toml"
    toml_path.write_text(toml_path.read_text().replace("timeout_sec = 120.0", "timeout_sec = 9.0"))
    assert content_hash(task) == before


def test_hash_of_non_task_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TaskFormatError, match="instruction.md"):
        content_hash(tmp_path)


# ---------------------------------------------------------------------------------- metadata

FOREIGN_TOML = """\
schema_version = "1.4"

[metadata]
difficulty = "medium"
tags = ["files", "bash"]

[metadata.provenance]
source = "hand-written"

[agent]
timeout_sec = 300.0

[environment]
memory = "2G"
"""


@pytest.mark.filterwarnings("ignore:The 'memory' field is deprecated:DeprecationWarning")
def test_metadata_round_trip_keeps_foreign_keys(task: Path) -> None:
    (task / "task.toml").write_text(FOREIGN_TOML)
    before_cfg = load_task(task).config
    before_hash = content_hash(task)
    parent = "a" * 64
    meta = EvokitMetadata(
        plan=[{"scenario": "logs", "skill": "awk", "args": {"k": [1, 2]}}, {"skill": "sort"}],
        lineage=Lineage(parent=parent, generation=3, direction="skill", effort="high"),
        content_hash=before_hash,
    )
    write_metadata(task, meta)

    assert read_metadata(task) == meta
    after_cfg = load_task(task).config
    assert after_cfg.metadata["difficulty"] == "medium"
    assert after_cfg.metadata["tags"] == ["files", "bash"]
    assert after_cfg.metadata["provenance"] == {"source": "hand-written"}
    assert after_cfg.environment.memory_mb == 2048  # legacy key migrated, value kept
    before_cfg.metadata["evokit"] = after_cfg.metadata["evokit"]
    assert after_cfg.model_dump() == before_cfg.model_dump()  # nothing else changed
    assert content_hash(task) == before_hash
    raw = tomllib.loads((task / "task.toml").read_text())
    assert raw["metadata"]["evokit"]["lineage"]["parent"] == parent

    rewritten = meta.model_copy(update={"lineage": Lineage(lineage_id="seed-7")})
    write_metadata(task, rewritten)  # overwriting keeps foreign keys too
    assert read_metadata(task) == rewritten
    assert load_task(task).config.metadata["provenance"] == {"source": "hand-written"}


def test_write_task_stamps_content_hash(tmp_path: Path) -> None:
    meta = EvokitMetadata(lineage=Lineage(generation=0, lineage_id="x"), content_hash="0" * 64)
    dest = write_task(tmp_path / "t", metadata=meta, **_files())
    stored = read_metadata(dest)
    assert stored is not None and stored.content_hash == content_hash(dest)
    assert stored.lineage == meta.lineage


def test_write_metadata_refuses_a_stale_hash(task: Path) -> None:
    with pytest.raises(TaskFormatError, match="content_hash does not match"):
        write_metadata(task, EvokitMetadata(content_hash="0" * 64))
    assert read_metadata(task) is None


@pytest.mark.parametrize(
    ("table", "field"),
    [
        (
            '[metadata.evokit.lineage]\ndirection = "sideways"\n',
            "metadata.evokit.lineage.direction",
        ),
        ("[metadata.evokit.lineage]\ngeneration = -1\n", "metadata.evokit.lineage.generation"),
        ('[metadata.evokit]\nsurprise = "x"\n', "metadata.evokit.surprise"),
        ('[metadata.evokit]\ncontent_hash = "abc"\n', "metadata.evokit.content_hash"),
    ],
)
def test_bad_metadata_names_the_field(task: Path, table: str, field: str) -> None:
    with (task / "task.toml").open("a") as f:
        f.write("\n" + table)
    with pytest.raises(TaskFormatError, match=re.escape(field)) as err:
        read_metadata(task)
    assert err.value.file == "task.toml" and err.value.folder == task


def test_metadata_model_rejects_what_toml_cannot_hold() -> None:
    with pytest.raises(ValueError, match=r"plan\[0\]\.skill is None"):
        EvokitMetadata(plan=[{"skill": None}])
    with pytest.raises(ValueError, match="non-finite"):
        EvokitMetadata(plan=[{"weight": float("nan")}])
    with pytest.raises(ValueError, match="at least generation 1"):
        Lineage(parent="b" * 64, generation=0)


# ------------------------------------------------------------------------------ load errors


def test_malformed_toml_names_folder_and_file(task: Path) -> None:
    (task / "task.toml").write_text("[agent\ntimeout_sec = 1\n")
    with pytest.raises(TaskFormatError, match="not valid TOML") as err:
        load_task(task)
    assert str(task) in str(err.value) and "task.toml" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_invalid_field_names_the_field(task: Path) -> None:
    (task / "task.toml").write_text('[environment]\ncpus = "lots"\n')
    with pytest.raises(TaskFormatError, match=r"field 'environment\.cpus'"):
        load_task(task)


def test_missing_instruction(task: Path) -> None:
    (task / "instruction.md").unlink()
    with pytest.raises(TaskFormatError, match="instruction.md: missing") as err:
        load_task(task)
    assert err.value.file == "instruction.md"


def test_missing_test_script(task: Path) -> None:
    (task / "tests" / "test.sh").unlink()
    with pytest.raises(TaskFormatError, match="tests/test.sh: missing") as err:
        load_task(task)
    assert str(task) in str(err.value)


def test_missing_task_toml_and_environment(task: Path, tmp_path: Path) -> None:
    shutil.rmtree(task / "environment")
    with pytest.raises(TaskFormatError, match="environment/: missing"):
        load_task(task)
    (task / "task.toml").unlink()
    with pytest.raises(TaskFormatError, match="task.toml: missing"):
        load_task(task)
    with pytest.raises(TaskFormatError, match="not a directory"):
        load_task(tmp_path / "nowhere")


def test_task_format_error_pickles(task: Path) -> None:
    import pickle

    err = TaskFormatError(task, "task.toml", "broken")
    again = pickle.loads(pickle.dumps(err))
    assert (again.folder, again.file, again.problem, str(again)) == (
        err.folder,
        err.file,
        err.problem,
        str(err),
    )


# -------------------------------------------------------------------------- Terminal-Bench 1


@pytest.mark.parametrize("compose", [True, False], ids=["with-compose", "dockerfile-only"])
def test_migrate_terminal_bench(tmp_path: Path, compose: bool) -> None:
    src = tb1_task(tmp_path / "tb1", compose=compose)
    dest = migrate_terminal_bench(src, tmp_path / "harbor" / "count-lines")

    task = load_task(dest)
    assert Task(dest).instruction.strip().endswith("into /app/count.txt.")
    assert task.config.agent.timeout_sec == 200 and task.config.verifier.timeout_sec == 30
    assert task.config.metadata["difficulty"] == "easy"
    assert task.config.metadata["tags"] == ["wc", "bash"]
    test_sh = (dest / "tests" / "test.sh").read_text()
    assert 'bash "/tests/check.sh"' in test_sh and "$TEST_DIR" not in test_sh
    assert "/logs/verifier/reward.txt" in test_sh
    assert (dest / "tests" / "check.sh").is_file()
    assert (
        _mode(dest / "tests" / "test.sh") & 0o111 and _mode(dest / "solution" / "solve.sh") & 0o111
    )
    dockerfile = (dest / "environment" / "Dockerfile").read_text()
    assert (
        dockerfile.startswith("FROM debian:bookworm-slim") and "ENV TEST_DIR=/tests" in dockerfile
    )
    assert (dest / "environment" / "input.txt").read_text() == "a\nb\nc\n"
    assert not (dest / "environment" / "docker-compose.yaml").exists()  # collapsed into Dockerfile
    assert not (src / "docker-compose.yaml").exists() or compose  # source left untouched
    assert sorted(p.name for p in dest.parent.iterdir()) == ["count-lines"]


def test_migrate_errors_name_the_file(tmp_path: Path) -> None:
    src = tb1_task(tmp_path / "tb1", compose=False)
    (src / "run-tests.sh").unlink()
    with pytest.raises(TaskFormatError, match="run-tests.sh: missing"):
        migrate_terminal_bench(src, tmp_path / "out" / "x")
    (src / "task.yaml").write_text("difficulty: easy\n")
    with pytest.raises(TaskFormatError, match=r"task\.yaml: field 'instruction'"):
        migrate_terminal_bench(src, tmp_path / "out" / "x")
    (src / "task.yaml").unlink()
    with pytest.raises(TaskFormatError, match="task.yaml: missing"):
        migrate_terminal_bench(src, tmp_path / "out" / "x")
    assert not (tmp_path / "out" / "x").exists()


def test_migrate_refuses_existing_destination(tmp_path: Path) -> None:
    src = tb1_task(tmp_path / "tb1", compose=True)
    (tmp_path / "out").mkdir()
    with pytest.raises(FileExistsError):
        migrate_terminal_bench(src, tmp_path / "out")


# ---------------------------------------------------------------- bundled tasks and fixtures

APP_PATH = re.compile(r"/app/[A-Za-z0-9_./-]*[A-Za-z0-9_]")


def test_there_are_five_examples() -> None:
    assert [p.name for p in EXAMPLES] == [
        "csv-quoted-ledger",
        "files-organize",
        "pipes-top-ips",
        "python-fix-script",
        "sqlite-report",
    ]


@pytest.mark.parametrize("folder", EXAMPLES, ids=lambda p: p.name)
def test_example_task_contract(folder: Path) -> None:
    task = load_task(folder)
    assert Task(folder).name == folder.name
    cfg = task.config
    assert cfg.environment.network_mode == NetworkMode.NO_NETWORK
    assert cfg.agent.timeout_sec and cfg.verifier.timeout_sec
    assert cfg.environment.cpus and cfg.environment.memory_mb and cfg.environment.storage_mb
    assert {"difficulty", "category", "tags"} <= cfg.metadata.keys()
    dockerfile = (folder / "environment" / "Dockerfile").read_text()
    assert dockerfile.startswith("FROM debian:bookworm-slim\n") and "WORKDIR /app" in dockerfile
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert size < 50_000, f"{folder.name} is {size} bytes"
    for script in (folder / "tests" / "test.sh", folder / "solution" / "solve.sh"):
        assert _mode(script) & 0o111, f"{script} is not executable"
    test_sh = (folder / "tests" / "test.sh").read_text()
    assert "mkdir -p /logs/verifier" in test_sh and "/logs/verifier/reward.txt" in test_sh
    # The instruction must name every /app path the tests look at (TB 2.1's most common fix).
    instruction = (folder / "instruction.md").read_text()
    checked = {
        m.group(0) for p in (folder / "tests").rglob("*") for m in APP_PATH.finditer(p.read_text())
    }
    assert checked, "tests check no /app path"
    missing = sorted(path for path in checked if path not in instruction)
    assert not missing, f"instruction.md does not mention {missing}"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # TB2's legacy memory/storage keys
def test_tb2_style_fixture_loads() -> None:
    task = load_task(TB2_FIXTURE)
    assert Task(TB2_FIXTURE).instruction
    dockerfile = (TB2_FIXTURE / "environment" / "Dockerfile").read_text()
    for needle in (
        "FROM debian:bookworm-slim",
        "pip install",
        "ARG ",
        "ENV ",
        "COPY data/",
        "\\\n",
    ):
        assert needle in dockerfile
    assert (TB2_FIXTURE / "README.md").is_file()
    assert task.config.schema_version == "1.0"  # TB2's `version` key, renamed by Harbor
    assert task.config.environment.memory_mb == 2048  # legacy memory = "2G", migrated
    assert task.config.environment.storage_mb == 4096


# ------------------------------------------------------------------ host files: instructions
def _peak_rss_after(fn) -> int:
    """Growth of this process's peak RSS (VmHWM, reset first) while ``fn`` runs."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")

    def hwm() -> int:
        return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))

    before = hwm()
    fn()
    return hwm() - before


def test_huge_fifo_or_linked_instruction_is_refused_before_it_is_read(task: Path, tmp_path: Path) -> None:
    """A 100 MB instruction.md is refused with the file and the 1 MiB cap named, without reading it
    (peak RSS grows < 16 MiB; reading it costs 1.1 GB); a FIFO is refused, not read forever; a symlink
    (to a host secret) is refused. open_task (the sandbox/trial path) applies the same checks."""
    from evokit.sandbox.task_env import sandbox_for_task
    from evokit.tasks.folder import MAX_INSTRUCTION_BYTES, open_task

    assert MAX_INSTRUCTION_BYTES == 1 << 20
    instruction = task / "instruction.md"
    with open(instruction, "wb") as f:
        f.write(b"Do it.\n" * (100 * 1024 * 1024 // 7))

    def refused() -> None:
        with pytest.raises(TaskFormatError, match=r"instruction.md: is 10485\d+ bytes, over the cap of 1048576"):
            load_task(task)
        with pytest.raises(TaskFormatError, match="over the cap"):
            open_task(task)
        with pytest.raises(TaskFormatError, match="over the cap"):
            sandbox_for_task(task)

    assert _peak_rss_after(refused) < 16 << 20
    instruction.unlink()
    os.mkfifo(instruction)
    with pytest.raises(TaskFormatError, match="instruction.md: is not a regular file"):
        load_task(task)
    instruction.unlink()
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    instruction.symlink_to(secret)
    with pytest.raises(TaskFormatError, match="instruction.md: is a symlink"):
        open_task(task)
    instruction.unlink()
    instruction.write_text("x" * MAX_INSTRUCTION_BYTES)  # exactly the cap is fine
    assert len(load_task(task).instruction) == MAX_INSTRUCTION_BYTES


#: Terminal-Bench 1's usual run-tests.sh: uv from the internet, pytest installed with it, at test time.
_TB1_RUN_TESTS_ONLINE = """#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh
source $HOME/.local/bin/env
uv venv .tbench-testing
source .tbench-testing/bin/activate
uv pip install pytest==8.4.1
uv run pytest $TEST_DIR/test_outputs.py -rA
"""


def test_migrate_records_test_time_fetches_and_the_rubric_flags_them(tmp_path: Path) -> None:
    """An imported TB1 task whose tests download uv and pytest records each fetch in
    ``[metadata].test_time_fetches`` and fails the rubric's ``tests-no-download`` although Harbor's
    mapper left its network open; an offline TB1 task records nothing and passes."""
    from evokit.verify.rubric import DEFAULT_RUBRIC, RubricContext

    def judged(dest: Path) -> tuple[bool, str]:
        ctx = RubricContext(task=Task(dest))
        return next((ok, why) for rule, ok, why in DEFAULT_RUBRIC.evaluate(ctx, runs=False)
                    if rule.name == "tests-no-download")

    offline = migrate_terminal_bench(tb1_task(tmp_path / "a", compose=False), tmp_path / "out" / "offline")
    src = tb1_task(tmp_path / "b", compose=False)
    (src / "run-tests.sh").write_text(_TB1_RUN_TESTS_ONLINE)
    online = migrate_terminal_bench(src, tmp_path / "out" / "online")

    assert load_task(online).config.environment.network_mode == NetworkMode.PUBLIC
    fetches = tomllib.loads((online / "task.toml").read_text())["metadata"]["test_time_fetches"]
    assert fetches == ["tests/test.sh: apt-get install -y curl",
                       "tests/test.sh: curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh",
                       "tests/test.sh: uv pip install pytest==8.4.1"]
    ok, why = judged(online)
    assert not ok and "astral.sh" in why
    assert tomllib.loads((offline / "task.toml").read_text())["metadata"]["test_time_fetches"] == []
    assert judged(offline)[0]
