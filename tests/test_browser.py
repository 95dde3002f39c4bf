"""The lineage browser: builds without a front end, shows plan, D_T, verdict, pass rate and the diff
against the parent, and follows the lineage menu and generation slider."""

from __future__ import annotations

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


def test_panel_shows_edit_metrics_and_diff(store):
    child = next(e for e in store.envs() if e.generation == 2)
    parent = next(e for e in store.envs() if e.content_hash == child.parent)
    rows = [{"content_hash": child.content_hash, "pass_rate": 0.125, "turns": 3.0},
            {"content_hash": parent.content_hash, "pass_rate": 0.5, "turns": 2.0}]
    html = describe(store, child, rows)
    assert f"generation {child.generation}" in html and child.direction in html
    assert "D_T" in html and "0.125" in html and "0.5" in html  # this and the parent's pass rate
    assert "passed" in html  # the verifiers' verdict
    assert "parent/instruction.md" in html  # a unified diff of the instruction against the parent
    assert all(st["skill"] in html for st in child.data["plan"])


def test_seed_panel_has_no_parent(store):
    seed = next(e for e in store.envs() if e.generation == 0)
    html = describe(store, seed)
    assert "seed" in html and "—" in html  # no pass rate without rows, no parent values
    diffs = folder_diff(None, store.path(seed))
    assert any(name == "instruction.md" for name, _ in diffs)  # the whole seed shows as added


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


def test_empty_store_is_an_error(tmp_path):
    from evokit.lineage import LineageStore

    with pytest.raises(ValueError, match="no environment"):
        browse(LineageStore(tmp_path / "empty"))
