"""Benchmark suites: named workload lists (`resnet18`, `quick`) or a YAML/JSON file.

A file holds a list whose items are either a workload text (`dense:m=64,n=64,k=64`, or a
ResNet-18 layer name such as `C6`) or a mapping `{name: ..., workload: ...}`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from metatune import MetatuneError
from metatune.fileio import REPO_ROOT
from metatune.workload.operators import RESNET18_NAMES, SUITES, Workload, WorkloadError, get_suite, resolve_workload


@dataclass(frozen=True)
class BenchWorkload:
    """A workload with the short name used in tables, plots and directory names."""

    name: str
    workload: Workload


SUITE_FILES = REPO_ROOT / "bench" / "suites"
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def suite_names() -> list[str]:
    """The built-in suites and the shipped suite files (bench/suites/NAME.yaml)."""
    return [*SUITES, *sorted(p.stem for p in SUITE_FILES.glob("*.yaml"))]


def load_suite(spec: str) -> list[BenchWorkload]:
    """A named suite (built in, or shipped as bench/suites/NAME.yaml), or the workloads listed in a YAML/JSON file."""
    if spec == "resnet18":
        return [BenchWorkload(n, w) for n, w in zip(RESNET18_NAMES, get_suite(spec))]
    if spec in SUITES:
        return _named_by_family(get_suite(spec))
    shipped = SUITE_FILES / f"{spec}.yaml"
    path = shipped if shipped.exists() else Path(spec)
    if not path.is_file():
        raise MetatuneError(f"unknown suite {spec!r}: not one of {', '.join(suite_names())} and no such file")
    return _from_file(path)


def _named_by_family(workloads: list[Workload], names: list[str | None] | None = None) -> list[BenchWorkload]:
    """Unnamed workloads are called by their family (`conv2d`, `conv2d-2`, ...)."""
    seen: dict[str, int] = {}
    out = []
    for w, name in zip(workloads, names or [None] * len(workloads)):
        if name is None:
            seen[w.family] = seen.get(w.family, 0) + 1
            name = w.family if seen[w.family] == 1 else f"{w.family}-{seen[w.family]}"
        out.append(BenchWorkload(name, w))
    return out


def _from_file(path: Path) -> list[BenchWorkload]:
    try:
        items = yaml.safe_load(path.read_text())  # JSON is YAML
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise MetatuneError(f"{path}: not valid YAML/JSON: {err}") from None
    if not isinstance(items, list) or not items:
        raise MetatuneError(f"{path}: expected a non-empty list of workloads")
    workloads: list[Workload] = []
    names: list[str | None] = []
    for i, item in enumerate(items):
        text, name = (item.get("workload"), item.get("name")) if isinstance(item, dict) else (item, None)
        if not isinstance(text, str):
            raise MetatuneError(f"{path}: item {i + 1} has no workload text")
        try:
            workload = resolve_workload(text)
        except WorkloadError as err:
            raise MetatuneError(f"{path}: item {i + 1}: {err}") from None
        if name is not None and not NAME_RE.fullmatch(str(name)):  # a directory name in --out
            raise MetatuneError(f"{path}: item {i + 1}: name {name!r} must be letters, digits, '.', '_' or '-'")
        workloads.append(workload)
        names.append(str(name) if name is not None else text if text in RESNET18_NAMES else None)
    out = _named_by_family(workloads, names)
    names = [b.name for b in out]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise MetatuneError(f"{path}: duplicate workload names {', '.join(duplicates)}")
    return out
