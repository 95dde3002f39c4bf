"""``import evokit``: the front door (evokit/__init__.py) and the README's Python quickstart.

Checks that every name in ``evokit.__all__`` resolves to an object defined inside evokit and stays
that object after every module behind the table is imported (a name equal to a submodule's would
be replaced by the module); that ``import evokit`` alone imports none of PyTorch, TRL, transformers
or Harbor; and that the README's ```python quickstart block, run as written in a fresh process
with a real sandbox, prints exactly the output the README shows under it.
"""

from __future__ import annotations

import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import evokit

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "trl", "harbor")


def test_every_name_resolves_inside_evokit():
    names = [n for n in evokit.__all__ if n != "__version__"]
    assert len(names) >= 20
    resolved = {n: getattr(evokit, n) for n in names}
    for name, obj in resolved.items():
        assert obj.__module__.split(".")[0] == "evokit", f"evokit.{name} comes from {obj.__module__}"
        assert name in dir(evokit)
    # importing every module behind the table must not rebind a front-door name to a submodule
    submodules = {m.name for m in pkgutil.iter_modules(evokit.__path__)}
    assert not submodules & set(names), "a front-door name is also a submodule's name"
    for name, obj in resolved.items():
        assert getattr(evokit, name) is obj


def test_unknown_name_is_an_attribute_error():
    try:
        evokit.no_such_name  # noqa: B018
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("evokit.no_such_name resolved")


def test_import_is_light():
    code = (f"import sys, evokit; heavy = [m for m in sys.modules if m.split('.')[0] in {HEAVY!r}]; "
            "print(','.join(sorted(heavy)) or 'none')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "none", f"import evokit pulled in {out.stdout.strip()}"


def readme_quickstart() -> tuple[str, str]:
    """The README's ```python block and the ```text block that follows it (its shown output)."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"```python\n(.*?)```\s*\n+(?:[^`\n][^\n]*\n+)*?```text\n(.*?)```", text, re.S)
    assert m, "README.md has no ```python block followed by a ```text block of its output"
    return m.group(1), m.group(2)


def test_readme_python_quickstart_runs(tmp_path):
    code, shown = readme_quickstart()
    assert "import evokit" in code and len(code.strip().splitlines()) <= 8
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARBOR_TELEMETRY": "0"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == shown.strip()
