"""Learning curve: how the pretrained cost model's ranking grows with measured data.

Pretrains the configured model on seeded subsets of the training workloads, and of each
workload's records, then ranks the validation and held-out workloads zero-shot (k = 0).
The slope says whether measuring more workloads, or more configurations per workload,
would lift the ranking, and by how much: the question behind an accuracy ceiling.

With a source checkpoint (another device's), each subset fine-tunes a copy of it the way
`zoo adapt` does instead of training from scratch: how much of a new device's data closes
the gap to the checkpoint trained on all of it (`native`, ranked alongside the same way).
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from metatune import MAX_SEED, MetatuneError
from metatune.cost_model.gcn import CostModel
from metatune.encode.graphs import EncodedWorkload, GraphBuilder, dataset_template
from metatune.encode.supergraph import Template
from metatune.fileio import write_atomic
from metatune.learn.adapt import AdaptConfig
from metatune.learn.checkpoint import TrainedModel
from metatune.learn.config import PretrainConfig, TrainConfig, load_config
from metatune.learn.maml import predict_all, pretrain
from metatune.learn.named_checkpoint import NamedCheckpoint
from metatune.learn.metrics import median_defined, pairwise_accuracy
from metatune.learn.train import load_splits, new_model
from metatune.progress import progress_bar


@dataclass
class CurvePoint:
    workloads: int  # training workloads used (0: the source checkpoint or the native one as it is)
    records: int  # records per workload used (at most)
    seed: int
    train_pairwise: float  # medians over workloads, zero-shot
    valid_pairwise: float
    heldout_pairwise: float
    seconds: float
    model: str = "trained"  # "trained" on the subset; with a source: "source", "fine-tuned" or "native"


def _median_pairwise(model: CostModel, builder: GraphBuilder, sets: Sequence[EncodedWorkload]) -> float:
    """Median over workloads, leaving out one whose records all measured alike (its accuracy is undefined)."""
    return median_defined([pairwise_accuracy(predict_all(model, builder, w).numpy(), w.log_thr.numpy()) for w in sets])


def subsample(train: Sequence[EncodedWorkload], fraction: float, records: int, seed: int) -> list[EncodedWorkload]:
    """A seeded `fraction` of the workloads (at least 2), each cut to `records` random records."""
    rng = np.random.default_rng([seed, 7])
    count = max(2, int(round(fraction * len(train))))
    chosen = [train[int(i)] for i in rng.permutation(len(train))[:count]]
    return [w if len(w) <= records else w.subset(rng.permutation(len(w))[:records]) for w in chosen]


def curve_point(config: TrainConfig, train: list[EncodedWorkload], valid: list[EncodedWorkload],
                heldout: list[EncodedWorkload], seed: int, template: Template,
                on_epoch: Callable[[int, float, float], None] | None = None,
                source: TrainedModel | None = None) -> CurvePoint:
    """Train on `train` (from scratch, or fine-tuning a copy of `source` with `zoo adapt`'s settings)
    and rank every split zero-shot."""
    if source is None:
        model, builder = new_model(config, train, config.mode, seed, template)
    else:
        model, builder = copy.deepcopy(source.model), source.builder
    settings = training_settings(config, source)
    start = time.perf_counter()
    pretrain(model, builder, train, valid, settings, seed, on_epoch=on_epoch)
    return CurvePoint(len(train), max(map(len, train)), seed, _median_pairwise(model, builder, train),
                      _median_pairwise(model, builder, valid), _median_pairwise(model, builder, heldout),
                      round(time.perf_counter() - start, 1), "trained" if source is None else "fine-tuned")


def training_settings(config: TrainConfig, source: TrainedModel | None) -> PretrainConfig:
    """The config's pretraining from scratch; `zoo adapt`'s fine-tuning from a source."""
    return config.pretrain if source is None else AdaptConfig().pretrain_config(source.model.config.rank_scores)


def as_is_point(name: str, trained: TrainedModel, train: list[EncodedWorkload], valid: list[EncodedWorkload],
                heldout: list[EncodedWorkload]) -> CurvePoint:
    """A checkpoint ranked without any training here: the curve's start (the source) or its goal (native)."""
    model, builder = trained.model, trained.builder
    return CurvePoint(0, 0, 0, _median_pairwise(model, builder, train), _median_pairwise(model, builder, valid),
                      _median_pairwise(model, builder, heldout), 0.0, name)


def run_learning_curve(data_dir: Path, config_path: Path, fractions: Sequence[float], records: Sequence[int],
                       seeds: Sequence[int], out: Path | None, echo: Callable[[str], None] = print,
                       source: NamedCheckpoint | None = None, native: NamedCheckpoint | None = None,
                       cross: bool = False) -> list[CurvePoint]:
    """Every fraction with all records, then every record count with all workloads (`cross`: every
    fraction with every record count); with a `source`, its own and `native`'s ranking first."""
    if any(not 0 < f <= 1 for f in fractions):
        raise MetatuneError(f"--fractions must lie in (0, 1], got {list(fractions)}")
    if any(r < 2 for r in records):
        raise MetatuneError(f"--records must be at least 2, got {list(records)}")
    if any(not 0 <= s <= MAX_SEED for s in seeds):
        raise MetatuneError(f"--seeds must lie in 0..{MAX_SEED}, got {list(seeds)}")
    if native is not None and source is None:
        raise MetatuneError("--native is the goal of a curve from a source checkpoint: give --from too")
    config = load_config(config_path)
    torch.set_num_threads(config.threads)
    template = dataset_template(data_dir)
    for role, named in (("--from", source), ("--native", native)):
        if named is not None and named.template_version != template.version:
            raise MetatuneError(f"{role} {named.id} encodes programs with template {named.template_version}, "
                                f"{data_dir} with {template.version}: they cannot be compared")
    _, train, valid, heldout = load_splits(data_dir, config)
    if len(train) < 2 or not heldout:
        raise MetatuneError(f"{data_dir}: need >= 2 training and >= 1 held-out workloads")
    full = max(map(len, train))
    grid = list(dict.fromkeys([(f, r) for f in fractions for r in records] if cross else
                              [(f, full) for f in fractions] + [(1.0, r) for r in records]))
    points: list[CurvePoint] = []
    for name, named in (("source", source), ("native", native)):
        if named is not None:
            points.append(as_is_point(name, named.trained, train, valid, heldout))
            _report(points, echo, out)
    start_from = source.trained if source is not None else None
    epochs = training_settings(config, start_from).epochs
    done = 0
    with progress_bar() as bar:
        task = bar.add_task("learning curve", total=len(grid) * len(seeds) * epochs, status="")
        for fraction, count in grid:
            for seed in seeds:
                subset = subsample(train, fraction, count, seed)
                status = f"{len(subset)} workloads x {count} records, seed {seed}"
                point = curve_point(config, subset, valid, heldout, seed, template, on_epoch=lambda e, tr, va: bar.update(
                    task, advance=1, status=f"{status}: epoch {e + 1}, valid loss {va:.3f}"), source=start_from)
                done += 1
                bar.update(task, completed=done * epochs)  # early stopping skips epochs
                points.append(point)
                _report(points, echo, out)
    echo(format_curve(points))
    return points


def _report(points: list[CurvePoint], echo: Callable[[str], None], out: Path | None) -> None:
    """The newest point on the console; all points to `out`."""
    point = points[-1]
    what = (f"{point.model} checkpoint as it is" if point.workloads == 0 else
            f"{point.workloads} workloads x {point.records} records (seed {point.seed}, {point.model})")
    echo(f"{what}: pairwise train {point.train_pairwise:.3f} valid {point.valid_pairwise:.3f} held-out "
         f"{point.heldout_pairwise:.3f} ({point.seconds:.0f} s)")
    if out is not None:  # written after every point: a long study loses nothing on a crash
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, (json.dumps([asdict(p) for p in points], indent=1) + "\n").encode())


def format_curve(points: Sequence[CurvePoint]) -> str:
    """Markdown table, medians over seeds; the checkpoints ranked as they are first."""
    rows = ["| model | training workloads | records each | seeds | train | valid | held-out |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    groups: dict[tuple[int, int, str], list[CurvePoint]] = {}
    for p in points:
        groups.setdefault((p.workloads, p.records, p.model), []).append(p)
    for (workloads, records, model), group in sorted(groups.items()):
        med = {k: float(np.median([getattr(p, k) for p in group])) for k in ("train_pairwise", "valid_pairwise", "heldout_pairwise")}
        sizes = ("—", "—") if workloads == 0 else (str(workloads), str(records))
        rows.append(f"| {model} | {sizes[0]} | {sizes[1]} | {len(group)} | {med['train_pairwise']:.3f} | "
                    f"{med['valid_pairwise']:.3f} | {med['heldout_pairwise']:.3f} |")
    return "\n".join(rows)
