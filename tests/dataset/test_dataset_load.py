"""A dataset build times a batch again while other processes keep the cores busy, and marks what it keeps."""

import os
import shutil
import signal

import pytest

from metatune import MetatuneError
from metatune.dataset import builder
from metatune.dataset.card import compute_counts, read_card, write_card
from metatune.dataset.store import DISTURBED_FILE, DatasetStore
from metatune.env.device import usable_cores
from metatune.measure.cpu_load import DISTURBING_CORES
from metatune.workload.operators import Workload
from tests.dataset.test_dataset import write_spec
from tests.tune.test_load_watch import outside_hog

SPEC = """
name: load
seed: 3
samples_per_workload: 2
max_gflop: 0.01
families:
  dense:
    workloads: 1
    params: {m: {choices: [16]}, n: {choices: [32]}, k: {choices: [16]}}
"""


def test_batches_timed_beside_busy_processes_are_timed_again_then_kept_marked(tmp_path, monkeypatch):
    monkeypatch.setattr(builder, "RETRY_PAUSE_S", 0.1)
    spec, out = write_spec(tmp_path, text=SPEC), tmp_path / "ds"
    busy = [outside_hog() for _ in range(os.cpu_count() or 1)]
    try:
        card = builder.build_dataset(spec, out, batch=2, retries_under_load=1)
    finally:
        for pid in busy:
            os.kill(pid, signal.SIGKILL)
    assert card["load_check"]["watched"] and card["load_check"]["retries"] == 1
    assert card["load_check"]["remeasured_batches"] >= 1, "busy loops on every core, yet no batch was timed again"
    assert card["disturbed_records"] >= 1 and card["totals"]["complete"] == 1
    for store in DatasetStore(out):
        assert store.sealed and not (store.dir / DISTURBED_FILE).exists()
        assert set(store.disturbed) <= set(store.record_keys())
        assert all(cores >= DISTURBING_CORES for cores in store.disturbed.values())
    assert sum(len(s.disturbed) for s in DatasetStore(out)) == card["disturbed_records"]
    assert "batches timed again" in builder.summarize(card)

    again = builder.build_dataset(spec, out, batch=2)  # a resume with nothing left keeps the count
    assert again["load_check"]["remeasured_batches"] == card["load_check"]["remeasured_batches"]


def test_disturbed_marks_survive_sealing_and_are_counted(tmp_path):
    store = DatasetStore(tmp_path).open(Workload.parse("dense:m=8,n=8,k=8"), "train")
    store.append_disturbed("abc", 1.234)
    store.seal()
    reopened = next(iter(DatasetStore(tmp_path)))
    assert reopened.disturbed == {"abc": 1.23}
    assert compute_counts(DatasetStore(tmp_path))["disturbed_records"] == 1


def test_a_dataset_built_before_the_check_says_it_was_not_watched():
    from metatune.fileio import REPO_ROOT

    card = read_card(REPO_ROOT / "datasets" / "x86_64-sapphirerapids-2c")
    assert "load_check" not in card
    assert "not watched" in builder.summarize(card)


def strip_load_check(out):
    """The card a build wrote before the load check existed."""
    card = read_card(out)
    del card["load_check"]
    write_card(out, card)
    return card


def test_a_build_with_nothing_left_to_measure_leaves_the_card_as_it_was(tmp_path):
    spec, out = write_spec(tmp_path, samples=2), tmp_path / "ds"
    builder.build_dataset(spec, out, batch=2)
    old = strip_load_check(out)
    assert builder.build_dataset(spec, out, batch=2) == old
    assert read_card(out) == old, "a resume that measured nothing rewrote the card"


def test_resuming_a_build_of_unwatched_parts_does_not_call_the_whole_watched(tmp_path):
    spec, out = write_spec(tmp_path, samples=2), tmp_path / "ds"
    builder.build_dataset(spec, out, batch=2)
    strip_load_check(out)
    shutil.rmtree(next(iter(DatasetStore(out))).dir)  # one workload left to measure, now with the check on
    card = builder.build_dataset(spec, out, batch=2)
    assert card["totals"]["complete"] == card["totals"]["workloads"]
    assert card["load_check"]["watched"] is False
    assert "not watched for all" in builder.summarize(card)


def test_a_build_that_crashed_in_its_first_batch_refuses_another_device(tmp_path, monkeypatch):
    """The card names the device before anything is measured: a crash cannot leave a dataset that
    another device's build would append to."""
    spec, out = write_spec(tmp_path, samples=2), tmp_path / "ds"

    def crash(*args, **kwargs):
        raise RuntimeError("the machine went down")

    monkeypatch.setattr(builder.DatasetBuilder, "_measure_batch", crash)
    with pytest.raises(RuntimeError, match="went down"):
        builder.build_dataset(spec, out, batch=2)
    card = read_card(out)
    assert card is not None and card["totals"]["records"] == 0
    with pytest.raises(MetatuneError, match="holds measurements of"):
        builder.build_dataset(spec, out, batch=2, target=f"llvm -mcpu=haswell -num-cores={usable_cores()}")
