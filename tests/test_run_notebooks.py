"""scripts/run_notebooks.py's record of full runs (figures/full/runs.json): the time that computed a
study's rows survives a rerun that only redraws it, a run that computed them again becomes the record with
the earlier one kept beside it, and other sizes start a new record."""

from __future__ import annotations

import json
from pathlib import Path

from script_support import load_script

ROOT = Path(__file__).resolve().parent.parent


def notebook(path: Path, runs: int) -> Path:
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
            "source": f'SIZES = {{\n    "smoke": {{"runs": 2}},\n    "full": {{"runs": {runs}}},\n}}\n'}
    path.write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_a_rerun_keeps_the_computing_runs_time_and_other_sizes_replace_it(tmp_path):
    rn = load_script("run_notebooks", tmp_path)
    summary = tmp_path / "results" / "full" / "demo" / "summary.json"
    summary.parent.mkdir(parents=True)
    summary.write_text(json.dumps({"study": {"runs": 5}}))
    nb = notebook(tmp_path / "demo.ipynb", 5)
    runs_json = tmp_path / "figures" / "full" / "runs.json"

    rn.record_full_run("demo", nb, 7000.0, "ok")
    rn.record_full_run("demo", nb, 12.5, "ok")  # the same study again: it only redraws
    rec = json.loads(runs_json.read_text())["demo"]
    assert rec["seconds"] == 7000.0 and rec["study"] == {"runs": 5} and '"runs": 5' in rec["sizes"]
    assert [r["seconds"] for r in rec["reruns"]] == [12.5]

    rn.record_full_run("demo", notebook(nb, 9), 900.0, "ok")  # other sizes: a new first run
    rec = json.loads(runs_json.read_text())["demo"]
    assert rec["seconds"] == 900.0 and "reruns" not in rec and '"runs": 9' in rec["sizes"]


def test_a_recomputation_becomes_the_record_and_keeps_the_earlier_one(tmp_path):
    """On a machine without the rows (results/ is not committed) the same study is computed again: its time
    is the record's, and the first computation, with its redraws, is kept under ``previous``."""
    rn = load_script("run_notebooks", tmp_path)
    nb = notebook(tmp_path / "demo.ipynb", 5)
    rn.record_full_run("demo", nb, 7000.0, "ok", redraw=False)
    rn.record_full_run("demo", nb, 12.5, "ok", redraw=True)
    rn.record_full_run("demo", nb, 4000.0, "ok", redraw=False)
    rec = json.loads((tmp_path / "figures" / "full" / "runs.json").read_text())["demo"]
    assert rec["seconds"] == 4000.0 and "reruns" not in rec
    assert [(p["seconds"], [r["seconds"] for r in p["reruns"]]) for p in rec["previous"]] == [(7000.0, [12.5])]
    rn.record_full_run("demo", nb, 30.0, "failed", redraw=False)  # a failed attempt loses neither computation
    rn.record_full_run("demo", nb, 4100.0, "ok", redraw=False)
    rec = json.loads((tmp_path / "figures" / "full" / "runs.json").read_text())["demo"]
    assert rec["seconds"] == 4100.0 and [p["seconds"] for p in rec["previous"]] == [7000.0, 4000.0]


def test_a_failed_first_run_is_replaced_by_the_next(tmp_path):
    rn = load_script("run_notebooks", tmp_path)
    nb = notebook(tmp_path / "demo.ipynb", 5)
    rn.record_full_run("demo", nb, 30.0, "failed")
    rn.record_full_run("demo", nb, 8000.0, "ok")
    rec = json.loads((tmp_path / "figures" / "full" / "runs.json").read_text())["demo"]
    assert (rec["seconds"], rec["status"]) == (8000.0, "ok") and "reruns" not in rec


def test_another_seed_block_writes_nothing_where_block_0_reads():
    """``--seed 100`` moves every ``"results/…"`` default of every notebook (results, shared study and
    solver folders) under results/block100/; block 0 passes only its sizes and results folder."""
    rn = load_script("run_notebooks")
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        block0, block100 = rn.block_parameters(nb, None, True), rn.block_parameters(nb, 100, True)
        assert block0 == {"smoke": True, "results_dir": f"results/{nb.stem}"}
        assert block100["seed"] == 100 and block100["results_dir"] == f"results/block100/{nb.stem}"
        moved = {k: v for k, v in block100.items() if isinstance(v, str)}
        assert all(v.startswith("results/block100/") for v in moved.values()), moved
        assert rn.block_parameters(nb, 100, False)["results_dir"] == f"results/full/block100/{nb.stem}"
    shared = rn.block_parameters(ROOT / "notebooks" / "ee_trajectory_growth.ipynb", 100, True)
    assert shared["study_dir"] == rn.block_parameters(ROOT / "notebooks" / "ee_el_scheduler.ipynb", 100, True)["study_dir"]


