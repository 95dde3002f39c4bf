"""A lineage browser for JupyterLab: pick a lineage and a generation, see what the edit did.

``browse(store, rows=None)`` returns an ipywidgets box: a lineage menu and a generation slider
above one panel that shows, for the chosen environment E_{i,g}: the edit (direction, effort,
changed steps), its plan (σ, κ per step, new steps marked), D_T and its three parts next to the
parent's, the verifiers' verdict, the mutation metrics, the measured pass rate and turns (when
``rows`` from :mod:`evokit.studies.evolution` are given; without them the panel says they were not
measured rather than showing empty cells), the hack gate's outcome for each verified attempt of the
edit and the lineage's hack rate per generation and direction (:func:`evokit.lineage.hack_rates`),
the edits of it that yielded no child with their cause and reasons (:meth:`LineageStore.rejections`,
so a lineage that never grew shows why), and a unified diff of the instruction, environment files and tests against the parent (for a seed,
which has no parent, its files as they are).

The panel's HTML comes from :func:`describe` (a pure function of the store), so the browser
renders in a papermill run and in tests without a live front end.
"""

from __future__ import annotations

import difflib
import html
from collections.abc import Sequence
from pathlib import Path

from evokit.lineage import EnvRecord, LineageStore, one_line

PARTS = ("total", "length_term", "scenario_term", "skill_term")
MUTATIONS = ("instruction", "environment", "verification", "total")
MAX_DIFF_LINES = 80  # per file: data files can be long
_COLOURS = {"+": "#1a7f37", "-": "#cf222e", "@": "#6639ba"}


def _files(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()} if root.is_dir() else {}


def _text(path: Path | None) -> list[str] | None:
    """Lines of a text file, [] for a missing one, None for binary content."""
    if path is None:
        return []
    data = path.read_bytes()
    if b"\0" in data[:4096]:
        return None
    try:
        return data.decode().splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def folder_diff(parent: Path | None, child: Path, parts: Sequence[str] = ("instruction.md", "environment", "tests")
                ) -> list[tuple[str, list[str]]]:
    """(file, unified diff lines) for each changed file of ``parts``; a whole child when there is no parent."""
    out = []
    for part in parts:
        a_root, b_root = (parent / part) if parent else None, child / part
        if b_root.is_file() or (a_root is not None and a_root.is_file()):
            a_files = {part: a_root} if a_root is not None and a_root.is_file() else {}
            b_files = {part: b_root} if b_root.is_file() else {}
        else:
            a_files = {f"{part}/{k}": v for k, v in _files(a_root).items()} if a_root is not None else {}
            b_files = {f"{part}/{k}": v for k, v in _files(b_root).items()}
        for name in sorted(set(a_files) | set(b_files)):
            a, b = a_files.get(name), b_files.get(name)
            if a is not None and b is not None and a.read_bytes() == b.read_bytes():
                continue
            la, lb = _text(a), _text(b)
            if la is None or lb is None:
                size = lambda p: p.stat().st_size if p else 0  # noqa: E731
                out.append((name, [f"binary file changed ({size(a)} → {size(b)} bytes)\n"]))
                continue
            lines = list(difflib.unified_diff(la, lb, f"parent/{name}", f"child/{name}", n=2))
            if len(lines) > MAX_DIFF_LINES:
                lines = lines[:MAX_DIFF_LINES] + [f"… {len(lines) - MAX_DIFF_LINES} more diff lines\n"]
            out.append((name, lines))
    return out


def _diff_html(diffs: list[tuple[str, list[str]]]) -> str:
    if not diffs:
        return "<p><i>no file differs from the parent</i></p>"
    blocks = []
    for name, lines in diffs:
        body = "".join(
            f'<span style="color:{_COLOURS[ln[0]]}">{html.escape(ln)}</span>'
            if ln[:1] in _COLOURS and not ln.startswith(("+++", "---")) else html.escape(ln)
            for ln in lines)
        blocks.append(f"<details><summary><code>{html.escape(name)}</code></summary>"
                      f"<pre style='font-size:11px;white-space:pre-wrap'>{body}</pre></details>")
    return "".join(blocks)


