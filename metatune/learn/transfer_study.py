"""MetaTune's cross-platform claim, measured (`metatune evaluate --transfer`).

A cost model meta-trained on device A meets device B: how well does it rank B's held-out
programs after k of B's measurements, next to what else a user of B could do? Every method sees
the same support/query draws (metatune.learn.evaluate's protocol), on B's held-out workloads:

* `source`: A's checkpoint, adapted by MAML's inner loop (what `tune` does with it on B);
* `source-finetune`: A's checkpoint fine-tuned with Adam on the k samples (transfer learning; its
  rate and steps chosen on B's training workloads, never on the held-out ones);
* `adapted`: the checkpoint `zoo adapt` made for B from A, inner loop as for `source`;
* `native`: B's own checkpoint (trained on B's dataset), inner loop as for `source`;
* `scratch`: the same network, randomly initialised, trained on the k samples;
* `xgb`: TVM's XGBoost model on the k samples; `xgb-transfer`: pretrained on A's training data.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from metatune import MetatuneError, __version__
from metatune.cost_model.xgb import new_xgb, record_task
from metatune.cost_model.xgb_transfer import TransferredXGB
from metatune.dataset.card import dataset_card, read_card
from metatune.dataset.store import DatasetStore
from metatune.encode.graphs import EncodedWorkload, dataset_template, load_encoded, split_sets
from metatune.encode.supergraph import GraphEncoder
from metatune.env.device import DeviceFingerprint
from metatune.fileio import REPO_ROOT
from metatune.learn.config import EvalConfig
from metatune.learn.evaluate import (
    EvalResult,
    Method,
    evaluate,
    format_table,
    gcn_adapter,
    scratch_trainer,
    support_trainer,
    xgb_method,
)
from metatune.learn.named_checkpoint import NamedCheckpoint, load_from_zoo, open_checkpoint
from metatune.learn.train import portable_path
from metatune.zoo import ZooEntry, default_zoo_dir, read_index, read_zoo_card
from metatune.zoo.index import code_template_version

Echo = Callable[[str], object]
METHODS = ("source", "source-finetune", "adapted", "native", "scratch", "xgb", "xgb-transfer")
# Fine-tuning's (learning rate, Adam steps): chosen per study on B's training workloads, so that the
# transfer-learning baseline is as good as it can be made without looking at the held-out ones.
FINETUNE_GRID = ((1e-4, 30), (1e-4, 150), (1e-3, 30), (1e-3, 150))
CHOICE_K = 16  # support size the choice is made at
CHOICE_WORKLOADS = 8  # training workloads it is made on (the first, in the dataset's order)
STUDY_FILE = "transfer.json"
TABLE_FILE = "transfer.md"


STUDY_KS = (0, 8, 16, 32, 64)


def study_config(ks: tuple[int, ...] = STUDY_KS, repeats: int = 3, methods: tuple[str, ...] = METHODS) -> EvalConfig:
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise MetatuneError(f"unknown methods {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    return EvalConfig(ks=ks, repeats=repeats, methods=methods)


@dataclass
class TransferStudy:
    """Device A's checkpoint (and its dataset, for xgb-transfer) against device B's data."""

    source: NamedCheckpoint
    target_data: Path
    native: NamedCheckpoint | None = None
    adapted: NamedCheckpoint | None = None
    source_data: Path | None = None

    def __post_init__(self) -> None:
        self.finetune_scores: dict[str, float] = {}
        card = dataset_card(self.target_data)
        self.target_device: str = card["device"]["device_id"]
        self.target_fingerprint = DeviceFingerprint.from_json(card["device"])
        if self.source.device_id == self.target_device:
            raise MetatuneError(f"{self.source.id} was trained on {self.target_device}, the device of "
                                f"{self.target_data}: a transfer study needs another device's dataset")
        template = dataset_template(self.target_data).version
        for role, named in self._checkpoints().items():
            if named.template_version != template:
                raise MetatuneError(f"{role} checkpoint {named.id} encodes programs with super-graph template "
                                    f"{named.template_version}; {self.target_data}'s programs use {template}")
        for role, named in (("native", self.native), ("adapted", self.adapted)):
            if named is not None and named.device_id not in (None, self.target_device):
                raise MetatuneError(f"{role} checkpoint {named.id} is of {named.device_id}, not of "
                                    f"{self.target_device} ({self.target_data}'s device)")
        if self.native is not None and self.native.adapted_from:
            raise MetatuneError(f"{self.native.id} was adapted from {self.native.adapted_from}, not trained on "
                                f"{self.target_device}'s dataset: pass it as the adapted checkpoint")
        if self.adapted is not None and not self.adapted.adapted_from:
            raise MetatuneError(f"{self.adapted.id} was not made by `metatune zoo adapt` (its card names no "
                                "source): pass it as the native checkpoint")

    def _checkpoints(self) -> dict[str, NamedCheckpoint]:
        named = {"source": self.source, "native": self.native, "adapted": self.adapted}
        return {role: c for role, c in named.items() if c is not None}

    def encoded(self, min_records: int) -> tuple[list[EncodedWorkload], list[EncodedWorkload]]:
        """B's training and held-out workloads, encoded with the checkpoints' template."""
        encoded = load_encoded(self.target_data, GraphEncoder(self.source.trained.builder.template),
                               min_records=min_records)
        train, heldout = split_sets(encoded)
        if not heldout:
            raise MetatuneError(f"{self.target_data} has no held-out workload with >= {min_records} records")
        return train, heldout

    def choose_finetuning(self, train: list[EncodedWorkload], seed: int, echo: Echo) -> tuple[float, int]:
        """The (rate, steps) of FINETUNE_GRID whose fine-tuned source ranks B's training workloads best at
        k = CHOICE_K; records every pair's score in `finetune_scores`."""
        workloads = [w for w in train if len(w) >= CHOICE_K + 10][:CHOICE_WORKLOADS]
        if not workloads:
            raise MetatuneError(f"{self.target_data} has no training workload with >= {CHOICE_K + 10} records to "
                                "choose fine-tuning's rate and steps on; leave source-finetune out (--methods)")
        source = self.source.trained
        check = EvalConfig(ks=(CHOICE_K,), repeats=1, seed=seed, methods=("finetune",))
        scores: dict[tuple[float, int], float] = {}
        for lr, steps in FINETUNE_GRID:
            method = support_trainer(lambda: copy.deepcopy(source.model), source.builder, workloads, steps, lr)
            metrics = evaluate(workloads, {"finetune": method}, check).metrics["finetune"][str(CHOICE_K)]
            scores[(lr, steps)] = metrics["pairwise_acc"]
        self.finetune_scores = {f"lr={lr:g},steps={steps}": v for (lr, steps), v in scores.items()}
        best = max(FINETUNE_GRID, key=scores.__getitem__)
        listed = ", ".join(f"{k} {v:.3f}" for k, v in self.finetune_scores.items())
        echo(f"source-finetune: lr {best[0]:g}, {best[1]} steps (pairwise accuracy on {len(workloads)} training "
             f"workloads at k = {CHOICE_K}: {listed})")
        return best

    def methods(self, train: list[EncodedWorkload], heldout: list[EncodedWorkload], config: EvalConfig,
                echo: Echo) -> dict[str, Method]:
        """Every method this study can run (a checkpoint or dataset that was not given drops its rows)."""
        source = self.source.trained
        methods: dict[str, Method] = {"source": gcn_adapter(source.model, source.builder, heldout, source.maml)}
        if "source-finetune" in config.methods:
            lr, steps = self.choose_finetuning(train, config.seed, echo)
            methods["source-finetune"] = support_trainer(lambda: copy.deepcopy(source.model), source.builder,
                                                         heldout, steps, lr)
        for role, named in (("adapted", self.adapted), ("native", self.native)):
            if named is not None:
                methods[role] = gcn_adapter(named.trained.model, named.trained.builder, heldout, named.trained.maml)
        methods["scratch"] = scratch_trainer(source.model, source.builder, heldout, config)
        methods = {name: m for name, m in methods.items() if name in config.methods}
        if {"xgb", "xgb-transfer"} & set(config.methods):
            stores = {s.workload.key: s for s in DatasetStore(self.target_data, repair=False)}
            echo("xgb: extracting held-out candidates")
            tasks = [record_task(stores[w.key], self.target_fingerprint.tvm_target()) for w in heldout]
            if "xgb" in config.methods:
                methods["xgb"] = xgb_method(tasks, new_xgb)
            if "xgb-transfer" in config.methods and self.source_data is not None:
                source_card = dataset_card(self.source_data)
                target = DeviceFingerprint.from_json(source_card["device"]).tvm_target()
                methods["xgb-transfer"] = xgb_method(tasks, TransferredXGB.from_dataset(self.source_data, target,
                                                                                         echo).fresh)
        return methods

    def run(self, config: EvalConfig, echo: Echo = print) -> EvalResult:
        train, heldout = self.encoded(min(config.ks) + 10)
        echo(f"transfer {self.source.id} -> {self.target_device}: {len(heldout)} held-out workloads, "
             f"k in {list(config.ks)}, {config.repeats} draws each")
        return evaluate(heldout, self.methods(train, heldout, config, echo), config,
                        on_step=lambda s: echo(f"evaluate {s}"))

    def describe(self) -> dict[str, Any]:
        """What the result was measured with: enough to re-run it."""
        dataset = read_card(self.target_data) or {}
        return {
            "source": self.source.provenance(),
            "target": {"device_id": self.target_device, "dataset": portable_path(self.target_data),
                       "dataset_id": dataset.get("dataset_id")},
            "native": self.native.provenance() if self.native else None,
            "adapted": self.adapted.provenance() | {"adapted_from": self.adapted.adapted_from}
            if self.adapted else None,
            "source_data": portable_path(self.source_data) if self.source_data else None,
            "finetune_choice": {"grid_scores": self.finetune_scores, "k": CHOICE_K,
                                "score": "median pairwise accuracy on B's training workloads"}
            if self.finetune_scores else None,
        }


