"""Load a ``scripts/<name>.py`` as a module (the scripts are not a package), optionally with its
``ROOT`` pointed at a scratch repository root so its files land under ``tmp_path``."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def load_script(name: str, root: Path | None = None) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if root is not None:
        module.ROOT = root
    return module
