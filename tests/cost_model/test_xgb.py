"""The evaluation's XGBoost baselines on real records of the shipped dataset."""

from __future__ import annotations

import numpy as np
import pytest

from metatune import MetatuneError
from metatune.cost_model.xgb import new_xgb, record_task, xgb_predict
from metatune.dataset.store import DatasetStore
from metatune.fileio import REPO_ROOT

SHIPPED = REPO_ROOT / "datasets" / "x86_64-sapphirerapids-2c"


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A dataset of two sealed training workloads (symlinked), and one held-out workload."""
    root = tmp_path_factory.mktemp("dataset")
    shipped = [s for s in DatasetStore(SHIPPED) if s.sealed]
    train = [s for s in shipped if s.split == "train"][:2]
    held = next(s for s in shipped if s.split != "train")
    for store in train:
        link = root / "workloads" / store.workload.family / store.dir.name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(store.dir)
    return root, held


def test_transfer_predicts_without_samples_and_its_copies_are_independent(stores, target):
    from metatune.cost_model.xgb_transfer import TransferredXGB

    root, held = stores
    task = record_task(held, target)
    support, query = np.arange(8), np.arange(8, 40)
    assert np.isnan(xgb_predict(new_xgb(), task, [], query)).all(), "a cold model has nothing to predict from"

    transfer = TransferredXGB.from_dataset(root, target, echo=lambda _: None)
    cold = xgb_predict(transfer.fresh(), task, [], query)
    assert np.isfinite(cold).all() and np.ptp(cold) > 0, "the transferred model must rank an unseen workload"
    adapted = xgb_predict(transfer.fresh(), task, support, query)
    assert not np.allclose(adapted, cold), "the support samples must change the model"
    again = xgb_predict(transfer.fresh(), task, [], query)
    np.testing.assert_allclose(again, cold, err_msg="updating one copy leaked into the next fresh() copy")


def linked_dataset(root, stores) -> None:
    for store in stores:
        link = root / "workloads" / store.workload.family / store.dir.name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(store.dir)


def test_features_extracted_once_or_by_workers_are_tvms_own(stores, target, tmp_path):
    """The evaluation's shortcuts change nothing: a task's features looked up instead of re-extracted
    give TVM's predictions, and training features extracted by two workers are one process's."""
    from metatune.cost_model.xgb_transfer import cache_training_features

    root, held = stores
    task = record_task(held, target)
    support, query = np.arange(8), np.arange(8, 40)
    np.random.seed(0)
    own = xgb_predict(new_xgb(), task, support, query)
    np.random.seed(0)
    np.testing.assert_array_equal(xgb_predict(new_xgb(task.extractor), task, support, query), own)

    train = [s for s in DatasetStore(root) if s.split == "train"]
    linked_dataset(tmp_path / "one", train)
    linked_dataset(tmp_path / "two", train)
    alone = cache_training_features(tmp_path / "one", target, echo=lambda _: None, workers=1)
    shared = cache_training_features(tmp_path / "two", target, echo=lambda _: None, workers=2)
    assert len(alone) == len(shared) == 2
    for a, b in zip(alone, shared):
        with np.load(a) as x, np.load(b) as y:
            assert sorted(x.files) == sorted(y.files)
            assert all(np.array_equal(x[k], y[k]) for k in x.files)


def test_pretraining_skips_a_workload_without_records_and_another_tvms_features(stores, tmp_path, monkeypatch,
                                                                              target):
    """A workload sealed after every attempt failed has nothing to learn from (its features would not
    concatenate); features cached by another TVM (its own PerStoreFeature) or for another target (a
    cross-device study replays a dataset for its own) are extracted again."""
    import tvm
    from tvm.target import Target

    from metatune.cost_model.xgb_transfer import training_feature_caches
    from metatune.dataset.store import WorkloadStore
    from metatune.workload.operators import Workload

    root, _ = stores
    linked_dataset(tmp_path, [s for s in DatasetStore(root) if s.split == "train"][:1])
    empty = WorkloadStore(tmp_path / "workloads" / "dense" / "empty", Workload.parse("dense:m=8,n=8,k=8"), "train")
    empty.seal()
    assert empty.sealed and empty.num_records == 0
    caches = training_feature_caches(tmp_path, target)
    assert [store.num_records > 0 for store, _ in caches] == [True]
    assert [path for _, path in training_feature_caches(tmp_path, target)] == [path for _, path in caches]
    other = Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})
    assert [path for _, path in training_feature_caches(tmp_path, other)] != [path for _, path in caches]
    monkeypatch.setattr(tvm, "__version__", "0.0.0-other")
    assert [path for _, path in training_feature_caches(tmp_path, target)] != [path for _, path in caches]


def test_a_dataset_of_another_device_is_not_this_devices(tmp_path, monkeypatch):
    """$METATUNE_DATASET naming another device's measurements is refused for xgb-transfer (it learns the
    device's own costs); a dataset of this device, or one without a card, is taken."""
    from metatune.cost_model.xgb_transfer import DATASET_ENV, default_dataset_dir
    from metatune.dataset.card import write_card

    monkeypatch.delenv(DATASET_ENV, raising=False)
    assert default_dataset_dir("x86_64-znver3-2c").name == "x86_64-znver3-2c"
    monkeypatch.setenv(DATASET_ENV, str(tmp_path))
    assert default_dataset_dir("x86_64-znver3-2c") == tmp_path  # no card
    write_card(tmp_path, {"device": {"device_id": "x86_64-sapphirerapids-2c"}})
    assert default_dataset_dir("x86_64-sapphirerapids-2c") == tmp_path
    with pytest.raises(MetatuneError, match="holds measurements of x86_64-sapphirerapids-2c, not of the device"):
        default_dataset_dir("x86_64-znver3-2c")