def _files_html(root: Path, parts: Sequence[str] = ("instruction.md", "environment", "tests")) -> str:
    """A seed's files as they are (no parent to diff against), each folded, at most MAX_DIFF_LINES lines."""
    blocks = []
    for part in parts:
        base = root / part
        files = {part: base} if base.is_file() else {f"{part}/{k}": v for k, v in _files(base).items()}
        for name, path in files.items():
            lines = _text(path)
            if lines is None:
                text = f"binary file ({path.stat().st_size} bytes)\n"
            else:
                more = len(lines) - MAX_DIFF_LINES
                text = "".join(lines[:MAX_DIFF_LINES]) + (f"… {more} more lines\n" if more > 0 else "")
            blocks.append(f"<details><summary><code>{html.escape(name)}</code></summary>"
                          f"<pre style='font-size:11px;white-space:pre-wrap'>{html.escape(text)}</pre></details>")
    return "".join(blocks) or "<p><i>no files</i></p>"


def cell_text(x) -> str:
    """A value as the panel shows it (unescaped text): "—" for a missing one, 3 significant digits for a float.
    scripts/check_browser.py compares what a real browser shows against this."""
    return "—" if x is None else f"{x:.3g}" if isinstance(x, float) else str(x)


def _fmt(x) -> str:
    return html.escape(cell_text(x))


def hack_rate_html(store: LineageStore, lineage: str) -> str:
    """The lineage's hack rate per generation and direction, as an HTML table (with the probes that
    passed children); a line saying so when no child was checked by the hack gate."""
    rates = store.hack_rates(lineage)
    if not rates:
        return "<p><b>hack rate</b>: <i>no child of this lineage went through the hack gate</i></p>"
    body = "".join(
        f"<tr><td>{r['generation']}</td><td>{html.escape(r['direction'])}</td><td>{r['checked']}</td>"
        f"<td>{r['hacked']}</td><td>{_fmt(None if r['rate'] is None else 100 * r['rate'])} %</td>"
        f"<td>{html.escape(', '.join(f'{p} ×{n}' for p, n in sorted(r['probes'].items())) or '—')}</td></tr>"
        for r in rates)
    return ("<h5>hack rate per generation and direction</h5><table><tr><th>generation</th><th>direction</th>"
            "<th>children checked</th><th>hacked</th><th>rate</th><th>probes that passed</th></tr>"
            f"{body}</table>")


def _gate_html(env: EnvRecord) -> str:
    gates = env.data.get("hack_gate")
    if not gates:
        return ""
    items = "".join(
        f"<li>attempt {g['attempt'] + 1}: "
        + ("passed" if g["passed"] else
           html.escape("FAILED: " + (", ".join(g["failed"]) or f"{g.get('errors', 0)} unscored run(s)")))
        + "</li>" for g in gates)
    return f"<p><b>hack gate</b> (each verified attempt of this edit)</p><ul>{items}</ul>"


def rejections_html(store: LineageStore, env: EnvRecord) -> str:
    """The edits of ``env`` that yielded no child (generation g + 1 grows from E_{i,g,1}): direction,
    cause and reasons of each; "" when there were none, or for a sibling k > 1 (never a parent)."""
    if env.k != 1:
        return ""
    rejected = [r for r in store.rejections(env.lineage) if r.generation == env.generation + 1]
    if not rejected:
        return ""
    body = "".join(
        f"<tr><td>{r.generation}{'' if r.k == 1 else f' (k = {r.k})'}</td><td>{html.escape(r.direction)}</td>"
        f"<td>{html.escape(r.cause)}</td><td>{html.escape(one_line('; '.join(r.reasons), 400))}</td></tr>"
        for r in rejected)
    return ("<h5>rejected edits of this environment</h5><table><tr><th>generation</th><th>direction</th>"
            f"<th>cause</th><th>reasons</th></tr>{body}</table>")


