"""The executors behind ``evokit.parallel``: order, failures named by item, killed workers, and Ray.

Local threads and processes, and a real local Ray instance (one for this module, shut down at the
end), run the same jobs: pure functions, a verification of a bundled example task in the
sandbox, and a whole evolution run whose store must come out identical to the local one.
"""

from __future__ import annotations

import functools
import io
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from store_support import timeless_records
from tqdm import tqdm

from evokit.llm import LLMError, LLMReplyError
from evokit.parallel import JobFailure, LocalExecutor, ParallelError, RayExecutor, make_executor
from evokit.sandbox import stale

# evokit.evolve, .seeds and .verify are imported inside the tests that use them: every worker
# process (kind="process", Ray) imports this module to find its jobs, and should do so quickly.

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "examples" / "tasks" / "pipes-top-ips"
LOCAL_KINDS = ["thread", "process"]


def slow_square(x: int) -> int:
    time.sleep(0.02 * (5 - x % 5))  # later items finish first: order must still be kept
    return x * x


def fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError(f"three is not allowed (got {x})")
    return x * x


def kill_on_five(x: int) -> int:
    if x == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    return x * x


def endpoint_down(x: int) -> int:
    raise LLMError(f"LLM endpoint http://127.0.0.1:9/v1 (m) failed: connection refused (job {x})")


def endpoint_down_or_bug(x: int) -> int:
    if x == 1:
        raise ValueError("a bug")
    return endpoint_down(x)


def endpoint_down_or_no_plan(x: int) -> int:
    if x == 1:
        raise LLMReplyError("plan", ["not JSON"], ["{"], [x])
    return endpoint_down(x)


def never_valid(x: int) -> int:
    raise LLMReplyError("plan", [f"not JSON ({x})"], ["{"], [x])


def sleep_in_sandbox(i: int, image, marks: Path) -> int:
    """A job blocked in a real sandbox for a minute; marks say how far it got and in which process."""
    from evokit.sandbox import Sandbox

    with Sandbox(image) as sandbox:
        (marks / f"running-{i}").write_text(str(os.getpid()))
        sandbox.exec("sleep 60")
        (marks / f"after-{i}").touch()  # an interrupted job must never get here
    return i


def verify_summary(path: Path) -> tuple:
    from evokit.verify import verify_task

    v = verify_task(path)
    return v.passed, v.content_hash, v.rewards, [(c.name, c.passed) for c in v.checks]


@pytest.fixture(scope="module")
def ray_executor():
    """One local Ray instance for every Ray test here, shut down before other modules run."""
    ex = RayExecutor(workers=2)
    yield ex
    ex.close()


@pytest.mark.parametrize("kind", LOCAL_KINDS)
def test_local_order_kept_and_progress_once_per_item(kind):
    """Results come back in item order although later items finish first; progress ticks once per item."""
    ticks = []
    ex = LocalExecutor(3, kind)
    assert ex.map(slow_square, range(10), progress=lambda: ticks.append(1)) == [x * x for x in range(10)]
    assert len(ticks) == 10
    with tqdm(total=10, file=io.StringIO()) as bar:  # a tqdm bar is accepted as is
        ex.map(slow_square, range(10), progress=bar)
        assert bar.n == 10


@pytest.mark.parametrize("kind", [*LOCAL_KINDS, "ray"])
def test_exception_names_its_item_and_others_complete(kind, request):
    """A job that raises is reported with its index, item and error; every other item still completes."""
    ex = request.getfixturevalue("ray_executor") if kind == "ray" else LocalExecutor(2, kind)
    with pytest.raises(ParallelError) as info:
        ex.map(fail_on_three, range(6))
    err = info.value
    assert "1 of 6 jobs failed" in str(err)
    assert "job 3 (item 3): ValueError: three is not allowed (got 3)" in str(err)
    assert "fail_on_three" in err.failures[0].traceback  # the worker's traceback travels back
    assert [r for i, r in enumerate(err.results) if i != 3] == [0, 1, 4, 16, 25]
    out = ex.map(fail_on_three, range(6), errors="return")
    assert isinstance(out[3], JobFailure) and out[3].item == 3 and out[:3] == [0, 1, 4]


