#!/usr/bin/env python
"""Check the lineage browser in a real browser: JupyterLab + headless Chromium, no JS errors.

    .venv/bin/python scripts/check_browser.py [--out results/browser_check]   (or: make check-browser)

``evokit.browser.browse`` is unit-tested without a front end (tests/test_browser.py checks the
panel's HTML and the widget's Python side). What those tests cannot see is whether the widgets
render and respond in JupyterLab: the ipywidgets front end must load, the comm to the kernel must
carry the slider's and menu's changes there and the new panel back, and the page must raise no
JavaScript error. This script checks exactly that, for real:

1. builds a small lineage store with evokit's own pipeline (2 verified seeds, 2 generations of
   evolution) and measures every environment's pass rate and turns (4 sandboxed rollouts of an
   untrained learner, as tests/test_browser.py does), so the panel has real numbers to show;
2. writes a one-cell notebook that calls ``browse(store, rows)`` and starts ``jupyter lab`` on it
   (127.0.0.1, a fixed token, its own config, runtime and settings folders under ``--out``);
3. opens the notebook in Debian's Chromium (headless, through /usr/bin/chromedriver; never
   selenium-manager or the network), runs all cells with JupyterLab's own command, waits for the
   widget, checks the seed panel, moves the generation slider with the keyboard and picks the other
   lineage in the menu, checking after each that the panel shows that environment's generation,
   D_T, measured pass rate and turns (and the diff against the parent only where there is one);
4. fails on any SEVERE entry of the browser console (see ``BENIGN``).

It prints one verdict line per check, writes ``report.json`` and screenshots into ``--out`` and
exits 1 if a check failed, 2 if Chromium, chromedriver or selenium is missing. Jupyter, the kernel,
chromedriver and Chromium are stopped on every exit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # build the store with this checkout's evokit, as the kernel imports it
CHROMEDRIVER = "/usr/bin/chromedriver"  # Debian's chromium-driver, matched to its chromium
CHROMIUM = "/usr/bin/chromium"
INSTALL_HINT = "apt-get install -y chromium chromium-driver"
TOKEN = "evokit-browser-check"  # fixed: the server listens on 127.0.0.1 only, for the length of one run
NOTEBOOK = "browser_check.ipynb"
PANEL = ".jp-OutputArea-output .widget-html-content"
# Console entries at level SEVERE that say nothing about the page's code. Only Chromium's automatic
# /favicon.ico request: JupyterLab serves its favicon from /static/favicons/, and a 404 for the
# default path is the browser guessing, not a failed resource of the app.
BENIGN = ("favicon.ico",)


class CheckError(RuntimeError):
    """A check that cannot go on (the server did not start, the widget never rendered)."""


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    seconds: float


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    console: list[dict] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    expected: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, ok: bool, detail: str, started: float) -> bool:
        check = Check(name, ok, detail, round(time.monotonic() - started, 2))
        self.checks.append(check)
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail} ({check.seconds:.1f} s)", flush=True)
        return ok


# ------------------------------------------------------------------------------ prerequisites
def missing_tools(browser: str, driver: str) -> str | None:
    """One line saying what to install, or None when Chromium, chromedriver and selenium are there."""
    absent = [p for p in (browser, driver) if not os.access(p, os.X_OK)]
    if absent:
        return f"check_browser: {' and '.join(absent)} not found; install them with: {INSTALL_HINT}"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return (f"check_browser: selenium is missing from {sys.prefix}; install it with: "
                f"{sys.executable} -m pip install selenium (or scripts/setup.sh dev,notebooks,browser)")
    return None


# ------------------------------------------------------------------------------ the store
def build_store(work: Path, measure_rows: bool) -> tuple[Path, Path | None, dict[str, list[dict]]]:
    """A real store (2 seeds × 2 generations), its measured rows, and per lineage what each
    generation's panel must show. The cheapest run of the pipeline that still has a parent to
    diff against and two lineages to switch between."""
    from evokit.browser import cell_text as fmt
    from evokit.evolve import EvolveConfig, evolve
    from evokit.seeds import make_seeds, seed_dirs

    make_seeds(2, 0, work / "seeds", progress=False)
    store = evolve(seed_dirs(work / "seeds"), work / "store", EvolveConfig(generations=2), progress=False)
    rows_path, measured = None, {}
    if measure_rows:
        from evokit.rows import append_rows
        from evokit.studies.population import load_solvers, measure

        tasks = {e.content_hash: store.path(e) for e in store.envs()}
        by_solver = measure(load_solvers(work / "solvers", ["A"]), tasks, work / "solvers", rollouts=4, progress=False)
        measured = {h: {"content_hash": h, **m["A"]} for h, m in by_solver.items()}
        rows_path = work / "rows.jsonl"
        append_rows(rows_path, list(measured.values()))
    by_hash = {e.content_hash: e for e in store.envs()}
    expected: dict[str, list[dict]] = {}
    for env in sorted(store.envs(), key=lambda e: (e.lineage, e.generation, e.k)):
        chain = [by_hash[env.parent], env] if env.parent else [env]  # the panel's columns: parent, this
        cells = {"D_T": [fmt(e.data.get("difficulty", {}).get("total")) for e in chain]}
        if measure_rows:
            cells["pass rate (4 rollouts)"] = [fmt(measured[e.content_hash]["pass_rate"]) for e in chain]
            cells["turns"] = [fmt(measured[e.content_hash]["turns"]) for e in chain]
        expected.setdefault(env.lineage, []).append({
            "generation": env.generation,
            "header": f"{env.lineage} · generation {env.generation} (k = {env.k}) · {env.task}",
            "seed": env.parent is None,
            "measured": measure_rows,
            "cells": cells,
        })
    return store.root, rows_path, expected


def write_notebook(out: Path, store: Path, rows: Path | None) -> Path:
    """A one-cell notebook that browses ``store`` and prints where evokit was imported from (so the
    check can tell that the kernel runs this checkout's evokit, not another installed copy)."""
    import nbformat

    source = "\n".join([
        "import evokit",
        "from evokit.browser import browse",
        "from evokit.rows import read_rows",
        "",
        f"rows = read_rows({str(rows)!r})" if rows else "rows = None",
        "print('evokit from', evokit.__file__)",
        f"browse({str(store)!r}, rows)",
    ])
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = out / NOTEBOOK
    nbformat.write(nb, path)
    return path


# ------------------------------------------------------------------------------ processes
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_marked(marker: str) -> list[int]:
    """Kill (by pid) every process whose command line holds ``marker``, a path unique to this run:
    what a crashed Jupyter or chromedriver may leave behind (a kernel, Chromium's helpers)."""
    killed = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker in (proc / "cmdline").read_bytes().decode(errors="replace"):
                os.kill(int(proc.name), signal.SIGKILL)
                killed.append(int(proc.name))
        except (OSError, ProcessLookupError):
            continue
    return killed


@contextmanager
def jupyter_lab(out: Path, work: Path, port: int, timeout: float) -> Iterator[str]:
    """``jupyter lab`` on ``out`` at 127.0.0.1:``port``; yields its base URL once /api/status answers.

    Config, settings, workspaces, runtime and IPython folders live under ``work``: the check neither
    reads a user's JupyterLab settings nor leaves a workspace behind, and every process it starts
    names ``work`` in its command line (the kernel through its connection file)."""
    env = {**os.environ, "HARBOR_TELEMETRY": "0", "JUPYTER_CONFIG_DIR": str(work / "jupyter-config"),
           "JUPYTER_RUNTIME_DIR": str(work / "jupyter-runtime"), "IPYTHONDIR": str(work / "ipython"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           "--ServerApp.port_retries=0", f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={out}",
           "--LabApp.expose_app_in_browser=True",
  # window.jupyterapp: run all cells by JupyterLab's command
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]  # no network from the server
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    write_lab_settings(work / "jupyter-config")
    log = (out / "jupyter.log").open("w")
    proc = subprocess.Popen(cmd, cwd=out, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_server(proc, base, out / "jupyter.log", timeout)
        yield base
    finally:
        stop_group(proc)
        log.close()
        kill_marked(str(work))


def write_lab_settings(config: Path) -> None:
    """Answer JupyterLab's news opt-in with 'never' (as a user clicking No): no request to the news feed
    and no prompt over the page in the screenshots."""
    path = config / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"fetchNews": "false"}) + "\n")


