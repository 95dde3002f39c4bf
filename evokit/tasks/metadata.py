"""evokit's record of a task (plan, lineage, seed, difficulty) under ``[metadata.evokit]``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evokit.tasks.folder import (
    _SHA256_HEX,
    CONFIG_FILE,
    METADATA_KEY,
    StrPath,
    TaskFormatError,
    _atomic_write_text,
    _dump_config,
    _read_config,
    content_hash,
    describe_validation_error,
)

# -------------------------------------------------------------------------------------- metadata


class Lineage(BaseModel):
    """Where an evolved task comes from; a seed task has generation 0 and no parent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    parent: str | None = Field(
        default=None,
        pattern=_SHA256_HEX,
        description="content_hash of the task this one was evolved from; None for a seed.",
    )
    generation: int = Field(default=0, ge=0, description="Evolution steps since the seed.")
    direction: Literal["length", "scenario", "skill"] | None = Field(
        default=None,
        description="Axis the last evolution step moved along: a longer scenario-skill plan, "
        "a new scenario, or a new skill.",
    )
    effort: Literal["low", "high", "max"] | None = Field(
        default=None, description="Generator effort level used for the last evolution step."
    )
    lineage_id: str | None = Field(
        default=None, description="Id shared by every task descending from one seed."
    )

    @model_validator(mode="after")
    def _parent_implies_generation(self) -> Lineage:
        if self.parent is not None and self.generation == 0:
            raise ValueError("a task with a parent is at least generation 1")
        return self


def _check_toml_value(value: Any, where: str) -> None:
    """Reject what TOML cannot store faithfully, so write_metadata never silently drops data."""
    if value is None:
        raise ValueError(f"{where} is None; TOML has no null, leave the key out instead")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} is {value}; store non-finite numbers as strings")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where} has non-string key {key!r}")
            _check_toml_value(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_toml_value(item, f"{where}[{i}]")
    elif not isinstance(value, str | int | float | bool):
        raise ValueError(f"{where} has type {type(value).__name__}, which TOML cannot store")


class EvokitMetadata(BaseModel):
    """evokit's record of a task, stored as ``[metadata.evokit]`` in its task.toml."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    plan: list[dict[str, Any]] | None = Field(
        default=None,
        description="Ordered scenario-skill steps the task exercises (filled by the generator).",
    )
    seed: int | None = Field(default=None, description="Seed the plan was rendered with (evokit.plan.render).")
    goal: str | None = Field(default=None, description="The plan's goal g (EE's instruction context).")
    difficulty: dict[str, float] | None = Field(
        default=None, description="D_T and its parts (length, scenario, skill) under the catalog priors."
    )
    lineage: Lineage | None = None
    content_hash: str | None = Field(
        default=None,
        pattern=_SHA256_HEX,
        description="content_hash() of the folder when the record was written.",
    )

    @field_validator("plan")
    @classmethod
    def _plan_fits_toml(cls, plan: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if plan is not None:
            _check_toml_value(plan, "plan")
        return plan

    def to_toml_table(self) -> dict[str, Any]:
        """The ``[metadata.evokit]`` table: JSON-mode dump with unset (None) fields left out."""
        return self.model_dump(mode="json", exclude_none=True)


def read_metadata(path: StrPath) -> EvokitMetadata | None:
    """The task's ``[metadata.evokit]`` record, or None for a task evokit has not annotated."""
    folder = Path(path)
    table = _read_config(folder).metadata.get(METADATA_KEY)
    if table is None:
        return None
    try:
        return EvokitMetadata.model_validate(table)
    except ValidationError as e:
        fields = describe_validation_error(e).replace(
            "field '", f"field 'metadata.{METADATA_KEY}."
        )
        raise TaskFormatError(folder, CONFIG_FILE, f"bad evokit metadata: {fields}") from e


def write_metadata(path: StrPath, meta: EvokitMetadata) -> None:
    """Store ``meta`` as ``[metadata.evokit]``, keeping every other key of task.toml.

    The file is re-emitted by Harbor's ``model_dump_toml``: comments and key order are not kept,
    and deprecated keys come out migrated (``memory = "2G"`` becomes ``memory_mb = 2048``), but
    every value is. ``meta.content_hash``, if set, must match the folder, so a stale hash can
    never be written.
    """
    folder = Path(path)
    config = _read_config(folder)
    if meta.content_hash is not None and meta.content_hash != content_hash(folder):
        raise TaskFormatError(
            folder,
            CONFIG_FILE,
            "metadata content_hash does not match the folder; recompute it with content_hash()",
        )
    updated = config.model_copy(deep=True)
    updated.metadata = {**config.metadata, METADATA_KEY: meta.to_toml_table()}
    _atomic_write_text(folder / CONFIG_FILE, _dump_config(folder, updated))


