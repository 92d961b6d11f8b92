"""The caches a training run reads, filled with one replay of each record for both of them.

Encoding (the GCN's loop graphs) and XGBoost's training features (the xgb-transfer row) each start
by replaying every record's trace, postprocessing steps included. A training workload needs both,
so one worker replays it once and writes both files; each cache's own filler (`load_encoded`,
`cache_training_features`) then finds everything current.
"""

from __future__ import annotations

import os
from concurrent.futures import as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from metatune.cost_model.xgb_transfer import extract_features, save_features, training_feature_caches
from metatune.dataset.store import WorkloadStore
from metatune.encode.graphs import encode_to_cache, graph_caches
from metatune.encode.supergraph import GraphEncoder, Template
from metatune.env.processes import process_pool, worker_count
from metatune.progress import progress_bar


@dataclass
class CacheJob:
    """One workload and the caches it still lacks (None: that one is current)."""

    store: WorkloadStore
    graphs: Path | None = None
    features: Path | None = None


def missing_caches(data_dir: Path, encoder: GraphEncoder, min_records: int, with_features: bool,
                   target: Any) -> list[CacheJob]:
    """The workloads whose loop graphs (or, `with_features`, XGBoost training features for `target`) are not
    cached."""
    jobs = {str(store.dir): CacheJob(store, graphs=path)
            for store, path, current in graph_caches(data_dir, encoder, min_records) if not current}
    if with_features:
        for store, path in training_feature_caches(data_dir, target):
            if not path.exists():
                jobs.setdefault(str(store.dir), CacheJob(store)).features = path
    return list(jobs.values())


def fill_training_caches(data_dir: Path, encoder: GraphEncoder, target: Any, min_records: int, with_features: bool,
                         workers: int | None = None, echo: Callable[[str], None] = print) -> int:
    """Write every missing cache, one process per core (`workers` caps them); returns the workloads replayed."""
    jobs = missing_caches(data_dir, encoder, min_records, with_features, target)
    if not jobs:
        return 0
    both = sum(1 for job in jobs if job.graphs and job.features)
    echo(f"replaying the records of {len(jobs)} workloads for their loop graphs and XGBoost features "
         f"({both} need both)")
    n = worker_count(len(jobs), workers)
    with progress_bar() as bar:
        task = bar.add_task("replay", total=len(jobs), status="")
        if n > 1:
            with process_pool(n, _start_worker, (encoder.template.to_json(), target.export())) as pool:
                futures = [pool.submit(_fill_in_worker, str(job.store.dir), job.graphs, job.features) for job in jobs]
                for future in as_completed(futures):
                    bar.update(task, advance=1, status=future.result())
        else:
            for job in jobs:
                bar.update(task, advance=1, status=_fill(job, encoder, target))
    return len(jobs)


def _fill(job: CacheJob, encoder: GraphEncoder, target: Any) -> str:
    candidates = job.store.measure_candidates()
    if job.graphs is not None:
        encode_to_cache(job.store, encoder, job.graphs, candidates)
    if job.features is not None:
        save_features(extract_features(job.store, target, candidates), job.features)
    return job.store.workload.family


_worker: tuple[GraphEncoder, Any] | None = None


def _start_worker(template: dict[str, Any], target: dict[str, Any]) -> None:
    """One TVM and one torch thread per worker: the workers already occupy every core."""
    global _worker  # pylint: disable=global-statement
    os.environ["TVM_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    from tvm.target import Target

    _worker = (GraphEncoder(Template.from_json(template)), Target(target))


def _fill_in_worker(store_dir: str, graphs: Path | None, features: Path | None) -> str:
    assert _worker is not None, "worker started without _start_worker"
    return _fill(CacheJob(WorkloadStore(Path(store_dir), repair=False), graphs, features), *_worker)
