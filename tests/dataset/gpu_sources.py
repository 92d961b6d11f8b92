"""Small TVM JSON databases for `dataset import` tests, cut from the shipped GPU dataset: the records
of a plain MetaSchedule run on an H100, in its format (`[workload index, [trace, run_secs, target, args]]`)."""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path
from typing import Any, Callable

from metatune.fileio import RECORD_FILE, REPO_ROOT, WORKLOAD_FILE

SHIPPED_GPU = REPO_ROOT / "datasets" / "cuda-sm90-h100"
DENSE = "dense:m=1,n=64,k=256"
BATCH_MATMUL = "batch_matmul:b=2,m=16,n=256,k=256"
WORKLOAD_DIRS = {DENSE: "dense/m1_n64_k256", BATCH_MATMUL: "batch_matmul/b2_m16_n256_k256"}
A100_TARGET = {"kind": "cuda", "arch": "sm_80", "max_num_threads": 1024, "thread_warp_size": 32}


def write_source(directory: Path, workload: str = DENSE, records: int = 6, failed: int = 1, split: str = "train",
                 meta: bool = True, edit: Callable[[list[Any]], None] | None = None) -> Path:
    """A database folder with `records` measured records of `workload` and `failed` ones (run_secs 1e10,
    MetaSchedule's mark of a failure); `edit` changes each record ([trace, run_secs, target, args])."""
    shipped = SHIPPED_GPU / "workloads" / WORKLOAD_DIRS[workload]
    lines = gzip.decompress((shipped / (RECORD_FILE + ".gz")).read_bytes()).decode().splitlines()
    rows = [json.loads(line)[1] for line in lines[: records + failed]]
    for row in rows[records:]:
        row[1] = [1e10]
    for row in rows:
        if edit is not None:
            edit(row)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / WORKLOAD_FILE).write_text((shipped / WORKLOAD_FILE).read_text())
    (directory / RECORD_FILE).write_text("".join(json.dumps([0, row]) + "\n" for row in rows))
    if meta:
        (directory / "meta.json").write_text(json.dumps({"workload": workload, "split": split, "wall_s": 2.5,
                                                         "sampling": "replay-trace, random cost model"}))
    return directory


def archive(directory: Path, into: Path) -> Path:
    """The folder as `into/<folder>.tar.gz` (the seed data's form)."""
    into.mkdir(parents=True, exist_ok=True)
    path = into / (directory.name + ".tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        tar.add(directory, arcname=directory.name)
    return path


def set_target(target: dict[str, Any]) -> Callable[[list[Any]], None]:
    def edit(row: list[Any]) -> None:
        row[2] = target

    return edit
