"""bench/retime_dataset.py: which stored programs it times again, and that it refuses another device's data."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from bench.retime_dataset import pick
from metatune.dataset.card import write_card


def test_half_of_the_picks_come_from_the_fastest_quarter():
    latencies = [float(x) for x in np.random.default_rng(1).permutation(40) + 1]
    chosen = pick(latencies, 8, np.random.default_rng(0))
    assert len(chosen) == len(set(chosen)) == 8
    assert sum(latencies[i] <= 10 for i in chosen) >= 4  # the fastest quarter: latencies 1..10


def test_a_dataset_of_another_device_is_refused(tmp_path):
    write_card(tmp_path, {"device": {"device_id": "x86_64-nosuchcpu-2c", "llvm_host_cpu": "none"}})
    proc = subprocess.run([sys.executable, "bench/retime_dataset.py", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode != 0 and "was measured on x86_64-nosuchcpu-2c" in proc.stderr
