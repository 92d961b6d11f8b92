"""bench/run_to_run.py: two sets of tuning runs compared workload by workload."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from bench.run_to_run import Side, geomean_and_spread, table


def write_run(out, name: str, strategy: str, curve: list[float], repeat: int = 0) -> None:
    path = out / "runs" / name / f"{strategy}-r{repeat}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"name": name, "strategy": strategy, "repeat": repeat, "curve": curve,
                                "started": f"2026-01-01T00:00:0{len(name) % 10}"}))


def test_ratios_per_workload_and_their_geomean(tmp_path):
    write_run(tmp_path, "a", "metatune", [10.0, 20.0])
    write_run(tmp_path, "a", "other", [10.0, 40.0])
    write_run(tmp_path, "b", "metatune", [10.0, 10.0])
    write_run(tmp_path, "b", "other", [10.0, 10.0])
    write_run(tmp_path, "c", "metatune", [10.0])  # too short for budget 2 on one side only: left out there
    write_run(tmp_path, "c", "other", [5.0, 5.0])
    text = table(Side(tmp_path, "metatune"), Side(tmp_path, "other"), [1, 2])
    assert "| a | 1.00× | 2.00× |" in text and "| b | 1.00× | 1.00× |" in text and "| c | 0.50× | – |" in text
    assert f"**{math.sqrt(2):.2f}×** (2)" in text  # geomean of 2.00 and 1.00 at budget 2


def test_spread_is_one_standard_deviation_of_the_log_ratios():
    mean, spread = geomean_and_spread([2.0, 0.5])
    assert mean == pytest.approx(1.0) and spread == pytest.approx(math.exp(math.log(2.0) * math.sqrt(2)))
    assert geomean_and_spread([1.5]) == (pytest.approx(1.5), None)


def test_a_side_names_a_directory_a_strategy_and_maybe_a_repeat(tmp_path):
    assert Side.parse("runs/x:metatune:r2") == Side(Path("runs/x"), "metatune", 2)
    for bad in ("runs/x", "runs/x:", "runs/x:metatune:2"):
        with pytest.raises(argparse.ArgumentTypeError):
            Side.parse(bad)
    with pytest.raises(SystemExit, match="no runs of xgb"):
        write_run(tmp_path, "a", "metatune", [1.0])
        Side(tmp_path, "xgb").runs()
