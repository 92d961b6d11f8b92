"""`metatune dataset build` under Ctrl-C, with a second build on its directory: real processes."""

from __future__ import annotations

import signal

from metatune.dataset.card import compute_counts, read_card
from metatune.dataset.store import DatasetStore
from metatune.fileio import LOCK_FILE
from tests.processes import group_members, run, start, stop, wait_until

SAMPLES = 6  # two batches of 3 per workload: a build signalled after its first batch is not done
SPEC = f"""
name: two
seed: 3
samples_per_workload: {SAMPLES}
max_gflop: 0.01
families:
  dense:
    workloads: 1
    params: {{m: {{choices: [16]}}, n: {{choices: [32]}}, k: {{choices: [16]}}}}
held_out:
  workloads: ["dense:m=8,n=8,k=8"]
"""


def recorded(out) -> int:
    return sum(store.num_records for store in DatasetStore(out, repair=False)) if out.exists() else 0


def test_ctrl_c_and_a_second_build_leave_exact_sealed_workloads(tmp_path):
    spec, out = tmp_path / "spec.yaml", tmp_path / "ds"
    spec.write_text(SPEC)
    args = ["dataset", "build", "--spec", str(spec), "--out", str(out), "--batch", "3"]
    first = start(*args)
    wait_until(lambda: recorded(out) >= 1, first, timeout_s=240)

    second = run(*args, timeout=120)
    assert second.returncode == 2
    assert second.stderr.strip().splitlines() == [
        f"error: {out} is in use by process {first.pid} (a dataset build); wait for it to finish, or stop it "
        "(Ctrl-C) and run this again"]

    stopped = stop(first, signal.SIGINT, group=True)
    assert stopped.returncode == 130 and stopped.seconds < 90, stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert "to resume, run the same command again: metatune " + " ".join(args) in stopped.stderr
    assert group_members(first.pid) == [] and not (out / LOCK_FILE).exists()
    assert read_card(out)["counts"] == compute_counts(DatasetStore(out))["counts"], "the card is stale"

    done = run(*args)
    assert done.returncode == 0, done.stderr
    stores = list(DatasetStore(out))
    assert len(stores) == 2 and all(store.sealed for store in stores)
    for store in stores:
        keys = store.record_keys()
        assert len(keys) == SAMPLES and len(set(keys)) == SAMPLES, f"{store.workload}: {keys}"
        assert not {f.key for f in store.failures} & set(keys)
    assert read_card(out)["totals"]["records"] == 2 * SAMPLES