def describe(store: LineageStore, env: EnvRecord, rows: Sequence[dict] | None = None) -> str:
    """The browser's panel for one environment, as HTML."""
    by_hash = {e.content_hash: e for e in store.envs() if e.lineage == env.lineage}
    parent = by_hash.get(env.parent) if env.parent else None
    measured = {r["content_hash"]: r for r in rows or ()}
    changed = set(env.data.get("changed", []))
    head = (f"<h4>{html.escape(env.lineage)} · generation {env.generation} (k = {env.k}) · "
            f"<code>{html.escape(env.task)}</code></h4>")
    edit = ("<p><b>seed</b> (generation 0)</p>" if parent is None else
            f"<p><b>edit</b>: direction <b>{_fmt(env.direction)}</b>, effort <b>{_fmt(env.effort)}</b>, "
            f"steps changed: {sorted(c + 1 for c in changed)}; attempts {_fmt(env.data.get('attempts'))}</p>")
    plan_rows = "".join(
        f"<tr{' style=background:#fff8c5' if i in changed else ''}><td>{i + 1}</td><td>{html.escape(st['scenario'])}"
        f"</td><td>{html.escape(st['skill'])}</td><td>{_fmt(st.get('input'))}</td></tr>"
        for i, st in enumerate(env.data.get("plan", [])))
    plan = ("<table><tr><th>step</th><th>scenario σ</th><th>skill κ</th><th>reads step</th></tr>"
            f"{plan_rows}</table>")
    d, dp = env.data.get("difficulty", {}), (parent.data.get("difficulty", {}) if parent else {})
    metric_rows = [(f"D_T {p.replace('_term', '')}" if p != "total" else "D_T", dp.get(p), d.get(p)) for p in PARTS]
    if measured:  # rows given: the measured pass rate and turns (— for an environment the rows do not hold)
        m, mp = measured.get(env.content_hash, {}), measured.get(parent.content_hash, {}) if parent else {}
        label = f"pass rate ({m['rollouts']} rollouts)" if "rollouts" in m else "pass rate"
        metric_rows += [(label, mp.get("pass_rate"), m.get("pass_rate")), ("turns", mp.get("turns"), m.get("turns"))]
    if parent is None:  # a seed: one column, no parent to compare with
        metrics = "<table><tr><th></th><th>seed</th></tr>" + "".join(
            f"<tr><td>{name}</td><td>{_fmt(b)}</td></tr>" for name, _, b in metric_rows) + "</table>"
    else:
        metrics = "<table><tr><th></th><th>parent</th><th>this</th></tr>" + "".join(
            f"<tr><td>{name}</td><td>{_fmt(a)}</td><td>{_fmt(b)}</td></tr>" for name, a, b in metric_rows) + "</table>"
    if not measured:
        metrics += ("<p style='font-size:11px'><i>pass rate and turns: not measured in this run (pass the study's "
                    "rows, e.g. <code>envs.jsonl</code>, to <code>browse</code>)</i></p>")
    verdict = env.data.get("verdict")
    if verdict is None:
        ver = "<p><b>verdict</b>: seed (verified when the seed pool was made)</p>"
    else:
        fails = "".join(f"<li>{html.escape(f)}</li>" for f in verdict.get("failures", []))
        ver = (f"<p><b>verdict</b>: {'passed' if verdict.get('passed') else 'FAILED'} (oracle, null solution, "
               f"rubric{', hack gate' if env.data.get('hack_gate') else ''})</p>{f'<ul>{fails}</ul>' if fails else ''}")
    ver += _gate_html(env) + hack_rate_html(store, env.lineage) + rejections_html(store, env)
    mut = env.data.get("mutation")
    mut_html = ("<p><b>mutation</b>: " + ", ".join(f"{k} {100 * mut[k]:.0f} %" for k in MUTATIONS if k in mut) + "</p>"
                if mut else "")
    body = (head + edit + "<div style='display:flex;gap:2em'>" + f"<div>{plan}</div><div>{metrics}</div></div>"
            + ver + mut_html)
    if parent is None:  # nothing to diff a seed against: show its files as they are
        return body + "<h5>files of the seed</h5>" + _files_html(store.path(env))
    return body + "<h5>diff against the parent</h5>" + _diff_html(folder_diff(store.path(parent), store.path(env)))


def browse(store: LineageStore | str | Path, rows: Sequence[dict] | None = None, lineage: str | None = None):
    """An ipywidgets browser over ``store``'s lineages; ``rows`` (``envs.jsonl``) add pass rates.

    The returned box has ``update()`` (redraw the panel) and ``panel`` (its HTML widget).
    """
    import ipywidgets as widgets

    store = store if isinstance(store, LineageStore) else LineageStore(store)
    envs = store.envs()
    lineages = sorted({e.lineage for e in envs})
    if not lineages:
        raise ValueError(f"{store.root}: the store holds no environment yet; run evokit.evolve.evolve first")
    pick = widgets.Dropdown(options=lineages, value=lineage or lineages[0], description="lineage")
    gen = widgets.IntSlider(min=0, max=0, value=0, description="generation", continuous_update=False)
    panel = widgets.HTML()

    def chain() -> list[EnvRecord]:
        return sorted((e for e in envs if e.lineage == pick.value), key=lambda e: (e.generation, e.k))

    def update(*_):
        mine = chain()
        env = next((e for e in mine if e.generation == gen.value), mine[-1])
        panel.value = describe(store, env, rows)

    def on_lineage(*_):
        gen.max = chain()[-1].generation
        update()

    pick.observe(on_lineage, "value")
    gen.observe(update, "value")
    box = widgets.VBox([widgets.HBox([pick, gen]), panel])
    box.update, box.panel = update, panel
    on_lineage()
    return box
