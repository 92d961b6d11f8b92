"""Dataset specs: which operator shapes to sample and how many configurations to measure.

A spec is YAML, validated before anything is measured. Each shape parameter is a fixed
integer, a `[low, high]` range (sampled log-uniformly, so small and large sizes are both
represented) or `{choices: [...]}`. Held-out workloads (named suites and explicit texts)
never appear in training: sampled shapes that collide with one are redrawn.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Union

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from metatune import MetatuneError
from metatune.workload.operators import FAMILIES, Workload, WorkloadError, get_suite


class SpecError(MetatuneError):
    """A dataset spec that cannot be used; the message names the field."""


class Choices(BaseModel):
    model_config = ConfigDict(extra="forbid")
    choices: list[int] = Field(min_length=1)


class SameAs(BaseModel):
    """Tie a parameter to another one (square images and kernels, 'same' padding)."""

    model_config = ConfigDict(extra="forbid")
    same_as: str
    div: int = Field(default=1, ge=1)


ParamRange = Union[int, tuple[int, int], Choices, SameAs]


class FamilySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workloads: int = Field(ge=1, description="how many distinct training shapes to sample")
    params: dict[str, ParamRange]

    @field_validator("params")
    @classmethod
    def _ranges_ordered(cls, params: dict[str, ParamRange]) -> dict[str, ParamRange]:
        for name, value in params.items():
            if isinstance(value, tuple) and value[0] > value[1]:
                raise ValueError(f"range of {name!r} is empty: [{value[0]}, {value[1]}]")
            if isinstance(value, tuple) and value[0] < 0:
                raise ValueError(f"range of {name!r} starts below 0")
        return params


class HeldOutSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    suites: list[str] = Field(default_factory=list)
    workloads: list[str] = Field(default_factory=list)


class DatasetSpec(BaseModel):
    """The validated content of a spec file."""

    model_config = ConfigDict(extra="forbid")
    name: str
    seed: int = 0
    samples_per_workload: int = Field(ge=1)
    max_gflop: float = Field(gt=0, description="sampled training shapes above this are redrawn")
    families: dict[str, FamilySpec]
    held_out: HeldOutSpec = Field(default_factory=HeldOutSpec)

    @model_validator(mode="after")
    def _known_families_and_params(self) -> "DatasetSpec":
        for family, fspec in self.families.items():
            if family not in FAMILIES:
                raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
            expected = FAMILIES[family].params
            missing = [p for p in expected if p not in fspec.params]
            extra = [p for p in fspec.params if p not in expected]
            if missing:
                raise ValueError(f"families.{family}.params: missing {', '.join(missing)}")
            for name, value in fspec.params.items():
                if isinstance(value, SameAs) and (value.same_as not in expected or isinstance(fspec.params.get(value.same_as), SameAs)):
                    raise ValueError(f"families.{family}.params.{name}: same_as {value.same_as!r} must name an untied parameter")
            if extra:
                raise ValueError(f"families.{family}.params: unknown {', '.join(extra)} (expected {','.join(expected)})")
        for suite in self.held_out.suites:
            get_suite(suite)
        for text in self.held_out.workloads:
            Workload.parse(text)
        return self

    def digest(self) -> str:
        """sha256 of the canonical spec: identical specs build identical datasets."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()

    def held_out_workloads(self) -> list[Workload]:
        found: dict[str, Workload] = {}
        for suite in self.held_out.suites:
            for w in get_suite(suite):
                found.setdefault(w.key, w)
        for text in self.held_out.workloads:
            w = Workload.parse(text)
            found.setdefault(w.key, w)
        return list(found.values())

    def training_workloads(self, max_draws_per_workload: int = 500) -> list[Workload]:
        """Sample the training shapes; deterministic in the spec (seed included)."""
        rng = np.random.default_rng(self.seed)
        held = {w.key for w in self.held_out_workloads()}
        chosen: dict[str, Workload] = {}
        for family, fspec in self.families.items():
            got = 0
            for _ in range(fspec.workloads * max_draws_per_workload):
                if got == fspec.workloads:
                    break
                shape = {n: _draw(v, rng) for n, v in fspec.params.items() if not isinstance(v, SameAs)}
                for n, v in fspec.params.items():
                    if isinstance(v, SameAs):
                        shape[n] = shape[v.same_as] // v.div
                try:
                    w = Workload.create(family, **shape)
                except WorkloadError:
                    continue
                if w.flops > self.max_gflop * 1e9 or w.key in held or w.key in chosen:
                    continue
                chosen[w.key] = w
                got += 1
            if got < fspec.workloads:
                raise SpecError(
                    f"families.{family}: only {got} of {fspec.workloads} valid shapes found under "
                    f"max_gflop={self.max_gflop}; widen the ranges or lower 'workloads'"
                )
        return list(chosen.values())


def _draw(value: ParamRange, rng: np.random.Generator) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, Choices):
        return int(rng.choice(value.choices))
    low, high = value
    if low == high:
        return low
    if low >= 1:  # log-uniform over [low, high + 1), floored: every integer in range can occur
        return int(min(high, math.floor(math.exp(rng.uniform(math.log(low), math.log(high + 1))))))
    return int(rng.integers(low, high + 1))


def load_spec(path: Path) -> DatasetSpec:
    """Read and validate a spec file; errors name the file and the offending field."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise SpecError(f"spec file not found: {path}") from None
    except yaml.YAMLError as err:
        raise SpecError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected a mapping at the top level")
    try:
        return DatasetSpec.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "spec"
        raise SpecError(f"{path}: {where}: {first['msg']}") from None
    except MetatuneError as err:
        raise SpecError(f"{path}: {err}") from None
