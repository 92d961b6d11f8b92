"""`metatune train` / `metatune evaluate`: pretrain, meta-train, evaluate, write a run directory.

A run directory holds `model.safetensors` (the checkpoint, metatune.learn.checkpoint),
`card.json` (device, template version, dataset, config, held-out metrics, versions), `eval.md`
(the evaluation table) and PNG curves (metatune.learn.report). `metatune zoo publish RUN_DIR`
turns it into a zoo checkpoint.
"""

from __future__ import annotations

import copy
import json
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from metatune import MetatuneError, __version__
from metatune.cost_model.gcn import CostModel, ModelConfig
from metatune.cost_model.xgb import new_xgb, record_task
from metatune.cost_model.xgb_transfer import TransferredXGB
from metatune.dataset.card import dataset_card
from metatune.dataset.store import DatasetStore
from metatune.encode.graphs import (
    EncodedWorkload,
    FeatureStats,
    GraphBuilder,
    dataset_template,
    load_encoded,
    split_sets,
)
from metatune.encode.supergraph import GraphEncoder, Template
from metatune.env.device import DeviceFingerprint
from metatune.env.processes import process_pool, worker_count
from metatune.fileio import CARD_FILE, REPO_ROOT, WEIGHTS_FILE, write_atomic
from metatune.learn.checkpoint import TrainedModel
from metatune.learn.config import EVAL_METHODS, MAMLConfig, TrainConfig, load_config, with_evaluation
from metatune.learn.evaluate import (
    EvalResult,
    Method,
    evaluate,
    format_table,
    gcn_adapter,
    scratch_trainer,
    xgb_method,
)
from metatune.learn.maml import TrainLog, meta_train, pretrain
from metatune.learn.replay_caches import fill_training_caches
from metatune.learn.report import write_evaluation

PRETRAINED_FILE = "pretrained.safetensors"  # before MAML: the fine-tuning baseline
PLAIN_FILE = "plain.safetensors"  # the ablation trained without the super-graph
CURVES_FILE = "curves.json"

Echo = Callable[[str], object]
XGB_METHODS = ("xgb", "xgb-transfer")


@contextmanager
def timed(wall_s: dict[str, float], phase: str) -> Iterator[None]:
    """Add the block's wall time to `wall_s[phase]`: the card says where a run's time went."""
    start = time.perf_counter()
    try:
        yield
    finally:
        wall_s[phase] = wall_s.get(phase, 0.0) + time.perf_counter() - start


def split_validation(train: list[EncodedWorkload], fraction: float,
                     seed: int) -> tuple[list[EncodedWorkload], list[EncodedWorkload]]:
    """(training, validation) workloads: a seeded `fraction` of `train` (at least one) held back
    for early stopping and for choosing between models."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(train))
    n_valid = max(1, int(round(fraction * len(train))))
    valid = [train[i] for i in order[:n_valid]]
    return [train[i] for i in order[n_valid:]], valid


def min_records(maml: MAMLConfig) -> int:
    """Records a workload needs to make a MAML task (a support set and a query set)."""
    return maml.k_support + 10


def load_splits(data_dir: Path, config: TrainConfig, workers: int | None = None) -> tuple[
        list[EncodedWorkload], list[EncodedWorkload], list[EncodedWorkload], list[EncodedWorkload]]:
    """All encoded workloads with enough records for a MAML task, then training, validation and held-out
    (`workers` caps the processes encoding what is not cached yet)."""

    encoder = GraphEncoder(dataset_template(data_dir))
    encoded = load_encoded(data_dir, encoder, min_records=min_records(config.maml), workers=workers)
    train_all, heldout = split_sets(encoded)
    train, valid = split_validation(train_all, config.valid_fraction, config.seed)
    return encoded, train, valid, heldout


def new_model(config: TrainConfig, train: list[EncodedWorkload], mode: str, seed: int,
              template: Template) -> tuple[CostModel, GraphBuilder]:
    """An untrained cost model for `mode`, with its builder normalising features by `train`'s statistics."""

    builder = GraphBuilder(template, mode, FeatureStats.fit(train))
    torch.manual_seed(seed)
    positions = template.num_nodes if mode == "supergraph" else 0
    model = CostModel(ModelConfig(in_dim=builder.width, num_positions=positions,
                                  rank_scores=config.pretrain.rank_loss, **config.model.model_dump()))
    return model, builder


