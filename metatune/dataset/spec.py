"""Dataset specs: which operator shapes to sample and how many configurations to measure.

A spec is YAML, validated before anything is measured. Each shape parameter is a fixed
integer, a `[low, high]` range (sampled log-uniformly, so small and large sizes are both
represented) or `{choices: [...]}`. Held-out workloads (named suites and explicit texts)
never appear in training: sampled shapes that collide with one are redrawn. Types are strict
(`m: "16"` or `m: true` is not a size) and a key given twice is an error, not a silent override.
"""

from __future__ import annotations

import collections
import hashlib
import json
import math
from pathlib import Path
from typing import Annotated, Any, Union

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator, model_validator

from metatune import MetatuneError
from metatune.workload.operators import FAMILIES, Workload, WorkloadError, get_suite


class SpecError(MetatuneError):
    """A dataset spec that cannot be used; the message names the field."""


STRICT = ConfigDict(extra="forbid", strict=True)


class Choices(BaseModel):
    model_config = STRICT
    choices: list[int] = Field(min_length=1)


class SameAs(BaseModel):
    """Tie a parameter to another one (square images and kernels, 'same' padding)."""

    model_config = STRICT
    same_as: str
    div: int = Field(default=1, ge=1)


Range = Annotated[list[int], Field(min_length=2, max_length=2)]


# The forms a parameter takes; pydantic puts the form in an error's location, which load_spec leaves out.
FIXED, RANGE, CHOICES, SAME_AS = "<fixed>", "<range>", "<choices>", "<same_as>"


def _param_form(value: Any) -> str:
    """Which form a parameter takes (YAML or validated), so that a bad value is reported against that form alone."""
    if isinstance(value, list):
        return RANGE
    if isinstance(value, SameAs) or (isinstance(value, dict) and "same_as" in value):
        return SAME_AS
    if isinstance(value, (Choices, dict)):
        return CHOICES
    return FIXED


ParamRange = Annotated[
    Union[Annotated[int, Tag(FIXED)], Annotated[Range, Tag(RANGE)], Annotated[Choices, Tag(CHOICES)],
          Annotated[SameAs, Tag(SAME_AS)]],
    Discriminator(_param_form),
]


class FamilySpec(BaseModel):
    model_config = STRICT
    workloads: int = Field(ge=1, description="how many distinct training shapes to sample")
    params: dict[str, ParamRange]

    @field_validator("params")
    @classmethod
    def _ranges_ordered(cls, params: dict[str, ParamRange]) -> dict[str, ParamRange]:
        for name, value in params.items():
            if isinstance(value, list) and value[0] > value[1]:
                raise ValueError(f"range of {name!r} is empty: [{value[0]}, {value[1]}]")
            if isinstance(value, list) and value[0] < 0:
                raise ValueError(f"range of {name!r} starts below 0")
        return params


class HeldOutSpec(BaseModel):
    model_config = STRICT
    suites: list[str] = Field(default_factory=list)
    workloads: list[str] = Field(default_factory=list)


class DatasetSpec(BaseModel):
    """The validated content of a spec file."""

    model_config = STRICT
    name: str
    seed: int = Field(default=0, ge=0, description="numpy's generators take non-negative seeds")
    samples_per_workload: int = Field(ge=1)
    max_gflop: float = Field(gt=0, description="sampled training shapes above this are redrawn")
    families: dict[str, FamilySpec] = Field(min_length=1)
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
            got, draws = 0, 0
            rejected: collections.Counter[str] = collections.Counter()
            for draws in range(1, fspec.workloads * max_draws_per_workload + 1):
                shape = {n: _draw(v, rng) for n, v in fspec.params.items() if not isinstance(v, SameAs)}
                for n, v in fspec.params.items():
                    if isinstance(v, SameAs):
                        shape[n] = shape[v.same_as] // v.div
                try:
                    w = Workload.create(family, **shape)
                except WorkloadError:
                    rejected["were invalid shapes"] += 1
                    continue
                if w.flops > self.max_gflop * 1e9:
                    rejected[f"exceeded max_gflop={self.max_gflop}"] += 1
                elif w.key in held:
                    rejected["were held-out workloads"] += 1
                elif w.key in chosen:
                    rejected["repeated a shape already chosen"] += 1
                else:
                    chosen[w.key] = w
                    got += 1
                    if got == fspec.workloads:
                        break
            if got < fspec.workloads:
                why = ", ".join(f"{n} {reason}" for reason, n in rejected.most_common())
                raise SpecError(
                    f"families.{family}: only {got} of {fspec.workloads} valid shapes found in {draws} draws ({why}); "
                    "widen the ranges or lower 'workloads'"
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


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, but a mapping key given twice is an error instead of the last one winning."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: list[Any] = []  # a list: an unhashable key is left for the base class to report
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice", key_node.start_mark)
            seen.append(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML error on one line: the problem and where (PyYAML's own text spans several lines)."""
    problem = getattr(err, "problem", None) or " ".join(str(err).split())
    mark = getattr(err, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem


def load_spec(path: Path) -> DatasetSpec:
    """Read and validate a spec file; errors name the file and the offending field."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"spec file not found: {path}") from None
    except UnicodeDecodeError as err:
        raise SpecError(f"{path}: not UTF-8 text (byte {err.start} cannot be decoded)") from None
    except OSError as err:
        raise SpecError(f"cannot read spec {path}: {err.strerror}") from None
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as err:
        raise SpecError(f"{path}: not valid YAML: {_yaml_problem(err)}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected a mapping at the top level")
    try:
        return DatasetSpec.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"] if p not in (FIXED, RANGE, CHOICES, SAME_AS)) or "spec"
        got = f", got {first['input']!r}" if first["type"].endswith("_type") else ""
        raise SpecError(f"{path}: {where}: {first['msg']}{got}") from None
    except MetatuneError as err:
        raise SpecError(f"{path}: {err}") from None
