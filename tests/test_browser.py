"""The lineage browser: builds without a front end, shows plan, D_T, verdict, the pass rate and turns
measured for real (solver A's rollouts in the sandbox, evokit.studies.population.measure)
and the diff against the parent (a seed's own files instead), and follows the lineage menu and slider."""

from __future__ import annotations

import re

import pytest

from evokit.browser import browse, describe, folder_diff
from evokit.evolve import EvolveConfig, evolve
from evokit.seeds import make_seeds, seed_dirs


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    seeds = tmp_path_factory.mktemp("seeds")
    make_seeds(2, 0, seeds, progress=False)
    dirs = seed_dirs(seeds)
    return evolve(dirs, tmp_path_factory.mktemp("store"), EvolveConfig(generations=2), progress=False)


@pytest.fixture(scope="module")
def rows(store, tmp_path_factory):
    """Pass rate and turns of every environment, measured: 4 sandboxed rollouts of solver A each."""
    from evokit.studies.population import load_solvers, measure

    solver_dir = tmp_path_factory.mktemp("solvers")
    tasks = {e.content_hash: store.path(e) for e in store.envs()}
    measured = measure(load_solvers(solver_dir, ["A"]), tasks, solver_dir, rollouts=4, progress=False)
    return [{"content_hash": h, **m["A"]} for h, m in measured.items()]


def fmt(x: float) -> str:
    return f"{x:.3g}"  # as the panel writes a number


def shown(html: str, label: str) -> list[str]:
    """The cells of the metrics row whose name starts with ``label``."""
    row = re.search(rf"<tr><td>{label}[^<]*</td>((?:<td>[^<]*</td>)+)</tr>", html)
    assert row, f"no {label!r} row in the panel"
    return re.findall(r"<td>([^<]*)</td>", row.group(1))


def test_panel_shows_edit_metrics_and_diff(store, rows):
    child = next(e for e in store.envs() if e.generation == 2)
    parent = next(e for e in store.envs() if e.content_hash == child.parent)
    by_hash = {r["content_hash"]: r for r in rows}
    html = describe(store, child, rows)
    assert f"generation {child.generation}" in html and child.direction in html
    assert "D_T" in html and "passed" in html  # difficulty and the verifiers' verdict
    for key in ("pass_rate", "turns"):  # the parent's and this environment's measured values, not "—"
        cells = shown(html, "pass rate" if key == "pass_rate" else "turns")
        assert cells == [fmt(by_hash[parent.content_hash][key]), fmt(by_hash[child.content_hash][key])], cells
    assert by_hash[child.content_hash]["turns"] > 0
    assert "pass rate (4 rollouts)" in html and "not measured" not in html
    assert "diff against the parent" in html and "parent/instruction.md" in html  # a unified diff
    assert all(st["skill"] in html for st in child.data["plan"])


def test_seed_panel_has_no_parent(store, rows):
    seed = next(e for e in store.envs() if e.generation == 0)
    html = describe(store, seed, rows)
    assert "seed" in html and "diff against the parent" not in html and "parent/" not in html
    assert "files of the seed" in html and "instruction.md" in html  # its own files instead
    assert "<th>parent</th>" not in html  # one column: there is no parent to compare with
    measured = next(r for r in rows if r["content_hash"] == seed.content_hash)
    assert shown(html, "pass rate") == [fmt(measured["pass_rate"])]
    diffs = folder_diff(None, store.path(seed))
    assert any(name == "instruction.md" for name, _ in diffs)  # folder_diff still shows a whole folder as added


def test_without_rows_the_panel_says_not_measured(store):
    child = next(e for e in store.envs() if e.generation == 1)
    html = describe(store, child)
    assert "not measured" in html and "<td>pass rate" not in html and "<td>turns" not in html


def test_widget_follows_menu_and_slider(store):
    box = browse(store)
    menu, slider = box.children[0].children
    assert menu.options == tuple(store.lineages())
    first = box.panel.value
    slider.value = slider.max
    assert box.panel.value != first and f"generation {slider.max}" in box.panel.value
    menu.value = menu.options[-1]
    box.update()
    assert menu.value in box.panel.value


def test_panel_lists_the_rejected_edits_of_an_environment(store, tmp_path):
    """The store extended to 5 generations holds rejected directions (the procedural proposer's edits
    run out); the panel of each rejection's parent lists its direction, cause and reasons."""
    import html
    import shutil

    from evokit.lineage import LineageStore

    shutil.copytree(store.root, tmp_path / "s")
    seeds = [e.data["seed_dir"] for e in store.envs() if e.generation == 0]
    grown = evolve(seeds, LineageStore(tmp_path / "s"), EvolveConfig(generations=5), progress=False)
    rejected = grown.rejections()
    assert rejected, "the 5-generation run of these seeds is known to reject a direction"
    for r in rejected:
        parent = next(e for e in grown.envs() if (e.lineage, e.generation, e.k) == (r.lineage, r.generation - 1, 1))
        panel = describe(grown, parent)
        assert "rejected edits of this environment" in panel
        row = f"<td>{html.escape(r.direction)}</td><td>{html.escape(r.cause)}</td>"
        assert row in panel and html.escape(" ".join(r.reasons[0].split())[:100]) in panel, panel
    quiet = next(e for e in grown.envs() if e.generation == 0)
    assert ("rejected edits" in describe(grown, quiet)) == any(r.generation == 1 and r.lineage == quiet.lineage
                                                               for r in rejected)


def test_empty_store_is_an_error(tmp_path):
    from evokit.lineage import LineageStore

    with pytest.raises(ValueError, match="no environment"):
        browse(LineageStore(tmp_path / "empty"))
