"""Run cards and zoo cards: validation, the metrics headline, the rendered model card."""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails

from metatune.env.device import DeviceFingerprint
from metatune.fileio import CARD_FILE
from metatune.zoo.errors import ZooError
from metatune.zoo.index import SAFE_ID_RE, ZooEntry

METRICS_SUMMARY_MAX = 12


class _DatasetRef(BaseModel):
    id: str
    records: int
    workloads: int
    spec_hash: str


class _Versions(BaseModel):
    metatune: str
    tvm: str
    torch: str


class RunCard(BaseModel):
    """The card fields that publishing, verifying and the rendered model card rely on; other keys are free.

    Cards are validated with it but kept as the JSON they were read from, so a published card.json
    is the run's card byte for byte plus the zoo section.
    """

    device: dict[str, Any]
    template_version: str = Field(min_length=1)
    dataset: _DatasetRef
    train_config: dict[str, Any]
    metrics: dict[str, Any]
    versions: _Versions
    created: str
    train_wall_s: float = Field(strict=True)

    @field_validator("device")
    @classmethod
    def _fingerprint(cls, device: dict[str, Any]) -> dict[str, Any]:
        """The device must name the zoo directory it is published under."""
        try:
            fp = DeviceFingerprint.from_json(device)
        except (TypeError, ValueError) as err:
            raise ValueError(f"device is not a DeviceFingerprint: {err}") from None
        if device.get("device_id", fp.device_id) != fp.device_id:
            raise ValueError(f"device.device_id {device['device_id']!r} disagrees with the fingerprint ({fp.device_id!r})")
        if not SAFE_ID_RE.match(fp.device_id):
            raise ValueError(f"device id {fp.device_id!r} is not usable as a directory name")
        return device

    @field_validator("created", mode="before")
    @classmethod
    def _iso_date(cls, created: Any) -> str:
        try:
            datetime.fromisoformat(str(created))
        except ValueError:
            raise ValueError(f"created {created!r} is not an ISO date") from None
        return str(created)


class _ZooSection(BaseModel):
    weights_sha256: str


class ZooCard(RunCard):
    """A published card: the run card plus the checksum `verify` checks the weights against."""

    zoo: _ZooSection


def _card_problems(card: Any, schema: type[RunCard]) -> list[str]:
    """Everything wrong with a card, so a trainer can fix it in one go."""
    if not isinstance(card, dict):
        return ["card.json must hold a JSON object"]
    try:
        schema.model_validate(card)
    except ValidationError as err:
        return [_problem(error) for error in err.errors()]
    return []


def _problem(error: ErrorDetails) -> str:
    """One pydantic error as the line a trainer reads to fix card.json."""
    where = ".".join(map(str, error["loc"]))
    if error["type"] == "missing":
        return f"missing field {where!r}"
    if error["type"] in ("dict_type", "model_type"):
        return f"{where} must be an object"
    if error["type"] == "value_error":
        return str(error["ctx"]["error"])
    return f"{where}: {error['msg']}"


def read_run_card(directory: Path) -> dict[str, Any]:
    path = Path(directory) / CARD_FILE
    if not path.is_file():
        raise ZooError(f"{directory} has no {CARD_FILE}; is it a training run directory?")
    try:
        card = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ZooError(f"{path} is not valid JSON: {err}") from err
    problems = _card_problems(card, RunCard)
    if problems:
        raise ZooError(f"{path} is not a valid run card: " + "; ".join(problems))
    return card


def read_zoo_card(entry: ZooEntry) -> dict[str, Any]:
    path = entry.directory / CARD_FILE
    try:
        card = json.loads(path.read_text())
    except FileNotFoundError as err:
        raise ZooError(f"{entry.id}: {path} is missing") from err
    except (OSError, ValueError) as err:
        raise ZooError(f"{entry.id}: {path} is not valid JSON: {err}") from err
    problems = _card_problems(card, ZooCard)
    if problems:
        raise ZooError(f"{entry.id}: {path} is not a valid zoo card: " + "; ".join(problems))
    return card


def metrics_summary(metrics: dict[str, Any], limit: int = METRICS_SUMMARY_MAX) -> dict[str, float]:
    """The shallowest numeric metrics, flattened to 'a/b/c' keys: a headline, not the table."""
    leaves = [(k, v) for k, v in _flatten(metrics) if math.isfinite(v)]
    leaves.sort(key=lambda kv: kv[0].count("/"))  # stable: keeps the card's order within a depth
    return {k: v for k, v in leaves[:limit]}