def train_models(config: TrainConfig, train: list[EncodedWorkload], valid: list[EncodedWorkload], mode: str,
                 template: Template, log: TrainLog, echo: Echo) -> tuple[TrainedModel, TrainedModel]:
    """Pretrain then MAML; returns the meta-trained model and a copy of the pretrained one."""
    model, builder = new_model(config, train, mode, config.seed, template)
    pre = pretrain(model, builder, train, valid, config.pretrain, config.seed,
                   on_epoch=lambda e, tr, va: echo(f"[{mode}] pretrain epoch {e}: train {tr:.3f} valid {va:.3f}"))
    pretrained = copy.deepcopy(model)
    maml_cfg = config.maml
    meta = meta_train(model, builder, train, valid, maml_cfg, config.seed,
                      on_iter=lambda i, loss, val: val is not None and echo(f"[{mode}] maml iter {i}: query {loss:.3f} valid {val:.3f}"))
    for name, values in {**pre.curves, **meta.curves}.items():
        log.curves[f"{mode}/{name}"] = values
    return TrainedModel(model, builder, maml_cfg), TrainedModel(pretrained, builder, maml_cfg)


def gcn_methods(config: TrainConfig, heldout: list[EncodedWorkload], main: TrainedModel | None = None,
                pretrained: TrainedModel | None = None, plain: TrainedModel | None = None) -> dict[str, Method]:
    """The GCN rows of the table for the models given: MAML-adapted, fine-tuned, from scratch, the ablation."""
    methods: dict[str, Method] = {}
    if main is not None and pretrained is not None:
        methods = {
            "metatune": gcn_adapter(main.model, main.builder, heldout, main.maml),
            "finetune": gcn_adapter(pretrained.model, pretrained.builder, heldout, main.maml),
            "scratch": scratch_trainer(main.model, main.builder, heldout, config.evaluation),
        }
        methods = {k: v for k, v in methods.items() if k in config.evaluation.methods}
    if plain is not None:
        methods["metatune-plain"] = gcn_adapter(plain.model, plain.builder, heldout, plain.maml)
    return methods


def xgb_methods(config: TrainConfig, data_dir: Path, heldout: list[EncodedWorkload], setup_s: dict[str, float],
                echo: Echo, only: tuple[str, ...] = XGB_METHODS) -> dict[str, Method]:
    """The XGBoost rows (of those in `only`): TVM's XGBModel from the k samples alone (`xgb`), and
    warm-started on the training workloads (`xgb-transfer`)."""
    wanted = [m for m in only if m in config.evaluation.methods]
    if not wanted:
        return {}
    target = DeviceFingerprint.from_json(dataset_card(data_dir)["device"]).tvm_target()
    stores = {s.workload.key: s for s in DatasetStore(data_dir, repair=False)}
    echo("extracting held-out candidates")
    with timed(setup_s, f"{'+'.join(wanted)}: held-out candidates"):
        held_tasks = [record_task(stores[w.key], target) for w in heldout]
    methods = {}
    if "xgb" in wanted:
        methods["xgb"] = xgb_method(held_tasks, new_xgb)
    if "xgb-transfer" in wanted:
        with timed(setup_s, "xgb-transfer: training data"):
            transferred = TransferredXGB.from_dataset(data_dir, target, echo)
        methods["xgb-transfer"] = xgb_method(held_tasks, transferred.fresh)
    return methods


def run_evaluation(config: TrainConfig, heldout: list[EncodedWorkload], methods: dict[str, Method],
                   setup_s: dict[str, float], echo: Echo) -> EvalResult:
    """Every method on identical support/query draws; the seconds include the methods' set-up."""
    result = evaluate(heldout, methods, config.evaluation, on_step=lambda s: echo(f"evaluate {s}"))
    result.seconds.update(setup_s)
    return result


# ---------------------------------------------------------------------------------------------
# A training run as independent jobs


def planned_jobs(config: TrainConfig) -> list[str]:
    """The run's independent parts, longest first (workers take them in this order): each XGBoost row
    in its own job (xgb-transfer first reads every training workload's features), the GCN trained from
    scratch on each support set in its own (it needs no trained model), and each trained GCN (the
    super-graph model, the plain-graph ablation) trained and evaluated in its own."""
    jobs = []
    if "xgb-transfer" in config.evaluation.methods:
        jobs.append("xgb-transfer")
    if "scratch" in config.evaluation.methods:
        jobs.append("scratch")
    jobs.append("main")
    if config.ablation and config.mode == "supergraph":
        jobs.append("ablation")
    if "xgb" in config.evaluation.methods:
        jobs.append("xgb")
    return jobs


