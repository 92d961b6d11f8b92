"""bench/compare_labels.py matches the same programs in two datasets and compares their latencies."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys

import pytest

from bench.compare_labels import compare_datasets
from metatune.dataset.store import RECORD_FILE
from metatune.fileio import REPO_ROOT
from metatune.measure.measurer import median_latency

SHIPPED = REPO_ROOT / "datasets" / "x86_64-sapphirerapids-2c" / "workloads" / "dense"


def copy_workload(source, dataset, lines: list[str]) -> None:
    """A sealed workload of `dataset` holding `source`'s workload with these record lines."""
    target = dataset / "workloads" / "dense" / source.name
    target.mkdir(parents=True)
    for name in ("meta.json", "database_workload.json", "failures.jsonl.gz"):
        shutil.copy(source / name, target)
    (target / (RECORD_FILE + ".gz")).write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))


def test_twice_as_slow_with_two_programs_swapped(tmp_path):
    source = sorted(SHIPPED.iterdir())[0]
    lines = gzip.decompress((source / (RECORD_FILE + ".gz")).read_bytes()).decode().splitlines()[:20]
    records = [json.loads(line) for line in lines]
    order = sorted(range(20), key=lambda i: median_latency(records[i][1][1]))
    fastest, slowest = order[0], order[-1]
    only_in_first = next(i for i in range(20) if i not in (fastest, slowest))
    doubled = []
    for i, record in enumerate(records):
        swap = {fastest: slowest, slowest: fastest}.get(i, i)
        if i != only_in_first:
            doubled.append(json.dumps([0, [record[1][0], [2 * t for t in records[swap][1][1]], *record[1][2:]]]))
    doubled.reverse()  # matched by program, not by position
    copy_workload(source, tmp_path / "first", lines)
    copy_workload(source, tmp_path / "second", doubled)

    (result,) = compare_datasets(tmp_path / "first", tmp_path / "second").values()
    assert result["programs"] == 19
    assert result["ratio_median"] == pytest.approx(2.0)
    assert 0.0 < result["spearman"] < 1.0 and 0.5 < result["pairs_alike"] < 1.0
    # the first's fastest program is the second's slowest, and the second's fastest is the first's slowest
    assert result["first_best_by_second"] == pytest.approx(median_latency(records[fastest][1][1])
                                                           / median_latency(records[slowest][1][1]))

    same = compare_datasets(tmp_path / "first", tmp_path / "first")
    (alike,) = same.values()
    assert alike["ratio_median"] == 1.0 and alike["pairs_alike"] == pytest.approx(1.0)


def test_datasets_with_nothing_in_common_are_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    proc = subprocess.run([sys.executable, "-m", "bench.compare_labels", str(tmp_path / "a"), str(tmp_path / "b")],
                          capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode != 0 and "no workload is sealed in both" in proc.stderr