@pytest.mark.parametrize("kind", ["process", "ray"])
def test_killed_worker_is_a_clear_error_for_its_item_only(kind, request):
    """SIGKILL of the worker running item 5 fails item 5 alone, saying the worker died; the rest complete."""
    ex = request.getfixturevalue("ray_executor") if kind == "ray" else LocalExecutor(2, kind)
    ticks = []
    out = ex.map(kill_on_five, range(8), errors="return", progress=lambda: ticks.append(1))
    assert [r for i, r in enumerate(out) if i != 5] == [x * x for x in range(8) if x != 5]
    assert isinstance(out[5], JobFailure) and out[5].index == 5
    assert "died" in out[5].error and ("SIGKILL" in out[5].error or "WorkerCrashedError" in out[5].error)
    assert len(ticks) == 8
    with pytest.raises(ParallelError, match=r"job 1 \(item 5\): .*died"):
        ex.map(kill_on_five, [4, 5, 6])


def test_process_mode_refuses_closures_clearly():
    """kind='process' pickles the function: a closure is refused with a message saying what to use."""
    y = 2
    with pytest.raises(TypeError, match="picklable top-level function"):
        LocalExecutor(2, "process").map(lambda x: x + y, [1, 2])


def test_make_executor_kinds(ray_executor):
    """CLI names map to executors; a Ray address without the Ray executor is refused."""
    assert isinstance(make_executor("local", 3), LocalExecutor) and make_executor("local", 3).workers == 3
    assert make_executor("process").kind == "process"
    assert isinstance(make_executor("ray", 2), RayExecutor)  # joins the session's running instance
    with pytest.raises(ValueError, match="ray-address"):
        make_executor("local", 2, "ray://head:10001")
    with pytest.raises(ValueError, match="local, process or ray"):
        make_executor("dask")


def test_ray_matches_local_on_pure_functions_and_closures(ray_executor):
    """Ray returns what the local pool returns, in order, for a top-level function and a closure."""
    offset = 7
    assert ray_executor.map(slow_square, range(12)) == LocalExecutor(2).map(slow_square, range(12))
    ticks = []
    assert ray_executor.map(lambda x: x + offset, range(5), progress=lambda: ticks.append(1)) == [7, 8, 9, 10, 11]
    assert len(ticks) == 5


def test_ray_verifies_a_task_like_the_local_pool(ray_executor):
    """verify_task of a bundled example inside Ray workers (real sandbox) gives the local verdict;
    verify_many takes the executor."""
    local = LocalExecutor(2).map(verify_summary, [TASK, TASK])
    remote = ray_executor.map(verify_summary, [TASK, TASK])
    assert remote == local
    assert local[0][0] and local[0][2]["oracle"][0] == {"reward": 1.0}
    from evokit.verify import verify_many

    assert [v.passed for v in verify_many([TASK], executor=ray_executor, progress=False)] == [True]


def test_evolve_through_ray_gives_the_local_store(ray_executor, tmp_path):
    """evolve() of 2 seeds × 2 generations writes the same records through Ray as through local threads,
    and a live progress bar still counts every lineage × generation."""
    from evokit.evolve import EvolveConfig, evolve
    from evokit.seeds import make_seeds, seed_dirs

    make_seeds(2, 0, tmp_path / "seeds", progress=False)
    seeds = seed_dirs(tmp_path / "seeds")
    cfg = EvolveConfig(generations=2)
    local = evolve(seeds, tmp_path / "local", cfg, executor=LocalExecutor(2), progress=False)
    remote = evolve(seeds, tmp_path / "ray", cfg, executor=ray_executor, progress=False)
    assert len(local.envs()) >= 4
    ray_rows, local_rows = timeless_records(remote.records()), timeless_records(local.records())
    diff = next(((a, b) for a, b in zip(ray_rows, local_rows, strict=False) if a != b), None)
    assert ray_rows == local_rows, f"first differing record:\nray:   {diff and diff[0]}\nlocal: {diff and diff[1]}"
    assert remote.check() == []

    bar = tqdm(total=len(seeds) * cfg.generations, file=io.StringIO())  # live: ticks come from the workers
    ray_executor.map(lambda s: [bar.update() for _ in range(cfg.generations)], seeds)
    assert bar.n == len(seeds) * cfg.generations
    bar.close()