def run_job(job: str, data_dir: str, config_json: dict[str, Any], out: str, echo: Echo | None = None) -> dict[str, Any]:
    """One part of a training run, in this process or a worker: it writes its weights into `out`
    and returns what the card needs, as JSON (so a worker's result is the same as this process's)."""
    config = TrainConfig.model_validate(config_json)
    torch.set_num_threads(config.threads)
    say = echo or (lambda message: print(f"[{job}] {message}", flush=True))
    data, run_dir = Path(data_dir), Path(out)
    _, train, valid, heldout = load_splits(data, config)
    log, wall_s, setup_s = TrainLog(), {}, {}
    extra = {"dataset_id": dataset_card(data)["dataset_id"]}
    template = dataset_template(data)
    if job in XGB_METHODS:
        with timed(wall_s, f"{job}: evaluation"):
            methods = xgb_methods(config, data, heldout, setup_s, say, only=(job,))
            result = run_evaluation(config, heldout, methods, setup_s, say)
    elif job == "scratch":  # the main model's architecture and feature scaling, never trained
        model, builder = new_model(config, train, config.mode, config.seed, template)
        with timed(wall_s, "scratch: evaluation"):
            methods = {"scratch": scratch_trainer(model, builder, heldout, config.evaluation)}
            result = run_evaluation(config, heldout, methods, setup_s, say)
    else:
        mode = config.mode if job == "main" else "plain"
        with timed(wall_s, f"{job}: train"):
            model, pretrained = train_models(config, train, valid, mode, template, log, say)
        if job == "main":
            model.save(run_dir / WEIGHTS_FILE, extra)
            pretrained.save(run_dir / PRETRAINED_FILE, extra)
            methods = gcn_methods(config, heldout, main=model, pretrained=pretrained)
            methods.pop("scratch", None)  # its own job
        else:
            model.save(run_dir / PLAIN_FILE, extra)
            methods = gcn_methods(config, heldout, plain=model)
        with timed(wall_s, f"{job}: evaluation"):
            result = run_evaluation(config, heldout, methods, setup_s, say)
    return {"curves": log.curves, "metrics": result.metrics, "per_workload": result.per_workload,
            "seconds": result.seconds, "wall_s": wall_s, "template_version": template.version}


def run_all_jobs(jobs: list[str], data_dir: Path, config: TrainConfig, out: Path, workers: int,
                 echo: Echo) -> dict[str, dict[str, Any]]:
    """Each job's result; with more than one worker the jobs run in spawned processes, `workers` at a
    time (one per core), each with `config.threads` torch threads."""
    args = (str(data_dir), config.model_dump(mode="json", round_trip=True), str(out))
    if workers <= 1:
        return {job: run_job(job, *args, echo=echo) for job in jobs}
    echo(f"running {', '.join(jobs)} in {workers} worker processes")
    with process_pool(workers) as pool:
        futures = {job: pool.submit(run_job, job, *args) for job in jobs}
        return {job: future.result() for job, future in futures.items()}


def merged_result(results: dict[str, dict[str, Any]]) -> EvalResult:
    """The jobs' rows as one table, in the order the methods are listed in EVAL_METHODS."""
    merged = EvalResult()
    for part in results.values():
        merged.metrics.update(part["metrics"])
        merged.per_workload.update(part["per_workload"])
        merged.seconds.update(part["seconds"])
    order = {name: i for i, name in enumerate(EVAL_METHODS)}
    merged.metrics = dict(sorted(merged.metrics.items(), key=lambda kv: order.get(kv[0], len(order))))
    return merged