def zoo_checkpoints_of(device_id: str, root: Path, roles: set[str]) -> tuple[NamedCheckpoint | None,
                                                                              NamedCheckpoint | None]:
    """The newest native and the newest adapted zoo checkpoint of a device that this code can load
    (None where it has none), each loaded only if its role ("native", "adapted") is in `roles`."""
    found: dict[str, tuple[ZooEntry, dict[str, Any]]] = {}
    for entry in sorted(read_index(root), key=lambda e: e.number):
        if entry.device_id == device_id and entry.template_version == code_template_version(entry.arch):
            card = read_zoo_card(entry)
            found["adapted" if card.get("adapted_from") else "native"] = entry, card
    named = {role: NamedCheckpoint(load_from_zoo(e), e.id, e.sha256, card)
             for role, (e, card) in found.items() if role in roles}
    return named.get("native"), named.get("adapted")


def write_study(out: Path, study: TransferStudy, config: EvalConfig, result: EvalResult) -> Path:
    """`transfer.json` (setup, config, medians and per-workload metrics) and `transfer.md` (the table)."""
    import torch
    import tvm

    out.mkdir(parents=True, exist_ok=True)
    data = {**study.describe(), "config": config.model_dump(mode="json"), "metrics": result.metrics,
            "metrics_per_workload": result.per_workload,
            "versions": {"metatune": __version__, "tvm": tvm.__version__, "torch": torch.__version__},
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    (out / STUDY_FILE).write_text(json.dumps(data, indent=2) + "\n")
    (out / TABLE_FILE).write_text(f"# {study.source.id} -> {study.target_device}\n\n{format_table(result)}\n")
    return out / STUDY_FILE


def default_source_data(source: NamedCheckpoint) -> Path | None:
    """A's dataset as its card names it, when this checkout has it (xgb-transfer's training data)."""
    path = source.card.get("dataset", {}).get("path")
    if not path:
        return None
    candidate = Path(path) if Path(path).is_absolute() else REPO_ROOT / path
    return candidate if read_card(candidate) is not None else None


def run_study(source_name: str, data: Path, config: EvalConfig, native: str | None = None, adapted: str | None = None,
              source_data: Path | None = None, out: Path | None = None, zoo_root: Path | None = None,
              echo: Echo = print, threads: int = 1) -> Path:
    """The whole `metatune evaluate --transfer`: resolve the checkpoints by name (B's own and adapted
    ones default to the zoo's newest for B's device), run the study, write and print its table.
    `threads`: torch's; 1, as in training, so that it does not oversubscribe small machines."""
    import torch

    torch.set_num_threads(threads)
    card = dataset_card(data)
    root = zoo_root if zoo_root is not None else default_zoo_dir()
    source = open_checkpoint(source_name, root)
    wanted = {role for role, given in (("native", native), ("adapted", adapted)) if not given and role in config.methods}
    zoo_native, zoo_adapted = zoo_checkpoints_of(card["device"]["device_id"], root, wanted)
    study = TransferStudy(
        source, data,
        native=open_checkpoint(native, root) if native else zoo_native,
        adapted=open_checkpoint(adapted, root) if adapted else zoo_adapted,
        source_data=source_data if source_data is not None else default_source_data(source))
    for role, missing in (("native", study.native is None), ("adapted", study.adapted is None)):
        if missing and role in config.methods:
            echo(f"no {role} checkpoint of {study.target_device}: its rows are left out")
    if study.adapted is not None and study.adapted.card.get("dataset", {}).get("id") == card["dataset_id"]:
        echo(f"note: {study.adapted.id} was adapted on {data}'s measurements, and its held-out workloads chose it: "
             "its rows are optimistic; study on the device's own dataset instead")
    if study.source_data is None and "xgb-transfer" in config.methods:
        echo(f"no dataset of {source.id} here (--source-data): xgb-transfer is left out")
    result = study.run(config, echo)
    name = f"transfer-{source.device_id or 'source'}-to-{study.target_device}"
    path = write_study(out if out is not None else Path("runs") / name, study, config, result)
    echo(format_table(result))
    echo(f"wrote {path}")
    return path
