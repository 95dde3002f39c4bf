"""evokit.paths: notebooks write results/ and figures/ at the repository root wherever they are opened from.

The papermill test opens a real notebook (``genenv_theory``, pure math, seconds) from the ``notebooks/``
folder of a checkout made in a temporary folder, as JupyterLab does, with no ``EVOKIT_FIGURES`` or
``EVOKIT_ROOT``, and looks where its files landed (marked ``notebooks``: a kernel start and a run, ~1 min).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evokit.paths import at_root, figures_dir, repo_root

ROOT = Path(__file__).resolve().parent.parent


def fake_checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "notebooks").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "evokit"\n')
    return root


def test_root_found_above_the_working_directory(tmp_path, monkeypatch):
    root = fake_checkout(tmp_path)
    monkeypatch.delenv("EVOKIT_ROOT", raising=False)
    monkeypatch.delenv("EVOKIT_FIGURES", raising=False)
    monkeypatch.chdir(root / "notebooks")
    assert repo_root() == root.resolve()
    assert at_root("results/x") == root.resolve() / "results" / "x"
    assert at_root(tmp_path / "abs") == tmp_path / "abs"  # an absolute path is kept
    assert figures_dir() == root.resolve() / "figures"


def test_other_projects_pyproject_is_not_a_root(tmp_path, monkeypatch):
    """A pyproject.toml of another project between the cwd and a checkout is skipped."""
    root = fake_checkout(tmp_path)
    other = root / "other"
    other.mkdir()
    (other / "pyproject.toml").write_text('[project]\nname = "evokit-extras"\n')
    monkeypatch.delenv("EVOKIT_ROOT", raising=False)
    monkeypatch.chdir(other)
    assert repo_root() == root.resolve()


def test_outside_any_checkout_the_working_folder_is_the_root(tmp_path, monkeypatch):
    """A notebook copied into one's own project folder writes beside itself, not into the checkout
    evokit was imported from."""
    own = tmp_path / "my-project"
    own.mkdir()
    monkeypatch.delenv("EVOKIT_ROOT", raising=False)
    monkeypatch.delenv("EVOKIT_FIGURES", raising=False)
    monkeypatch.chdir(own)
    assert repo_root() == own.resolve()
    assert figures_dir() == own.resolve() / "figures"
    assert not str(figures_dir()).startswith(str(ROOT))


def test_override_and_its_error(tmp_path, monkeypatch):
    monkeypatch.setenv("EVOKIT_ROOT", str(tmp_path))
    assert repo_root() == tmp_path.resolve()
    monkeypatch.setenv("EVOKIT_FIGURES", "figs")
    assert figures_dir() == tmp_path.resolve() / "figs"
    monkeypatch.setenv("EVOKIT_ROOT", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="EVOKIT_ROOT=.*is not a folder"):
        repo_root()


@pytest.mark.notebooks
def test_notebook_opened_from_notebooks_writes_at_the_root(tmp_path, monkeypatch):
    import papermill as pm

    root = fake_checkout(tmp_path)
    nb = root / "notebooks" / "genenv_theory.ipynb"
    shutil.copy(ROOT / "notebooks" / nb.name, nb)
    for var in ("EVOKIT_ROOT", "EVOKIT_FIGURES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HARBOR_TELEMETRY", "0")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the kernel imports this checkout's evokit
    pm.execute_notebook(str(nb), str(tmp_path / "out.ipynb"), kernel_name="python3", cwd=str(root / "notebooks"),
                        progress_bar=False)  # default parameters: results_dir = "results/genenv_theory"
    summary = json.loads((root / "results" / "genenv_theory" / "summary.json").read_text())
    assert summary["smoke"] is True
    assert (root / "figures" / "genenv_theory.png").stat().st_size > 0
    assert not (root / "notebooks" / "results").exists() and not (root / "notebooks" / "figures").exists()