@pytest.mark.parametrize("kind", [*LOCAL_KINDS, "ray"])
def test_every_job_failing_the_same_user_facing_way_is_that_error(kind, request):
    """ParallelError.common_error gives the first job's error when every job failed the user's way
    (UserError; the CLI prints it as one line, exit 2), also when it travelled back from a process
    or Ray worker, and also when the user errors differ; one bug among them gives None."""
    ex = request.getfixturevalue("ray_executor") if kind == "ray" else LocalExecutor(2, kind)
    with pytest.raises(ParallelError) as info:
        ex.map(endpoint_down, range(3))
    common = info.value.common_error((LLMError, LLMReplyError))
    assert isinstance(common, LLMError) and "(job 0)" in str(common)
    assert info.value.common_error((KeyError,)) is None  # not among the classes asked for
    assert "\n" not in info.value.summary and "Traceback" not in info.value.summary
    assert info.value.summary.startswith("3 of 3 jobs failed; job 0 (item 0): LLMError: LLM endpoint")
    with pytest.raises(ParallelError) as info:
        ex.map(endpoint_down_or_bug, range(3))
    assert info.value.common_error() is None  # job 1 is a bug, not the user's mistake
    with pytest.raises(ParallelError) as info:
        ex.map(endpoint_down_or_no_plan, range(3))
    assert isinstance(info.value.common_error(), LLMError)  # two kinds of UserError: the first job's
    assert info.value.common_error((LLMReplyError,)) is None
    with pytest.raises(ParallelError) as info:  # an error with several arguments travels whole
        ex.map(never_valid, [4, 5])
    common = info.value.common_error((LLMReplyError,))
    assert isinstance(common, LLMReplyError) and common.seeds == [4] and common.errors == ["not JSON (4)"]


def _press_ctrl_c_when_running(marks: Path, n: int, pressed: list) -> threading.Thread:
    """Once ``n`` jobs are inside their sandboxes, SIGINT to the main thread (as a terminal's Ctrl-C)."""
    def press():
        deadline = time.monotonic() + 120
        while len(list(marks.glob("running-*"))) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        pressed.append(time.monotonic())
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    thread = threading.Thread(target=press, daemon=True)
    thread.start()
    return thread


def _assert_stopped(marks: Path, pressed: list, stopped: float, owners: set[int]) -> None:
    assert pressed, "the jobs never got into their sandboxes"
    assert stopped - pressed[0] < 5, f"the map took {stopped - pressed[0]:.1f} s to stop"
    assert sorted(p.name for p in marks.glob("running-*")) == ["running-0", "running-1"]  # the rest never began
    assert not list(marks.glob("after-*"))  # the interrupted jobs ran no further
    owners |= {int(p.read_text()) for p in marks.glob("running-*")}
    left = [e for e in stale.scan() if e.pid in owners]
    assert not left, f"sandboxes of the interrupted jobs left behind: {left}"


@pytest.mark.parametrize("kind", LOCAL_KINDS)
def test_ctrl_c_stops_a_local_map_blocked_in_sandboxes(kind, base_image, tmp_path):
    """Ctrl-C while two jobs sit in real sandboxes (``sleep 60``) and four wait: the map raises
    KeyboardInterrupt within seconds, no queued job starts, the running jobs go no further, and
    their sandboxes are gone (no lease of theirs left, live or stale)."""
    pressed: list = []
    _press_ctrl_c_when_running(tmp_path, 2, pressed)
    with pytest.raises(KeyboardInterrupt):
        LocalExecutor(2, kind).map(functools.partial(sleep_in_sandbox, image=base_image, marks=tmp_path), range(6))
    _assert_stopped(tmp_path, pressed, time.monotonic(), {os.getpid()})


def test_ctrl_c_stops_ray_jobs_and_their_sandboxes(ray_executor, base_image, tmp_path):
    """Ctrl-C while two Ray tasks sit in real sandboxes: the map raises KeyboardInterrupt within
    seconds, the queued tasks never start, and the workers' sandboxes are stopped and cleaned."""
    pressed: list = []
    _press_ctrl_c_when_running(tmp_path, 2, pressed)
    with pytest.raises(KeyboardInterrupt):
        ray_executor.map(functools.partial(sleep_in_sandbox, image=base_image, marks=tmp_path), range(6))
    _assert_stopped(tmp_path, pressed, time.monotonic(), set())