def test_units_runs_only_the_notebooks_that_take_them_and_writes_apart():
    """``--units 10`` passes ``units`` to the notebooks that declare it and moves everything they write
    under results/units10/[blockN/]; the others are skipped (they have no such parameter)."""
    rn = load_script("run_notebooks")
    takes = sorted(nb.stem for nb in (ROOT / "notebooks").glob("*.ipynb") if rn.takes_units(nb))
    assert {"ee_effort", "ee_table1_directions", "ee_difficulty"} <= set(takes), takes
    nb = ROOT / "notebooks" / "ee_effort.ipynb"
    p = rn.block_parameters(nb, 100, True, 10)
    assert p["units"] == 10 and p["seed"] == 100 and p["results_dir"] == "results/units10/block100/ee_effort"
    assert p["solver_dir"] == "results/units10/block100/ee_solvers"
    p0 = rn.block_parameters(nb, None, True, 10)
    assert "seed" not in p0 and p0["results_dir"] == "results/units10/ee_effort"
    assert rn.run_folder(None, True, None) == "" and rn.run_folder(100, False, 10) == "full/units10/block100"


RECORDER = """
import pathlib, sys, time
sys.path.insert(0, sys.argv[1])
from script_support import load_script
root, prefix = pathlib.Path(sys.argv[2]), sys.argv[3]
rn = load_script("run_notebooks", root)
(root / f"ready-{prefix}").touch()
while not (root / "go").exists():  # both start recording at the same moment
    time.sleep(0.001)
for i in range(200):
    rn.record_time(f"{prefix}{i}", {"seconds": float(i)})
"""


def test_processes_recording_at_once_lose_no_entry(tmp_path):
    """Two processes merging 200 times each into the one times file, released at the same moment:
    all 400 entries are there (the read–merge–write is atomic, not only each write)."""
    import subprocess
    import sys
    import time

    procs = [subprocess.Popen([sys.executable, "-c", RECORDER, str(ROOT / "tests"), str(tmp_path), p]) for p in "ab"]
    while not all((tmp_path / f"ready-{p}").exists() for p in "ab"):
        assert all(proc.poll() is None for proc in procs), "a recorder died before it started"
        time.sleep(0.01)
    (tmp_path / "go").touch()
    assert [proc.wait(timeout=120) for proc in procs] == [0, 0]
    times = json.loads((tmp_path / "results" / "notebook_times.json").read_text())
    assert set(times) == {f"{p}{i}" for p in "ab" for i in range(200)}


def test_kernels_started_at_once_each_talk_over_sockets_of_their_own(tmp_path):
    """Three notebooks executed at once (as test workers do) each get a kernel on Unix sockets in a
    folder of its own: no TCP port to pick and lose to a neighbour, and no socket left behind."""
    from concurrent.futures import ThreadPoolExecutor

    rn = load_script("run_notebooks", tmp_path)
    cell = {"id": "probe", "cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
            "source": "import json\nfrom ipykernel.connect import get_connection_info\n"
                      "info = get_connection_info(unpack=True)\n"
                      "print(json.dumps({'transport': info['transport'], 'ip': info['ip']}))"}
    source = tmp_path / "probe.ipynb"
    source.write_text(json.dumps({"cells": [cell], "metadata": {"kernelspec": {"name": "python3"}},
                                  "nbformat": 4, "nbformat_minor": 5}))

    def run(i: int) -> dict:
        executed = tmp_path / f"probe{i}.out.ipynb"
        rn.execute(source, executed, {}, tmp_path)
        return json.loads("".join(json.loads(executed.read_text())["cells"][-1]["outputs"][0]["text"]))

    with ThreadPoolExecutor(3) as pool:
        infos = list(pool.map(run, range(3)))
    assert {i["transport"] for i in infos} == {"ipc"}
    folders = {Path(i["ip"]).parent for i in infos}
    assert len(folders) == 3 and not any(f.exists() for f in folders)
