"""`xgb-transfer`: TVM's XGBModel warm-started on the training split of a measured dataset.

This is how a MetaSchedule user transfers a cost model across workloads: the model's feature
groups are filled with every training workload's records, its booster is trained on them, and
tuning then appends the new workload's measurements as one more group (retraining after every
batch, so the new workload is really learnt and not drowned by the adaptive-training threshold).

The PerStoreFeature vectors of the training records are cached per workload as `.npz` (no pickle:
TVM's own `XGBModel.save/load` round-trips through `np.load(allow_pickle=True)`, which we avoid).
"""

from __future__ import annotations

import collections
import hashlib
import io
import logging
import os
from concurrent.futures import as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from metatune import MetatuneError
from metatune.cost_model.xgb import new_xgb, record_task
from metatune.dataset.card import read_card
from metatune.dataset.store import DatasetStore, WorkloadStore
from metatune.env.processes import process_pool, worker_count
from metatune.fileio import REPO_ROOT, write_atomic
from metatune.measure.measurer import median_latency
from metatune.progress import progress_bar

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule import MeasureCandidate

logger = logging.getLogger(__name__)

DATASET_ENV = "METATUNE_DATASET"


def default_dataset_dir(device_id: str) -> Path:
    """$METATUNE_DATASET, else the dataset shipped for this device at the repository root. A dataset
    whose card names another device is refused: xgb-transfer learns this device's costs."""
    env = os.environ.get(DATASET_ENV)
    if not env:
        return REPO_ROOT / "datasets" / device_id
    card = read_card(Path(env))
    measured_on = (card or {}).get("device", {}).get("device_id", device_id)
    if measured_on != device_id:
        raise MetatuneError(f"${DATASET_ENV}={env} holds measurements of {measured_on}, not of the device tuned "
                            f"for ({device_id}): xgb-transfer pretrains on that device's own; unset it or point it "
                            "at a dataset of this device")
    return Path(env)


@dataclass
class FeatureGroup:
    """One training workload in XGBModel's form: per-candidate store features and mean costs."""

    group_hash: str
    features: list[np.ndarray]
    costs: np.ndarray


def _cache_path(store: WorkloadStore, cache_dir: Path, target: Any) -> Path:
    """Keyed on the sealed (immutable) workload's records, the target they are replayed for (another
    device's study replays them for its own) and TVM's version: the features are TVM's PerStoreFeature,
    whose length and meaning another TVM may change."""
    from tvm import __version__ as tvm_version

    key = f"{store.workload.key}/{store.num_records}/{target}/tvm-{tvm_version}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_dir / f"{store.workload.family}-{digest}.npz"


def extract_features(store: WorkloadStore, target: Any,
                     candidates: Sequence["MeasureCandidate"] | None = None) -> FeatureGroup:
    """The workload in XGBModel's form (its records replayed here unless `candidates` holds the replays)."""
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import shash2hex
    from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

    task = record_task(store, target, candidates)
    features = [x.numpy().astype("float32") for x in PerStoreFeature().extract_from(task.context, task.candidates)]
    costs = np.array([median_latency([float(s) for s in r.run_secs]) for r in task.results], dtype="float32")
    return FeatureGroup(shash2hex(task.context.mod), features, costs)


def training_stores(dataset_dir: Path) -> list[WorkloadStore]:
    """Every complete training workload with records, or a one-line error where there is none."""
    # a workload sealed with no record (every attempt failed) has nothing to learn from
    stores = [s for s in DatasetStore(dataset_dir, repair=False) if s.split == "train" and s.sealed and s.num_records]
    if not stores:
        raise MetatuneError(f"xgb-transfer needs the training records of a dataset, and {dataset_dir} has no "
                            f"complete training workload: "
                            f"build one with `metatune dataset build` or set ${DATASET_ENV}")
    return stores


def training_feature_caches(dataset_dir: Path, target: Any) -> list[tuple[WorkloadStore, Path]]:
    """Every complete training workload and the file its features for `target` are cached in (present or not)."""
    cache_dir = Path(dataset_dir) / "cache" / "xgb-features"
    return [(store, _cache_path(store, cache_dir, target)) for store in training_stores(dataset_dir)]


