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
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from metatune import MetatuneError, __version__
from metatune.cost_model.gcn import CostModel, ModelConfig
from metatune.cost_model.xgb import new_xgb, record_task
from metatune.cost_model.xgb_transfer import TransferredXGB
from metatune.dataset.card import read_card
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
from metatune.fileio import CARD_FILE, REPO_ROOT, WEIGHTS_FILE
from metatune.learn.checkpoint import TrainedModel
from metatune.learn.config import TrainConfig, load_config, with_evaluation
from metatune.learn.evaluate import EvalResult, evaluate, format_table, gcn_adapter, scratch_trainer, xgb_method
from metatune.learn.maml import TrainLog, meta_train, pretrain
from metatune.learn.report import write_evaluation

PRETRAINED_FILE = "pretrained.safetensors"  # before MAML: the fine-tuning baseline
PLAIN_FILE = "plain.safetensors"  # the ablation trained without the super-graph
CURVES_FILE = "curves.json"

Echo = Callable[[str], object]


def _split_validation(train: list[EncodedWorkload], fraction: float,
                      seed: int) -> tuple[list[EncodedWorkload], list[EncodedWorkload]]:
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(train))
    n_valid = max(1, int(round(fraction * len(train))))
    valid = [train[i] for i in order[:n_valid]]
    return [train[i] for i in order[n_valid:]], valid


def load_splits(data_dir: Path, config: TrainConfig) -> tuple[list[EncodedWorkload], list[EncodedWorkload],
                                                               list[EncodedWorkload], list[EncodedWorkload]]:
    """All encoded workloads with enough records for a MAML task, then training, validation and held-out."""

    encoder = GraphEncoder(dataset_template(data_dir))
    encoded = load_encoded(data_dir, encoder, min_records=config.maml.k_support + 10)
    train_all, heldout = split_sets(encoded)
    train, valid = _split_validation(train_all, config.valid_fraction, config.seed)
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


def run_evaluation(config: TrainConfig, data_dir: Path, heldout: list[EncodedWorkload],
                   main: TrainedModel, pretrained: TrainedModel, plain: TrainedModel | None, echo: Echo) -> EvalResult:
    """The evaluation table: every method on identical support/query draws."""
    eval_cfg = config.evaluation
    methods = {
        "metatune": gcn_adapter(main.model, main.builder, heldout, main.maml),
        "finetune": gcn_adapter(pretrained.model, pretrained.builder, heldout, main.maml),
        "scratch": scratch_trainer(main.model, main.builder, heldout, eval_cfg),
    }
    if plain is not None:
        methods["metatune-plain"] = gcn_adapter(plain.model, plain.builder, heldout, plain.maml)
    methods = {k: v for k, v in methods.items() if k in eval_cfg.methods or k == "metatune-plain"}
    if {"xgb", "xgb-transfer"} & set(eval_cfg.methods):
        target = DeviceFingerprint.from_json(read_card(data_dir)["device"]).tvm_target()
        stores = {s.workload.key: s for s in DatasetStore(data_dir)}
        echo("xgb: extracting held-out candidates")
        held_tasks = [record_task(stores[w.key], target) for w in heldout]
        if "xgb" in eval_cfg.methods:
            methods["xgb"] = xgb_method(held_tasks, new_xgb)
        if "xgb-transfer" in eval_cfg.methods:
            methods["xgb-transfer"] = xgb_method(held_tasks, TransferredXGB.from_dataset(data_dir, target, echo).fresh)
    return evaluate(heldout, methods, eval_cfg, on_step=lambda s: echo(f"evaluate {s}"))


def run_train(data_dir: Path, config_path: Path, out: Path, echo: Echo = print) -> dict[str, Any]:
    """The whole `metatune train` command; returns the card."""

    config = load_config(config_path)
    dataset_card = read_card(data_dir)
    if dataset_card is None:
        raise MetatuneError(f"{data_dir} is not a dataset (no card.json); build it with `metatune dataset build`")
    torch.set_num_threads(config.threads)
    start = time.perf_counter()
    encoded, train, valid, heldout = load_splits(data_dir, config)
    if len(train) + len(valid) < 3 or not heldout:
        raise MetatuneError(f"{data_dir}: need >= 3 training and >= 1 held-out workloads with records, "
                            f"have {len(train) + len(valid)} and {len(heldout)}")
    echo(f"encoded {sum(map(len, encoded))} programs of {len(encoded)} workloads in {time.perf_counter() - start:.0f} s")
    log = TrainLog()
    t0 = time.perf_counter()
    template = dataset_template(data_dir)
    main, pretrained = train_models(config, train, valid, config.mode, template, log, echo)
    train_wall = time.perf_counter() - t0
    plain = None
    if config.ablation and config.mode == "supergraph":
        plain, _ = train_models(config, train, valid, "plain", template, log, echo)
    result = run_evaluation(config, data_dir, heldout, main, pretrained, plain, echo)
    out.mkdir(parents=True, exist_ok=True)
    import tvm

    card = {
        "name": config.name,
        "device": dataset_card["device"],
        "template_version": main.builder.template.version,
        "dataset": {"id": dataset_card["dataset_id"], "path": portable_path(data_dir), "spec_hash": dataset_card["spec_hash"],
                    "records": sum(len(w) for w in encoded), "workloads": len(encoded),
                    "train_workloads": len(train), "valid_workloads": len(valid), "heldout_workloads": len(heldout)},
        "train_config": config.model_dump(mode="json"),
        "metrics": result.metrics,
        "metrics_per_workload": result.per_workload,
        "train_wall_s": round(train_wall, 1),
        "versions": {"metatune": __version__, "tvm": tvm.__version__, "torch": torch.__version__},
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    extra = {"dataset_id": dataset_card["dataset_id"]}
    main.save(out / WEIGHTS_FILE, extra)
    pretrained.save(out / PRETRAINED_FILE, extra)
    if plain is not None:
        plain.save(out / PLAIN_FILE, extra)
    (out / CARD_FILE).write_text(json.dumps(card, indent=2) + "\n")
    (out / CURVES_FILE).write_text(json.dumps(log.curves) + "\n")
    write_evaluation(out, result, log)
    echo(f"training took {train_wall / 60:.1f} min; wrote {out}")
    return card


def portable_path(path: Path) -> str:
    """A path relative to the repository when it is inside it (cards travel between machines)."""
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


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
    if side_study:
        config = with_evaluation(config, ks, methods)
    torch.set_num_threads(config.threads)
    main = TrainedModel.load(run_dir / WEIGHTS_FILE)
    pretrained = TrainedModel.load(run_dir / PRETRAINED_FILE)
    plain = TrainedModel.load(run_dir / PLAIN_FILE) if (run_dir / PLAIN_FILE).exists() else None
    if methods is not None and "metatune-plain" not in methods:
        plain = None
    _, _, _, heldout = load_splits(data_dir, config)
    result = run_evaluation(config, data_dir, heldout, main, pretrained, plain, echo)
    if side_study:
        echo(format_table(result))
        return result
    card["metrics"], card["metrics_per_workload"] = result.metrics, result.per_workload
    card_path.write_text(json.dumps(card, indent=2) + "\n")
    log = TrainLog(json.loads((run_dir / CURVES_FILE).read_text()))
    write_evaluation(run_dir, result, log)
    return result

