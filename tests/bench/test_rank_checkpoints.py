"""bench/rank_checkpoints.py: re-timed programs are matched to their stored records and ranked against the new timings."""

from __future__ import annotations

import json

import pytest

from bench.rank_checkpoints import rank_retimed
from metatune.dataset.store import DatasetStore
from metatune.fileio import REPO_ROOT
from metatune.measure.measurer import median_latency

DATA = REPO_ROOT / "datasets" / "x86_64-znver3-2c-adapt-cpu"  # the smallest shipped CPU dataset
CHECKPOINT = "x86_64-znver3-2c/v1"


def retimed_file(path, now_of):
    """A retime_dataset.py JSON for 8 programs of the dataset's first workload, timed `now_of(stored)`."""
    store = next(iter(DatasetStore(DATA)))
    stored = [median_latency(s) for s in store.run_secs()][:8]
    entry = {"workload": store.workload.key, "stored_s": stored, "now_s": [now_of(x) for x in stored]}
    path.write_text(json.dumps({"workloads": {store.dir.name: entry}}))
    return path, store.workload.key


def test_labels_are_scored_against_the_new_timings_and_the_model_on_the_same_records(tmp_path):
    same, key = retimed_file(tmp_path / "same.json", lambda s: s)
    reversed_order, _ = retimed_file(tmp_path / "reversed.json", lambda s: 1.0 / s)  # the slowest is now the fastest
    agree = rank_retimed(DATA, [CHECKPOINT], [same, same])
    flipped = rank_retimed(DATA, [CHECKPOINT], [reversed_order, reversed_order])
    assert agree["per_workload"]["stored labels"][key] == pytest.approx(1.0)
    assert flipped["per_workload"]["stored labels"][key] == pytest.approx(0.0)
    model_agree, model_flipped = agree["per_workload"][CHECKPOINT][key], flipped["per_workload"][CHECKPOINT][key]
    assert model_agree + model_flipped == pytest.approx(1.0)  # the same 8 records scored both times, orders reversed


def test_checkpoints_of_two_templates_are_refused_and_one_trained_here_is_named(capsys):
    from bench.rank_checkpoints import open_models

    with pytest.raises(SystemExit, match="different templates"):
        open_models(DATA, [CHECKPOINT, "cuda-sm90-h100/v1"])
    open_models(DATA, [CHECKPOINT])  # v1 was adapted on this dataset
    assert f"warning: {CHECKPOINT} was trained on {DATA.name}" in capsys.readouterr().err
    open_models(REPO_ROOT / "datasets" / "x86_64-znver3-2c", [CHECKPOINT])
    assert "warning" not in capsys.readouterr().err
