"""bench/headroom.py: a strategy's re-timed best against the fastest kernel any run found."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from bench.headroom import Reference, headroom


def write_retimed(path: Path, runs: dict[str, list[tuple[str, int, int, float]]]) -> Path:
    """A `bench --retime` file: per workload, (strategy, repeat, budget, re-timed GFLOPS) of each run's kernel."""
    path.write_text(json.dumps({"device_id": "x86_64-test", "rounds": 7, "budgets": [16, 256], "workloads": {
        name: {"kernels": len(kernels), "runs": [{"strategy": s, "repeat": r, "budget": b, "gflops": g}
                                                 for s, r, b, g in kernels]}
        for name, kernels in runs.items()}}))
    return path


def test_the_fastest_kernel_of_every_file_over_the_reference_median(tmp_path):
    first = write_retimed(tmp_path / "a.json", {
        "w1": [("xgb", 0, 256, 100.0), ("xgb", 1, 256, 140.0), ("xgb", 2, 256, 120.0), ("metatune", 0, 256, 150.0)],
        "w2": [("xgb", 0, 256, 200.0), ("metatune", 0, 16, 180.0)]})
    second = write_retimed(tmp_path / "b.json", {"w1": [("metatune", 0, 16, 90.0)],
                                                 "w2": [("metatune", 1, 256, 400.0)],
                                                 "w3": [("metatune", 0, 256, 999.0)]})  # not in the reference: left out
    text = headroom(Reference(first, "xgb", 256), [second], peak=300.0)
    assert "| w1 | 120 | 150 (" in text and "| 1.25× | 2.50× |" in text  # median of three xgb repeats; peak / 120
    assert "| w2 | 200 | 400 (" in text and "metatune r1 @256) | 2.00× | 2.00× |" in text  # a kernel above the peak
    assert "w3" not in text
    assert f"**{math.sqrt(1.25 * 2.0):.2f}×**" in text and f"**{math.sqrt(2.5 * 2.0):.2f}×**" in text


def test_a_reference_names_a_file_a_strategy_and_a_budget(tmp_path):
    assert Reference.parse("runs/x/retimed.json:xgb@256") == Reference(Path("runs/x/retimed.json"), "xgb", 256)
    for bad in ("retimed.json", "retimed.json:xgb", "retimed.json:@256", "retimed.json:xgb@all"):
        with pytest.raises(argparse.ArgumentTypeError):
            Reference.parse(bad)


def test_a_budget_the_reference_never_reached_is_an_error(tmp_path):
    path = write_retimed(tmp_path / "a.json", {"w1": [("xgb", 0, 16, 100.0)]})
    with pytest.raises(SystemExit, match="no re-timed xgb runs at 256"):
        headroom(Reference(path, "xgb", 256), [])


def test_re_timings_of_another_device_are_refused(tmp_path):
    first = write_retimed(tmp_path / "a.json", {"w1": [("xgb", 0, 256, 100.0)]})
    other = write_retimed(tmp_path / "b.json", {"w1": [("metatune", 0, 256, 300.0)]})
    other.write_text(other.read_text().replace("x86_64-test", "x86_64-elsewhere"))
    with pytest.raises(SystemExit, match="re-timed on different devices"):
        headroom(Reference(first, "xgb", 256), [other])
