#!/usr/bin/env python
"""Run the notebooks with papermill: each ``notebooks/<name>.ipynb`` → ``runs/notebooks/<name>.ipynb``.

    python scripts/run_notebooks.py                  # every notebook, smoke sizes
    python scripts/run_notebooks.py ee_effort        # the named ones (with or without .ipynb)
    python scripts/run_notebooks.py --full           # the papers' sizes (hours to days)
    python scripts/run_notebooks.py --seed 100       # another seed block, into results/block100/
    python scripts/run_notebooks.py --units 10       # the registered number of units, into results/units10/

Each notebook runs with kernel ``python3`` in the repository root, with ``-p smoke True|False``
and ``-p results_dir results/<name>`` (smoke) or ``results/full/<name>`` (full), so that a full run
never mixes its rows with a smoke run's. ``--seed N`` (N ≠ 0) runs seed block N (``-p seed N``)
with everything it writes under ``results/blockN/`` (``results/full/blockN/``): its results, every
shared study folder (each parameter whose default is a ``"results/…"`` path moves there) and its
figures, so another block never reuses block 0's rows or redraws the committed figures.
``--units N`` runs the notebooks that take a ``units`` parameter (independent units of replication:
evolution seeds) with N of them, everything under ``results/unitsN/`` in the same way, and skips the
others: smoke sizes keep ``make check`` within its time, the registered size (docs/preregistration.md:
10 units) gives the claims a verdict.
A full run draws its figures into ``figures/full/``
(``EVOKIT_FIGURES``), beside the smoke figures, and records each notebook's wall time, status and
sizes (the executed notebook's ``SIZES["full"]`` cell as run) in ``figures/full/runs.json``, which
is committed with the figures (a rerun that only redraws a finished study goes to its ``reruns``).
The script prints each notebook's wall time, writes them to ``results/notebook_times.json`` (merged with earlier runs) and exits non-zero if any notebook
failed (the executed copy keeps the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def kernel_config(sockets: str):
    """The kernel settings every notebook run uses: Unix sockets in the folder ``sockets``, not TCP.

    A TCP kernel's ports are picked free and released before the kernel binds them, so a kernel
    started beside another (the test workers, a sandbox or endpoint connecting at that moment) can
    lose a port and die with "Address already in use". A private socket folder cannot collide."""
    from traitlets.config import Config

    return Config({"KernelManager": {"transport": "ipc", "ip": f"{sockets}/kernel"}})


def execute(notebook: Path, executed: Path, parameters: dict, cwd: Path, **options) -> None:
    """Execute ``notebook`` into ``executed`` with papermill (kernel ``python3`` in ``cwd``, on
    :func:`kernel_config`'s sockets in a temporary folder)."""
    import papermill as pm

    with tempfile.TemporaryDirectory(prefix="evokit-kernel-") as sockets:
        pm.execute_notebook(str(notebook), str(executed), parameters=parameters, kernel_name="python3",
                            cwd=str(cwd), progress_bar=False, config=kernel_config(sockets), **options)


def notebook_paths(names: list[str]) -> list[Path]:
    if not names:
        return sorted((ROOT / "notebooks").glob("*.ipynb"))
    paths = []
    for name in names:
        p = ROOT / "notebooks" / (name if name.endswith(".ipynb") else f"{name}.ipynb")
        if not p.exists():
            sys.exit(f"run_notebooks: {p} does not exist (notebooks: "
                     f"{', '.join(q.stem for q in sorted((ROOT / 'notebooks').glob('*.ipynb')))})")
        paths.append(p)
    return paths


def full_sizes(notebook: Path) -> str:
    """The notebook's sizes cell as written (the ``SIZES = {...}`` literal), so a full run records what it ran."""
    nb = json.loads(notebook.read_text())
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and "SIZES = " in src:
            start = src.index("SIZES = ")
            lines = src[start:].splitlines()
            end = next((i for i, line in enumerate(lines[1:], 1) if line.startswith("}")), 0)
            return "\n".join(lines[:end + 1])
    return ""


def run_folder(seed: int | None, smoke: bool, units: int | None = None) -> str:
    """The folder under ``results/`` a run writes to: ``[full/][units<N>/][block<seed>]`` ("" for block 0 at smoke size)."""
    return "/".join(filter(None, ("" if smoke else "full", f"units{units}" if units else "",
                                  f"block{seed}" if seed else "")))


def block_parameters(notebook: Path, seed: int | None, smoke: bool, units: int | None = None) -> dict:
    """The papermill parameters of one run: sizes, results folder, and for seed block ``seed`` (not 0)
    or ``units`` the seed, the units and every ``"results/…"`` default moved under
    ``results/[units<N>/]block<seed>/`` (module docstring)."""
    import papermill as pm

    smoke_or_full = "results" if smoke else "results/full"
    moved = run_folder(seed, True, units)  # what is moved, beside the smoke/full split of results_dir
    params: dict = {"smoke": smoke, "results_dir": "/".join(filter(None, (smoke_or_full, moved, notebook.stem)))}
    if seed:
        params["seed"] = seed
    if units:
        params["units"] = units
    if moved:
        for name, p in pm.inspect_notebook(str(notebook)).items():
            default = str(p.get("default", ""))
            if name != "results_dir" and default.startswith('"results/'):
                params[name] = f"results/{moved}/{default.strip(chr(34))[len('results/'):]}"
    return params


def takes_units(notebook: Path) -> bool:
    """Whether the notebook has a ``units`` parameter (a number of independent units it can be run with)."""
    import papermill as pm

    return "units" in pm.inspect_notebook(str(notebook))


def record_time(key: str, entry: dict) -> Path:
    """Merge one notebook's time into ``results/notebook_times.json``: read, merge and replace under an
    exclusive ``flock`` on a lock file beside it, so that runs in parallel processes keep each other's
    entries (a read–write without the lock loses the entry another process wrote in between)."""
    import fcntl

    path = ROOT / "results" / "notebook_times.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(".notebook_times.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when the process dies
        times = json.loads(path.read_text()) if path.exists() else {}
        times[key] = entry
        tmp = path.with_name(f".notebook_times.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(times, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)
    return path


def record_full_run(name: str, notebook: Path, seconds: float, status: str, *, redraw: bool = True) -> None:
    """Merge one full run into ``figures/full/runs.json``: wall time, status, host cores, the sizes cell,
    and the study config the run recorded in its ``summary.json`` (where the sizes cell only names one).

    A full study resumes from its rows, so running a finished notebook again (e.g. to redraw a figure)
    takes seconds: such a run (``redraw``: its summary was there before it ran), with the same sizes and
    study, is appended to ``reruns`` and the first successful run's time, the one that computed the rows,
    stays. A run that computed the rows again (``redraw=False``: on a machine without them, since
    ``results/`` is not committed) becomes the record, the earlier one kept under ``previous``, so
    both computations' times are on file. Other sizes start a new record.
    """
    path = ROOT / "figures" / "full" / "runs.json"
    runs = json.loads(path.read_text()) if path.exists() else {}
    summary = ROOT / "results" / "full" / name / "summary.json"
    study = json.loads(summary.read_text()).get("study") if summary.exists() else None
    now = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    sizes, old = full_sizes(notebook), runs.get(name)
    same = old is not None and old.get("status") == "ok" and (old.get("sizes"), old.get("study")) == (sizes, study)
    if same and redraw:
        old.setdefault("reruns", []).append({"finished": now, "seconds": seconds, "status": status})
    else:
        runs[name] = {"seconds": seconds, "status": status, "cpus": os.cpu_count(), "finished": now,
                      "results_dir": f"results/full/{name}", "sizes": sizes, "study": study}
        if old is not None and (old.get("sizes"), old.get("study")) == (sizes, study):
            earlier = old.pop("previous", [])  # computed again: the earlier computations stay on file
            if old.get("status") == "ok":
                earlier.append(old)
            if earlier:
                runs[name]["previous"] = earlier
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(runs, indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="notebook names (default: every notebook in notebooks/)")
    ap.add_argument("--full", action="store_true", help="the papers' sizes instead of smoke sizes")
    ap.add_argument("--out", default="runs/notebooks", help="where the executed notebooks go")
    ap.add_argument("--timeout", type=int, default=None, help="per-cell timeout in seconds (default: none)")
    ap.add_argument("--seed", type=int, default=None,
                    help="seed block N: seeds N..N+4, everything under results/blockN/ (default: block 0)")
    ap.add_argument("--units", type=int, default=None,
                    help="run the notebooks that take `units` with N units, under results/unitsN/ (others are skipped)")
    args = ap.parse_args(argv)
    if args.units is not None and args.units < 2:
        print(f"run_notebooks: --units {args.units}: an interval needs at least 2 units", file=sys.stderr)
        return 2

    os.environ.setdefault("HARBOR_TELEMETRY", "0")
    os.environ.setdefault("MPLBACKEND", "Agg")
    smoke = not args.full
    block = run_folder(args.seed, smoke, args.units)
    if args.seed or args.units:
        os.environ["EVOKIT_FIGURES"] = f"results/{block}/figures"
    elif not smoke:
        os.environ["EVOKIT_FIGURES"] = "figures/full"
    out_dir = ROOT / args.out
    out_dir.mkdir(parents=True, exist_ok=True)
    failed = []
    paths = notebook_paths(args.names)
    if args.units:
        skipped = [p.stem for p in paths if not takes_units(p)]
        paths = [p for p in paths if takes_units(p)]
        if skipped:
            print(f"--units {args.units}: skipping {', '.join(skipped)} (no `units` parameter)", flush=True)
    times_path = ROOT / "results" / "notebook_times.json"
    for i, path in enumerate(paths, 1):
        name = path.stem
        params = block_parameters(path, args.seed, smoke, args.units)
        results_dir = params["results_dir"]
        print(f"[{i}/{len(paths)}] {name} (smoke={smoke}, results_dir={results_dir}) …", flush=True)
        redraw = (ROOT / results_dir / "summary.json").exists()  # a finished study: this run only redraws
        t0 = time.monotonic()
        executed = out_dir / block.removeprefix("full").strip("/") / path.name
        executed.parent.mkdir(parents=True, exist_ok=True)
        try:
            execute(path, executed, params, ROOT, log_output=False, execution_timeout=args.timeout)
            status = "ok"
        except Exception as e:  # papermill raises PapermillExecutionError with the failing cell
            status = "failed"
            failed.append(name)
            print(f"    FAILED: {type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}",
                  flush=True)
            print(f"    the executed notebook with its traceback: {executed}", flush=True)
        seconds = round(time.monotonic() - t0, 1)
        print(f"    {status} in {seconds:.0f} s", flush=True)
        tags = [t for t in ("full" if not smoke else "", f"units{args.units}" if args.units else "",
                            f"block{args.seed}" if args.seed else "") if t]
        record_time(name + "".join(f" ({t})" for t in tags), {"seconds": seconds, "status": status, "smoke": smoke})
        if not smoke and not args.seed and not args.units:
            record_full_run(name, path, seconds, status, redraw=redraw)
    print(f"{len(paths) - len(failed)}/{len(paths)} notebooks ran; times in {times_path.relative_to(ROOT)}")
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