def wait_for_server(proc: subprocess.Popen, base: str, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").splitlines()[-15:]
            raise CheckError(f"jupyter lab exited with {proc.returncode}:\n" + "\n".join(tail))
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise CheckError(f"jupyter lab did not answer at {base} within {timeout:.0f} s (log: {log})")


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group (it shuts its kernels down), SIGKILL after 15 s."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    except ProcessLookupError:
        pass


@contextmanager
def chromium(work: Path, out: Path, browser: str, driver_path: str) -> Iterator[Any]:
    """A headless Chromium driven through Debian's chromedriver, console logged at level ALL."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # selenium-manager must never run (it would go to the network)
    profile = work / "chromium-profile"
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1100", f"--user-data-dir={profile}", "--no-first-run"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=driver_path, log_output=str(out / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=opts)
    try:
        yield driver
    finally:
        try:
            driver.quit()
        finally:
            service.stop()
            kill_marked(str(profile))


# ------------------------------------------------------------------------------ the page
def wait_until(what: str, fn: Callable[[], Any], timeout: float, every: float = 0.5) -> Any:
    """Poll ``fn`` until it returns something truthy; CheckError naming ``what`` on timeout."""
    deadline, last_error = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            value = fn()
            if value:
                return value
        except Exception as e:  # the page is still loading: a stale element, a script on a half-built DOM
            last_error = e
        time.sleep(every)
    raise CheckError(f"timed out after {timeout:.0f} s waiting for {what}"
                     + (f" (last error: {type(last_error).__name__}: {last_error})" if last_error else ""))


KERNEL_STATUS = """
const app = window.jupyterapp; const w = app && app.shell.currentWidget;
if (!w || !w.sessionContext || !w.content || !w.content.widgets) return null;
const k = w.sessionContext.session && w.sessionContext.session.kernel;
return k ? k.status : null;"""

PANEL_STATE = """
const p = document.querySelector(arguments[0]);
if (!p || !p.querySelector('h4')) return null;
const rows = {};
for (const tr of p.querySelectorAll('tr')) {
  const cells = [...tr.children].map(c => c.textContent.trim());
  if (cells.length > 1 && tr.firstElementChild.tagName === 'TD') rows[cells[0]] = cells.slice(1);
}
const slider = document.querySelector('.jp-OutputArea-output .widget-slider .widget-readout');
const menu = document.querySelector('.jp-OutputArea-output .widget-dropdown select');
return {header: p.querySelector('h4').textContent.trim(), text: p.innerText, rows: rows,
        slider: slider ? slider.textContent.trim() : null, menu: menu ? menu.value : null};"""


def panel_state(driver: Any) -> dict | None:
    return driver.execute_script(PANEL_STATE, PANEL)


def panel_problems(state: dict, want: dict) -> list[str]:
    """What the shown panel gets wrong about environment ``want`` ([] when it is right)."""
    problems = []
    if state["header"] != want["header"]:
        problems.append(f"header {state['header']!r}, expected {want['header']!r}")
    if state["slider"] != str(want["generation"]):
        problems.append(f"slider reads {state['slider']!r}, expected {want['generation']}")
    for label, cells in want["cells"].items():
        if state["rows"].get(label) != cells:
            problems.append(f"row {label!r} shows {state['rows'].get(label)}, expected {cells}")
    if not want["measured"] and "not measured" not in state["text"]:
        problems.append("without rows the panel must say that pass rate and turns were not measured")
    has_diff = "diff against the parent" in state["text"]
    if want["seed"] and (has_diff or "files of the seed" not in state["text"]):
        problems.append("a seed's panel must list its files and show no diff against a parent")
    if not want["seed"] and not has_diff:
        problems.append("an evolved environment's panel must show the diff against its parent")
    return problems


def wait_for_panel(driver: Any, want: dict, timeout: float) -> dict:
    """The panel's state once it shows ``want`` (the kernel answers a change asynchronously)."""
    seen: dict = {}

    def right() -> dict | None:
        state = panel_state(driver)
        seen["state"] = state
        return state if state and not panel_problems(state, want) else None

    try:
        return wait_until(f"the panel of {want['header']}", right, timeout)
    except CheckError as e:
        state = seen.get("state")
        raise CheckError(f"{e}: " + ("; ".join(panel_problems(state, want)) if state else "no panel")) from None


def shown_cells(want: dict) -> str:
    """``want``'s rows as a verdict line writes them: 'D_T 13 → 32.6' (parent → this) or 'D_T 12.6'."""
    return ", ".join(f"{label} {' → '.join(cells)}" for label, cells in want["cells"].items())


def shoot(driver: Any, path: Path) -> str:
    driver.save_screenshot(str(path))
    return str(path)


# ------------------------------------------------------------------------------ the checks
def open_and_run(driver: Any, base: str, report: Report, timeout: float) -> None:
    """Open the notebook, wait for its kernel, run all cells; checks 'page' and 'widget renders'."""
    t = time.monotonic()
    driver.get(f"{base}/lab/tree/{NOTEBOOK}?token={TOKEN}&reset")
    status = wait_until("the notebook's kernel to be idle",
                        lambda: driver.execute_script(KERNEL_STATUS) == "idle", timeout)
    report.timings["lab_open_s"] = round(time.monotonic() - t, 2)
    report.add("lab opens the notebook", bool(status), "JupyterLab loaded, kernel python3 idle", t)

    t = time.monotonic()
    driver.execute_script("return window.jupyterapp.commands.execute('notebook:run-all-cells')")
    wait_until("the browser widget to render", lambda: panel_state(driver), timeout)
    report.timings["widget_render_s"] = round(time.monotonic() - t, 2)
    found = driver.execute_script("""return [
        !!document.querySelector('.jp-OutputArea-output .widget-dropdown select'),
        !!document.querySelector('.jp-OutputArea-output .widget-slider .noUi-handle'),
        !!document.querySelector(arguments[0]),
        document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').length,
        [...document.querySelectorAll('.jp-OutputArea-output')].map(o => o.innerText).join('\\n')]""", PANEL)
    menu, slider, panel, stderr, text = found
    errors = [f"{stderr} stderr/error outputs"] if stderr else []
    errors += ["Error displaying widget"] if "Error displaying widget" in text else []
    from_here = f"evokit from {ROOT / 'evokit'}" in text
    report.add("widget renders", menu and slider and panel and not errors and from_here,
               f"menu {menu}, slider {slider}, panel {panel}; error text {errors or 'none'}; "
               f"kernel imports evokit from this checkout: {from_here}", t)


def check_panels(driver: Any, out: Path, report: Report, expected: dict[str, list[dict]], timeout: float) -> None:
    """Seed panel, then the slider to the last generation, then the other lineage."""
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    lineages = sorted(expected)
    first, other = expected[lineages[0]], expected[lineages[-1]]
    shots = report.expected.setdefault("screenshots", [])

    t = time.monotonic()
    before = wait_for_panel(driver, first[0], timeout)
    shots.append(shoot(driver, out / "1_seed.png"))
    report.add("seed panel", True, f"{before['header']!r}: {shown_cells(first[0])}; its files, no diff against a parent", t)

    t = time.monotonic()
    handle = driver.find_element("css selector", ".jp-OutputArea-output .widget-slider .noUi-handle")
    handle.click()
    for _ in range(first[-1]["generation"]):  # one step per key press, as a user would move it
        handle.send_keys(Keys.ARROW_RIGHT)
    after = wait_for_panel(driver, first[-1], timeout)
    report.timings["slider_response_s"] = round(time.monotonic() - t, 2)
    shots.append(shoot(driver, out / "2_slider_last_generation.png"))
    report.add("slider changes the panel", after["text"] != before["text"],
               f"{after['header']!r}: {shown_cells(first[-1])}; diff against the parent", t)

    t = time.monotonic()
    Select(driver.find_element("css selector", ".jp-OutputArea-output .widget-dropdown select")
           ).select_by_value(lineages[-1])
    want = next(e for e in other if e["generation"] == first[-1]["generation"])
    switched = wait_for_panel(driver, want, timeout)
    report.timings["menu_response_s"] = round(time.monotonic() - t, 2)
    shots.append(shoot(driver, out / "3_other_lineage.png"))
    report.add("menu changes the lineage", switched["menu"] == lineages[-1] and lineages[0] != lineages[-1],
               f"{switched['header']!r}: {shown_cells(want)}", t)


def check_console(driver: Any, report: Report) -> None:
    t = time.monotonic()
    report.console.extend(driver.get_log("browser"))
    severe = [e for e in report.console if e.get("level") == "SEVERE"]
    real = [e for e in severe if not any(b in e.get("message", "") for b in BENIGN)]
    levels = Counter(e.get("level", "?") for e in report.console)
    detail = (f"{len(report.console)} console entries ({', '.join(f'{n} {lv}' for lv, n in levels.most_common())}); "
              f"{len(severe)} SEVERE, {len(severe) - len(real)} of them benign ({', '.join(BENIGN)})")
    if real:
        detail += "; " + " | ".join(e["message"][:300] for e in real[:5])
    report.add("no console errors", not real, detail, t)


def run_checks(out: Path, work: Path, report: Report, timeout: float, measure_rows: bool,
               tools: tuple[str, str]) -> None:
    t = time.monotonic()
    store, rows, expected = build_store(work, measure_rows)
    report.expected["panels"] = expected
    report.timings["store_s"] = round(time.monotonic() - t, 2)
    report.add("store built", len(expected) == 2 and all(len(v) == 3 for v in expected.values()),
               f"{len(expected)} lineages × {len(next(iter(expected.values())))} generations"
               + (", pass rate and turns measured (4 rollouts each)" if rows else ", rows not measured"), t)
    write_notebook(out, store, rows)
    t = time.monotonic()
    with jupyter_lab(out, work, free_port(), timeout) as base:
        report.timings["jupyter_start_s"] = round(time.monotonic() - t, 2)
        t = time.monotonic()
        with chromium(work, out, *tools) as driver:
            report.timings["chromium_start_s"] = round(time.monotonic() - t, 2)
            browser_session(driver, base, out, report, expected, timeout)
            t = time.monotonic()  # from here: quitting Chromium, then stopping Jupyter and its kernel
    report.timings["teardown_s"] = round(time.monotonic() - t, 2)


def browser_session(driver: Any, base: str, out: Path, report: Report, expected: dict[str, list[dict]],
                    timeout: float) -> None:
    """Every check in the page; a step that cannot go on fails one check, and the console is read anyway."""
    report.versions["chromium"] = driver.capabilities.get("browserVersion", "?")
    report.versions["chromedriver"] = driver.capabilities.get("chrome", {}).get("chromedriverVersion", "?")
    t = time.monotonic()
    try:
        open_and_run(driver, base, report, timeout)
        check_panels(driver, out, report, expected, timeout)
    except CheckError as e:
        shoot(driver, out / "failure.png")
        report.add("browser session", False, str(e), t)
    finally:
        check_console(driver, report)


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {pkg: version(pkg) for pkg in ("jupyterlab", "ipywidgets", "jupyterlab_widgets", "selenium")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "browser_check",
                    help="folder for the notebook, screenshots and report.json (default: results/browser_check)")
    ap.add_argument("--timeout", type=float, default=240,
                    help="seconds to wait for each step (the server, the page, the widget, each change)")
    ap.add_argument("--no-measure", action="store_true",
                    help="skip measuring pass rates (needs evokit's sandbox); the panel then says 'not measured'")
    ap.add_argument("--chromium", default=CHROMIUM, help=f"the browser (default: {CHROMIUM})")
    ap.add_argument("--chromedriver", default=CHROMEDRIVER, help=f"its driver (default: {CHROMEDRIVER})")
    args = ap.parse_args(argv)
    if (hint := missing_tools(args.chromium, args.chromedriver)) is not None:
        print(hint, file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: stop Jupyter and Chromium
    out = args.out.resolve()
    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)  # a fresh store each run: evolve would resume an old one
    work.mkdir(parents=True)
    for old in [*out.glob("*.png"), out / "report.json"]:  # a failed run must not leave a passing run's files
        old.unlink(missing_ok=True)
    report, t0 = Report(versions=versions()), time.monotonic()
    try:
        run_checks(out, work, report, args.timeout, not args.no_measure, (args.chromium, args.chromedriver))
    except CheckError as e:
        report.add("setup", False, str(e), t0)
    finally:
        report.timings["total_s"] = round(time.monotonic() - t0, 2)
        (out / "report.json").write_text(json.dumps(asdict(report), indent=2, ensure_ascii=False) + "\n")
    failed = [c.name for c in report.checks if not c.ok]
    print(f"{'FAIL' if failed else 'PASS'}  browser check: {len(report.checks) - len(failed)}/{len(report.checks)} "
          f"checks passed in {report.timings['total_s']:.0f} s; report {out / 'report.json'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
