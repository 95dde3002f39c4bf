"""A ``train-llm`` run's settings from a YAML file, with the command line's options over it.

TRL users keep a run's settings in one YAML file of ``GRPOConfig`` fields (``trl grpo --config``);
evokit reads the same kind of file. Each top-level key is either a field of
:class:`~evokit.trl_trainer.config.LLMTrainConfig` (evokit's own names: ``steps``, ``group_size``,
``lora_r``, …) or a field of TRL's ``GRPOConfig``, which is passed through as it is
(``LLMTrainConfig.grpo_args``). A key that is neither is an error naming the key, before a model is
loaded. A ``GRPOConfig`` field that evokit sets from its own fields (``max_steps``,
``num_generations``, …) is refused with the evokit name to use instead
(:data:`evokit.trl_trainer.trainer.SET_BY`): two names for one setting would leave it unclear which
one won.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from evokit.trl_trainer.config import LLMTrainConfig, SetupError

#: LLMTrainConfig fields held as tuples; a file (or a flag) may give one string or a list
_TUPLES = {"report_to", "lora_target_modules"}


def as_tuple(value) -> tuple[str, ...]:
    """``"a,b"`` or ``["a", "b"]`` → ``("a", "b")``."""
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(str(v).strip() for v in items if str(v).strip())


def read_config_file(path: Path) -> dict:
    """The file's keys split into LLMTrainConfig fields, with the GRPOConfig ones under ``grpo_args``."""
    import yaml
    from trl import GRPOConfig

    from evokit.trl_trainer.trainer import SET_BY, grpo_kwargs

    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise SetupError(f"--config {path}: no such file") from None
    except yaml.YAMLError as e:
        raise SetupError(f"--config {path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SetupError(f"--config {path}: expected a mapping of settings, got {type(data).__name__}")
    own = {f.name for f in dataclasses.fields(LLMTrainConfig)} - {"grpo_args"}
    evokit_sets = set(grpo_kwargs(LLMTrainConfig(device="cpu", generation="transformers"), Path(".")))
    fields, passed = {}, {}
    for key, value in data.items():
        if key in own:
            fields[key] = as_tuple(value) if key in _TUPLES else value
        elif key in evokit_sets:
            use = SET_BY.get(key)
            raise SetupError(f"--config {path}: {key}: evokit sets this GRPOConfig field "
                             + (f"from {use!r}; set that instead" if use else
                                "itself (its rows, resume or task scheduling rely on it)"))
        elif key in GRPOConfig.__dataclass_fields__:
            passed[key] = value
        else:
            raise SetupError(f"--config {path}: unknown key {key!r} (neither an evokit train-llm setting "
                             "nor a field of TRL's GRPOConfig)")
    return {**fields, **({"grpo_args": passed} if passed else {})}


def llm_config(path: Path | None = None, **flags) -> LLMTrainConfig:
    """LLMTrainConfig from the file at ``path`` (if any), each of ``flags`` (given on the command line) over it."""
    fields = read_config_file(path) if path is not None else {}
    fields.update({k: as_tuple(v) if k in _TUPLES else v for k, v in flags.items()})
    try:
        return LLMTrainConfig(**fields)
    except TypeError as e:  # a value of the wrong shape (e.g. a list where a number goes)
        raise SetupError(f"--config {path}: {e}") from None
