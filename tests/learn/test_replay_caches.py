"""One replay per workload fills both training caches with exactly what each cache's own filler writes."""

from __future__ import annotations

import numpy as np
from safetensors import safe_open

from metatune.cost_model.xgb_transfer import cache_training_features
from metatune.dataset.store import DatasetStore
from metatune.encode.graphs import graph_caches, load_encoded
from metatune.encode.supergraph import GraphEncoder, Template
from metatune.fileio import REPO_ROOT
from metatune.learn.replay_caches import fill_training_caches, missing_caches

SHIPPED = REPO_ROOT / "datasets" / "x86_64-sapphirerapids-2c"


def linked_dataset(root, stores) -> None:
    for store in stores:
        link = root / "workloads" / store.workload.family / store.dir.name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(store.dir)


def same_graphs(a, b) -> bool:
    with safe_open(str(a), "pt") as x, safe_open(str(b), "pt") as y:
        return (x.metadata() == y.metadata() and sorted(x.keys()) == sorted(y.keys())
                and all(bool((x.get_tensor(k) == y.get_tensor(k)).all()) for k in x.keys()))


def same_features(a, b) -> bool:
    with np.load(a) as x, np.load(b) as y:
        return sorted(x.files) == sorted(y.files) and all(np.array_equal(x[k], y[k]) for k in x.files)


def test_one_replay_fills_both_caches_as_their_own_fillers_do(target, tmp_path):
    shipped = [s for s in DatasetStore(SHIPPED) if s.sealed]
    chosen = [next(s for s in shipped if s.split == "train"), next(s for s in shipped if s.split != "train")]
    combined, separate = tmp_path / "combined", tmp_path / "separate"
    linked_dataset(combined, chosen)
    linked_dataset(separate, chosen)
    encoder = GraphEncoder(Template.for_target(target))

    jobs = missing_caches(combined, encoder, min_records=1, with_features=True, target=target)
    # the training workload lacks both caches; the held-out one only has loop graphs to make
    assert sorted((j.store.split == "train", j.graphs is not None, j.features is not None) for j in jobs) == [
        (False, True, False), (True, True, True)]
    assert fill_training_caches(combined, encoder, target, 1, True, workers=2, echo=lambda _: None) == 2
    assert missing_caches(combined, encoder, min_records=1, with_features=True, target=target) == []
    assert fill_training_caches(combined, encoder, target, 1, True, echo=lambda _: None) == 0

    load_encoded(separate, encoder, workers=1)
    features = cache_training_features(separate, target, echo=lambda _: None, workers=1)
    graphs = [p for _, p, current in graph_caches(separate, encoder) if current]
    assert len(graphs) == 2 and len(features) == 1
    for path in graphs:
        assert same_graphs(path, combined / path.relative_to(separate))
    assert same_features(features[0], combined / features[0].relative_to(separate))

    features[0].unlink()  # one cache gone: only it is made again
    (job,) = missing_caches(separate, encoder, min_records=1, with_features=True, target=target)
    assert job.graphs is None and job.features == features[0]
