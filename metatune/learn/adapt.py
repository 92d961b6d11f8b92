"""A checkpoint for a new device from another device's, in minutes (`metatune zoo adapt`).

A cost model meta-trained on device A already ranks device B's schedules better than chance
(MetaTune's cross-platform result), but B's costs differ from A's. So B measures a small fixed
set of workloads (datasets/specs/adapt-cpu.yaml: one per family, random configurations, into a
dataset directory, so the measuring resumes), and A's checkpoint is continued on them. The
candidates are A's checkpoint unchanged, A fine-tuned (its pretraining resumed at a lower rate)
and A fine-tuned then meta-trained again on B's tasks; the one that ranks B's validation
workloads best after the tuner's own per-operator adaptation (the evaluation protocol at
k = 0, 8, 16) is kept. The validation workloads choose the candidate and give the card's
metrics, so those metrics are slightly optimistic; a study on B's own held-out suite is
`metatune evaluate`'s job.
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from metatune import MetatuneError, __version__
from metatune.dataset.builder import build_dataset, complete_build
from metatune.dataset.card import read_card
from metatune.encode.graphs import load_encoded, split_sets
from metatune.encode.supergraph import GraphEncoder
from metatune.fileio import CARD_FILE, WEIGHTS_FILE
from metatune.learn.checkpoint import TrainedModel
from metatune.learn.config import EvalConfig, MAMLConfig, PretrainConfig
from metatune.learn.evaluate import EvalResult, evaluate, format_table, gcn_adapter
from metatune.learn.maml import TrainLog, meta_train, pretrain
from metatune.learn.train import min_records, portable_path, split_validation

Echo = Callable[[str], object]
CANDIDATES = ("source", "finetune", "finetune+maml")  # in order of preference on a tie
EVAL_FILE = "eval.md"


class AdaptConfig(BaseModel):
    """How a source checkpoint is continued on the new device's few measurements."""

    model_config = ConfigDict(extra="forbid")
    seed: int = 0
    threads: int = Field(1, ge=1)
    valid_fraction: float = Field(0.15, gt=0, lt=0.5, description="training workloads kept for early stopping")
    epochs: int = Field(10, ge=1)
    steps_per_epoch: int = Field(20, ge=1)
    lr: float = Field(1e-3, gt=0, description="a fifth of pretraining's: a nudge, not a retraining")
    patience: int = Field(3, ge=1)
    maml_iterations: int = Field(120, ge=1)
    evaluation: EvalConfig = Field(default_factory=lambda: EvalConfig(ks=(0, 8, 16), repeats=3, methods=CANDIDATES))

    @model_validator(mode="after")
    def _evaluation_seed_follows_seed(self) -> "AdaptConfig":
        """The validation draws follow the run's seed unless the section names its own (as in TrainConfig)."""
        if "seed" not in self.evaluation.model_fields_set:
            values = {**dict(self.evaluation), "seed": self.seed}
            self.evaluation = EvalConfig.model_construct(self.evaluation.model_fields_set, **values)
        return self

    def pretrain_config(self, rank_loss: bool) -> PretrainConfig:
        return PretrainConfig(epochs=self.epochs, steps_per_epoch=self.steps_per_epoch, lr=self.lr,
                              workloads_per_batch=8, graphs_per_workload=24, rank_loss=rank_loss,
                              patience=self.patience)

    def maml_config(self, source: MAMLConfig) -> MAMLConfig:
        every = max(1, self.maml_iterations // 10)
        return source.model_copy(update={"iterations": self.maml_iterations, "eval_every": every,
                                         "patience": min(source.patience, 4)})


@dataclass
class Adaptation:
    """The chosen model, every candidate's validation table, and the score that chose it."""

    chosen: str
    model: TrainedModel
    result: EvalResult
    scores: dict[str, float]
    workloads: dict[str, list[str]]
    log: TrainLog


def validation_score(result: EvalResult, method: str) -> float:
    """Mean over k of the median pairwise ranking accuracy: what the tuner needs from the model."""
    by_k = result.metrics.get(method, {})
    return float(np.mean([v["pairwise_acc"] for v in by_k.values()])) if by_k else float("nan")


def choose_candidate(scores: dict[str, float]) -> str:
    """The best-scored of CANDIDATES; a tie goes to the earlier one, and one without a score (NaN: no draw
    it could predict) never wins (NaN compares false both ways, so `max` would depend on the order)."""
    return max(CANDIDATES, key=lambda name: (np.nan_to_num(scores[name], nan=-np.inf), -CANDIDATES.index(name)))


def adapt_to(source: TrainedModel, data_dir: Path, config: AdaptConfig, echo: Echo = print) -> Adaptation:
    """Continue `source` on the measurements in `data_dir` and keep the best candidate."""
    torch.set_num_threads(config.threads)
    template = source.builder.template
    maml = config.maml_config(source.maml)
    encoded = load_encoded(data_dir, GraphEncoder(template), min_records=min_records(maml))
    train_all, heldout = split_sets(encoded)
    if len(train_all) < 2 or not heldout:
        raise MetatuneError(f"{data_dir}: adapting needs >= 2 training and >= 1 held-out workloads with at least "
                            f"{min_records(maml)} records each; have {len(train_all)} and {len(heldout)}")
    train, valid = split_validation(train_all, config.valid_fraction, config.seed)
    echo(f"adapting on {sum(map(len, train))} programs of {len(train)} workloads "
         f"({len(valid)} for early stopping, {len(heldout)} to choose)")
    log = TrainLog()
    finetuned = copy.deepcopy(source.model)
    pre = pretrain(finetuned, source.builder, train, valid, config.pretrain_config(source.model.config.rank_scores),
                   config.seed, on_epoch=lambda e, tr, va: echo(f"finetune epoch {e}: train {tr:.3f} valid {va:.3f}"))
    meta = copy.deepcopy(finetuned)
    maml_log = meta_train(meta, source.builder, train, valid, maml, config.seed,
                          on_iter=lambda i, loss, val: val is not None and echo(f"maml iter {i}: valid {val:.3f}"))
    for name, values in {**pre.curves, **maml_log.curves}.items():
        log.curves[name] = values
    models = {"source": source.model, "finetune": finetuned, "finetune+maml": meta}
    for m in models.values():
        m.eval()
    methods = {name: gcn_adapter(m, source.builder, heldout, source.maml) for name, m in models.items()}
    result = evaluate(heldout, methods, config.evaluation, on_step=lambda s: echo(f"validate {s}"))
    scores = {name: validation_score(result, name) for name in CANDIDATES}
    chosen = choose_candidate(scores)
    workloads = {"train": [w.key for w in train], "early_stopping": [w.key for w in valid],
                 "validation": [w.key for w in heldout]}
    return Adaptation(chosen, TrainedModel(models[chosen], source.builder, source.maml), result, scores,
                      workloads, log)


def write_run(out: Path, adaptation: Adaptation, data_dir: Path, source: dict[str, Any], config: AdaptConfig,
              wall_s: dict[str, float]) -> dict[str, Any]:
    """A run directory `metatune zoo publish` accepts: the chosen model and a card saying it was
    adapted, from what, on how many samples, and how each candidate validated."""
    import tvm

    dataset_card = read_card(data_dir)
    assert dataset_card is not None
    records = sum(w["records"] for w in dataset_card["workloads"].values())
    out.mkdir(parents=True, exist_ok=True)
    card = {
        "name": f"metatune-gcn-{dataset_card['device']['device_id']}-adapted",
        "device": dataset_card["device"],
        "template_version": adaptation.model.builder.template.version,
        "dataset": {"id": dataset_card["dataset_id"], "path": portable_path(data_dir),
                    "spec_hash": dataset_card["spec_hash"], "records": records, "workloads": len(dataset_card["workloads"]),
                    "samples_per_workload": dataset_card["samples_per_workload"]},
        "adapted_from": source,
        "adaptation": {"chosen": adaptation.chosen, "validation_scores": {k: round(v, 4) for k, v in
                                                                         adaptation.scores.items()},
                       "score": "mean over k of the median pairwise accuracy on the validation workloads",
                       "workloads": adaptation.workloads, "config": config.model_dump(mode="json"),
                       "wall_s": {k: round(v, 1) for k, v in wall_s.items()}},
        "train_config": {"adapt": config.model_dump(mode="json"), "maml": adaptation.model.maml.model_dump()},
        "metrics": {"metatune": adaptation.result.metrics[adaptation.chosen],
                    **{f"candidate/{name}": by_k for name, by_k in adaptation.result.metrics.items()}},
        "metrics_per_workload": adaptation.result.per_workload,
        "train_wall_s": round(wall_s["adapt"], 1),
        "versions": {"metatune": __version__, "tvm": tvm.__version__, "torch": torch.__version__},
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    adaptation.model.save(out / WEIGHTS_FILE, {"dataset_id": dataset_card["dataset_id"],
                                               "adapted_from": json.dumps(source)})
    (out / CARD_FILE).write_text(json.dumps(card, indent=2) + "\n")
    (out / EVAL_FILE).write_text(f"# Adapted from {source['id']}: chosen `{adaptation.chosen}`\n\n"
                                 f"{format_table(adaptation.result)}\n")
    return card


def run_adapt(source: TrainedModel, source_info: dict[str, Any], spec: Path, samples: int, out: Path,
              target: str | None = None, config: AdaptConfig | None = None, echo: Echo = print,
              data_dir: Path | None = None) -> dict[str, Any]:
    """Measure `spec`'s workloads on this device into `data_dir` (default `out`/data; resuming what
    is there; nothing when it is complete, wherever it was measured), adapt `source` to them and
    write the run directory `out`; returns its card."""

    config = config or AdaptConfig()
    data_dir = data_dir if data_dir is not None else out / "data"
    start = time.perf_counter()
    if complete_build(spec, data_dir, samples) is None:  # measured elsewhere already: no device needed
        build_dataset(spec, data_dir, target=target, samples=samples)
    measured = time.perf_counter()
    echo(f"measured in {(measured - start) / 60:.1f} min; adapting {source_info['id']}")
    adaptation = adapt_to(source, data_dir, config, echo)
    wall_s = {"measure": measured - start, "adapt": time.perf_counter() - measured}
    card = write_run(out, adaptation, data_dir, source_info, config, wall_s)
    echo(format_table(adaptation.result))
    echo(f"chosen: {adaptation.chosen} (validation score " + ", ".join(
        f"{k} {v:.3f}" for k, v in adaptation.scores.items()) + f"); wrote {out}")
    return card