def run_train(data_dir: Path, config_path: Path, out: Path, echo: Echo = print,
              workers: int | None = None) -> dict[str, Any]:
    """The whole `metatune train` command; returns the card. `workers` caps the processes (default: one
    per usable core); the card is the same with any number of them."""

    config = load_config(config_path)
    data_card = dataset_card(data_dir)
    torch.set_num_threads(config.threads)
    wall_s: dict[str, float] = {}
    target = DeviceFingerprint.from_json(data_card["device"]).tvm_target()
    with timed(wall_s, "replay: loop graphs and xgb features"):
        fill_training_caches(data_dir, GraphEncoder(dataset_template(data_dir)), target, min_records(config.maml),
                             with_features="xgb-transfer" in config.evaluation.methods, workers=workers, echo=echo)
    with timed(wall_s, "encode"):
        encoded, train, valid, heldout = load_splits(data_dir, config, workers)
    if len(train) + len(valid) < 3 or not heldout:
        raise MetatuneError(f"{data_dir}: need >= 3 training and >= 1 held-out workloads with records, "
                            f"have {len(train) + len(valid)} and {len(heldout)}")
    echo(f"encoded {sum(map(len, encoded))} programs of {len(encoded)} workloads in {wall_s['encode']:.0f} s")
    out.mkdir(parents=True, exist_ok=True)
    jobs = planned_jobs(config)
    if "ablation" not in jobs:  # an earlier run's ablation in the same folder is not this run's
        (out / PLAIN_FILE).unlink(missing_ok=True)
    with timed(wall_s, "train and evaluate"):
        results = run_all_jobs(jobs, data_dir, config, out, worker_count(len(jobs), workers), echo)
    for part in results.values():
        wall_s.update(part["wall_s"])
    result = merged_result(results)
    log = TrainLog({name: values for part in results.values() for name, values in part["curves"].items()})
    import tvm

    card = {
        "name": config.name,
        "device": data_card["device"],
        "template_version": results["main"]["template_version"],
        "dataset": {"id": data_card["dataset_id"], "path": portable_path(data_dir), "spec_hash": data_card["spec_hash"],
                    "records": sum(len(w) for w in encoded), "workloads": len(encoded),
                    "train_workloads": len(train), "valid_workloads": len(valid), "heldout_workloads": len(heldout)},
        "train_config": config.model_dump(mode="json"),
        "metrics": result.metrics,
        "metrics_per_workload": result.per_workload,
        "train_wall_s": round(wall_s["main: train"], 1),
        "wall_s": {**{phase: round(v, 1) for phase, v in wall_s.items()},
                   "evaluation_by_method": {name: round(v, 1) for name, v in result.seconds.items()}},
        "versions": {"metatune": __version__, "tvm": tvm.__version__, "torch": torch.__version__},
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    (out / CARD_FILE).write_text(json.dumps(card, indent=2) + "\n")
    (out / CURVES_FILE).write_text(json.dumps(log.curves) + "\n")
    write_evaluation(out, result, log)
    echo(f"training took {wall_s['main: train'] / 60:.1f} min; wrote {out}")
    echo("wall time: " + ", ".join(f"{phase} {v:.0f} s" for phase, v in wall_s.items())
         + "; evaluation by method: " + ", ".join(f"{name} {v:.0f} s" for name, v in result.seconds.items()))
    return card


def portable_path(path: Path) -> str:
    """A path relative to the repository when it is inside it (cards travel between machines)."""
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _check_same_run_setup(card: dict, run_dir: Path, data_dir: Path, config: TrainConfig) -> None:
    """The table written into a run's card must come from the dataset and config that card names."""
    dataset = dataset_card(data_dir)
    trained_on = card["dataset"]["id"]
    if dataset["dataset_id"] != trained_on:
        raise MetatuneError(f"{run_dir} was trained on dataset {trained_on}, {data_dir} is {dataset['dataset_id']}: "
                            "its card would name one and carry the other's table; pass --ks or --methods for a "
                            "side study, which prints its table and writes nothing")
    if config != TrainConfig.model_validate(card["train_config"]):
        raise MetatuneError(f"--config differs from the config {run_dir} was trained with: its card would carry "
                            "another config's table; pass --ks or --methods for a side study, which writes nothing")


def run_evaluate(data_dir: Path, run_dir: Path, config_path: Path | None, echo: Echo = print,
                 ks: tuple[int, ...] | None = None, methods: tuple[str, ...] | None = None) -> EvalResult:
    """Re-run the evaluation table of a finished run (`metatune evaluate`).

    With `ks` or `methods` the table is a side study (e.g. k = 150: how well does each method rank
    when trained on most of the workload's own samples?): it is printed, and the run's card and
    eval.md keep the configured table.
    """
    card_path = run_dir / CARD_FILE
    if not card_path.exists():
        raise MetatuneError(f"{run_dir} is not a training run (no {CARD_FILE})")
    card = json.loads(card_path.read_text())
    config = load_config(config_path) if config_path else TrainConfig.model_validate(card["train_config"])
    side_study = ks is not None or methods is not None
    if not side_study:
        _check_same_run_setup(card, run_dir, data_dir, config)
    if side_study:
        config = with_evaluation(config, ks, methods)
    torch.set_num_threads(config.threads)
    main = TrainedModel.load(run_dir / WEIGHTS_FILE)
    pretrained = TrainedModel.load(run_dir / PRETRAINED_FILE)
    wants_plain = "ablation" in planned_jobs(config) and (methods is None or "metatune-plain" in methods)
    plain = TrainedModel.load(run_dir / PLAIN_FILE) if wants_plain else None
    _, _, _, heldout = load_splits(data_dir, config)
    setup_s: dict[str, float] = {}
    methods = {**gcn_methods(config, heldout, main, pretrained, plain), **xgb_methods(config, data_dir, heldout, setup_s, echo)}
    result = run_evaluation(config, heldout, methods, setup_s, echo)
    if side_study:
        echo(format_table(result))
        return result
    card["metrics"], card["metrics_per_workload"] = result.metrics, result.per_workload
    write_atomic(card_path, (json.dumps(card, indent=2) + "\n").encode())  # a stop mid-write keeps the old card
    log = TrainLog(json.loads((run_dir / CURVES_FILE).read_text()))
    write_evaluation(run_dir, result, log)
    return result