def cache_training_features(dataset_dir: Path, target: Any, echo: Callable[[str], None] = logger.info,
                            workers: int | None = None) -> list[Path]:
    """The feature cache file of every complete training workload, extracting the missing ones first,
    one process per core (`workers` caps them): replaying and featurising ~13,000 records takes minutes."""
    caches = training_feature_caches(dataset_dir, target)
    missing = [(store, path) for store, path in caches if not path.exists()]
    if missing:
        echo(f"xgb-transfer: extracting the features of {len(missing)} training workloads")
    n = worker_count(len(missing), workers)
    with progress_bar() as bar:
        task = bar.add_task("xgb features", total=len(missing), status="")
        if n > 1:
            with process_pool(n, _start_feature_worker) as pool:
                futures = [pool.submit(_extract_to_cache, str(store.dir), str(path), target.export())
                           for store, path in missing]
                for future in as_completed(futures):
                    bar.update(task, advance=1, status=future.result())
        else:
            for store, path in missing:
                save_features(extract_features(store, target), path)
                bar.update(task, advance=1, status=store.workload.family)
    return [path for _, path in caches]


def _start_feature_worker() -> None:
    """One TVM thread per worker: the workers already occupy every core."""
    os.environ["TVM_NUM_THREADS"] = "1"


def _extract_to_cache(store_dir: str, path: str, target: dict[str, Any]) -> str:
    from tvm.target import Target

    store = WorkloadStore(Path(store_dir), repair=False)
    save_features(extract_features(store, Target(target)), Path(path))
    return store.workload.family


def save_features(group: FeatureGroup, path: Path) -> None:
    """Write a workload's features where `training_feature_caches` says they belong."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, group_hash=np.array(group.group_hash), costs=group.costs,
                        rows=np.array([len(f) for f in group.features], dtype=np.int64),
                        features=np.concatenate(group.features, axis=0))
    write_atomic(path, buffer.getvalue())


def _load(path: Path) -> FeatureGroup:
    with np.load(path, allow_pickle=False) as data:
        offsets = np.cumsum(data["rows"])[:-1]
        return FeatureGroup(str(data["group_hash"]), list(np.split(data["features"], offsets)), data["costs"])


class TransferredXGB:
    """The pretrained XGBModel state; `fresh()` hands out independent copies for each tuning run."""

    def __init__(self, groups: list[FeatureGroup], booster: Any) -> None:
        self.groups = groups
        self.booster = booster

    @classmethod
    def from_dataset(cls, dataset_dir: Path, target: Any, echo: Callable[[str], None] = logger.info,
                     workers: int | None = None) -> "TransferredXGB":
        groups = [_load(path) for path in cache_training_features(dataset_dir, target, echo, workers)]
        model = new_xgb()
        state = _fill(model, groups)
        state._train(xs=[f for g in groups for f in g.features],  # pylint: disable=protected-access
                     ys=np.concatenate([g.costs.min() / g.costs for g in groups]))
        echo(f"xgb-transfer: trained on {state.data_size} records of {len(groups)} training workloads")
        return cls(groups, state.booster)

    def fresh(self, extractor: Any = None) -> Any:
        """An XGBModel with the pretrained booster and groups (on PerStoreFeature, or `extractor`)."""
        model = new_xgb(extractor)
        state = _fill(model, self.groups)
        state.booster = self.booster.copy()
        state.last_train_size = state.data_size
        return model


def _fill(model: Any, groups: list[FeatureGroup]) -> Any:
    """Put the groups into the model's Python state (`_inst`: attributes set on TVM's derived-object
    wrapper would not reach the instance whose methods run) and return that state."""
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import FeatureGroup as TVMFeatureGroup

    state = model._inst  # pylint: disable=protected-access
    state.data = collections.OrderedDict(
        (g.group_hash, TVMFeatureGroup(group_hash=g.group_hash, features=list(g.features), costs=g.costs.copy()))
        for g in groups
    )
    state.data_size = sum(len(g.costs) for g in groups)
    return state