def _flatten(tree: Any, prefix: str = "") -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += _flatten(v, f"{prefix}/{k}" if prefix else str(k))
    elif isinstance(tree, (int, float)) and not isinstance(tree, bool) and prefix:
        out.append((prefix, float(tree)))
    return out


def _metrics_table(metrics: dict[str, Any]) -> list[str]:
    """Rows = metric path without its last key, columns = last keys; flat list if too wide."""
    leaves = _flatten(metrics)
    if not leaves:
        return ["(no metrics recorded)"]
    rows: dict[str, dict[str, float]] = {}
    for key, value in leaves:
        row, _, col = key.rpartition("/")
        rows.setdefault(row or "overall", {})[col] = value
    cols = list(dict.fromkeys(c for r in rows.values() for c in r))
    if len(cols) > 8:
        return ["| metric | value |", "|---|---|"] + [f"| {k} | {_fmt(v)} |" for k, v in leaves]
    lines = ["| | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for row, values in rows.items():
        lines.append(f"| {row} | " + " | ".join(_fmt(values[c]) if c in values else "" for c in cols) + " |")
    return lines


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def render_readme(card: dict[str, Any]) -> str:
    """A Hugging Face style model card (YAML front matter with model-index metrics)."""
    import yaml

    zoo, device, dataset = card["zoo"], card["device"], card["dataset"]
    name = f"metatune-{zoo['device_id']}-{zoo['version']}"
    # `zoo adapt` scores its candidates on the validation workloads that then choose one: optimistic
    scope = "validation workloads that chose the adaptation" if card.get("adapted_from") else "held-out"
    front = {
        "library_name": "metatune",
        "license": "apache-2.0",
        "tags": ["tvm", "cost-model", "tensor-program-tuning", "gcn", "meta-learning",
                 device["arch"], device["isa_class"]],
        "datasets": [dataset["id"]],
        "model-index": [{
            "name": name,
            "results": [{
                "task": {"type": "tensor-program-cost-model", "name": "Tensor program cost model"},
                "dataset": {"type": dataset["id"], "name": f"{dataset['id']} ({scope})"},
                "metrics": [{"type": k, "name": k, "value": round(v, 6)} for k, v in _flatten(card["metrics"])],
            }],
        }],
    }
    versions = ", ".join(f"{k} {v}" for k, v in card["versions"].items())
    images = [f"![{p}]({p})" for p in zoo.get("images", [])]
    lines = [
        "---", yaml.safe_dump(front, sort_keys=False).rstrip(), "---", "",
        f"# {name}", "",
        f"Meta-learned GCN cost model for TVM tensor programs on **{zoo['device_id']}** "
        f"({device.get('cpu_model', 'unknown CPU')}, {device['num_cores']} cores).", "",
        "## Intended use", "",
        "Ranking candidate schedules of the operator families in the training dataset while tuning with "
        "`metatune` on this device class (`metatune zoo resolve` picks it for matching machines). "
        "It predicts relative throughput, not absolute latency.", "",
        "## Training data", "",
        f"- dataset: `{dataset['id']}` ({dataset['records']} measured records over {dataset['workloads']} "
        f"workloads, spec hash `{dataset['spec_hash']}`)",
        f"- device fingerprint: ISA class `{device['isa_class']}`, flags `{' '.join(device.get('flags', []))}`",
        f"- super-graph template version: `{card['template_version']}`",
        f"- created {card['created']}, trained in {float(card['train_wall_s']):.0f} s; {versions}", "",
        f"## Metrics ({scope})", "", *_metrics_table(card["metrics"]), "",
        *(["## Training curves", "", *images, ""] if images else []),
        "## Limitations", "",
        f"- Measured on one {device['arch']} `{device['isa_class']}` machine; other CPUs (other ISA class, core "
        "count, cache sizes) only get it as a nearest-device fallback, with a warning, and rank less well.",
        "- Only knows the operator families and shape ranges of its dataset.",
        "- Tied to the super-graph template version above: after the encoder changes, `metatune zoo verify` "
        "fails and the model must be retrained.",
        "- Timings on shared or virtual machines are noisy; metrics inherit that noise.", "",
        "## How to reproduce", "",
        "```sh", "make train-zoo            # measure/train on this machine", "metatune zoo publish RUN_DIR",
        "```", "", "Training configuration:", "",
        "```json", json.dumps(card["train_config"], indent=2), "```", "",
        f"Weights: `{zoo['weights_file']}`, sha256 `{zoo['weights_sha256']}` ({zoo['weights_size_bytes']} bytes).",
        "",
    ]
    return "\n".join(lines)
