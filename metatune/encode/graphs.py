"""Encoded datasets: records → loop graphs (cached) → batches for the cost model.

The cache keeps each program compactly: per loop its feature row, its super-graph slot and
its parent loop. From that both encodings are rebuilt on the fly:
* `supergraph`: every program on the shared template (fixed node count, shared edges;
  absent slots are zero-feature placeholder nodes flagged by a presence bit);
* `plain`: the program's own loop graph (root → for → for ..., for → interval), padded to
  the batch's largest graph — the ablation without super-graph augmentation.
Caches live in `DIR/cache/<template_version>/` (so a new template never reads an old
cache) and are rebuilt when a workload's record count changes. Stored with safetensors.
"""

from __future__ import annotations

import json
import math
from concurrent.futures import as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

import torch

from metatune.dataset.card import dataset_card
from metatune.dataset.store import DatasetStore, WorkloadStore, workload_slug
from metatune.encode import layout
from metatune.encode.supergraph import GraphEncoder, Template
from metatune.env.device import DeviceFingerprint
from metatune.env.processes import process_pool, worker_count
from metatune.fileio import write_atomic
from metatune.measure.measurer import median_latency
from metatune.progress import progress_bar

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

MODES = ("supergraph", "plain")


@dataclass
class GraphBatch:
    """Dense node features [B, N, F], a block-diagonal edge_index over B*N nodes, and the mask
    [B, N] of nodes the readout pools over (real nodes; not padding or template placeholders)."""

    x: torch.Tensor
    edge_index: torch.Tensor
    mask: torch.Tensor

    def inputs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.x, self.edge_index, self.mask


MIN_STD = 1e-3  # `fit`'s floor: a feature whose std is at it never varied in the training set


@dataclass
class FeatureStats:
    """Per-feature mean/std of real loops in the training set (travels with the checkpoint)."""

    mean: torch.Tensor
    std: torch.Tensor

    @classmethod
    def fit(cls, sets: Sequence["EncodedWorkload"]) -> "FeatureStats":
        feats = torch.cat([w.features for w in sets])
        return cls(feats.mean(0), feats.std(0).clamp(min=MIN_STD))

    def normalize(self, feats: torch.Tensor) -> torch.Tensor:
        """(x - mean) / std, and 0 for a feature that did not vary in training (std at the floor): the
        model's weights on it never learnt (their gradient was 0), and divided by the floor an unseen
        value (a fourth buffer where training programs had three) would reach the model 1000 times too
        large. The statistics travel with the checkpoint, so a model adapted from it ignores the feature too."""
        return torch.where(self.std > MIN_STD, (feats - self.mean) / self.std, torch.zeros((), dtype=feats.dtype))


@dataclass
class EncodedWorkload:
    """Compact encodings of one workload's measured configurations."""

    key: str
    family: str
    split: str
    features: torch.Tensor  # [total_loops, F] log-scaled loop context features
    slots: torch.Tensor  # [total_loops] super-graph slot of each loop
    parents: torch.Tensor  # [total_loops] parent loop (index within its program), -1 = root
    ptr: torch.Tensor  # [G + 1] loop offsets of each program
    log_thr: torch.Tensor  # [G] log2 GFLOPS of the median latency

    def __len__(self) -> int:
        return len(self.log_thr)

    def subset(self, idx: Sequence[int]) -> "EncodedWorkload":
        """Only the chosen programs, in the given order (e.g. fewer records per workload)."""
        index = torch.as_tensor([int(i) for i in idx], dtype=torch.long)
        counts = self.ptr[index + 1] - self.ptr[index]
        rows = torch.cat([torch.arange(int(self.ptr[i]), int(self.ptr[i + 1])) for i in index])
        ptr = torch.cat([torch.zeros(1, dtype=self.ptr.dtype), torch.cumsum(counts, 0).to(self.ptr.dtype)])
        return EncodedWorkload(self.key, self.family, self.split, self.features[rows], self.slots[rows],
                               self.parents[rows], ptr, self.log_thr[index])

    def program(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a, b = int(self.ptr[i]), int(self.ptr[i + 1])
        return self.features[a:b], self.slots[a:b], self.parents[a:b]


class GraphBuilder:
    """Turns compact encodings into model batches for one encoding mode."""

    def __init__(self, template: "Template", mode: str, stats: FeatureStats | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.template, self.mode, self.stats = template, mode, stats
        self.num_features = len(template.features)
        self.width = layout.width(self.num_features)
        self._template_edges = layout.template_edges(template.parents)

    def _normalized(self, feats: torch.Tensor) -> torch.Tensor:
        return feats if self.stats is None else self.stats.normalize(feats)

    def batch(self, w: EncodedWorkload, idx: Sequence[int] | torch.Tensor) -> GraphBatch:
        idx = [int(i) for i in idx]
        return self._supergraph(w, idx) if self.mode == "supergraph" else self._plain(w, idx)

    @staticmethod
    def _rows(w: EncodedWorkload, idx: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Loop rows of the chosen programs, the batch position of each row, and loop counts."""
        index = torch.as_tensor(idx, dtype=torch.long)
        starts, counts = w.ptr[index], w.ptr[index + 1] - w.ptr[index]
        graph = torch.repeat_interleave(torch.arange(len(idx)), counts)
        first = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
        rows = torch.repeat_interleave(starts, counts) + torch.arange(int(counts.sum())) - first
        return rows, graph, counts

    def _supergraph(self, w: EncodedWorkload, idx: list[int]) -> GraphBatch:
        t = self.template
        rows, graph, _ = self._rows(w, idx)
        slots = w.slots[rows]
        x = torch.zeros(len(idx), t.num_nodes, self.width)
        layout.place(x, graph, layout.for_node(slots), layout.interval_node(slots, t.num_slots),
                     self._normalized(w.features[rows]))
        edges = layout.batched_edges(self._template_edges, len(idx), t.num_nodes)
        # Placeholder nodes pass messages along the template but are left out of the readout:
        # pooling over ~650 mostly-empty slots would drown the program's own loops.
        return GraphBatch(x, edges, layout.present(x))

    def _plain(self, w: EncodedWorkload, idx: list[int]) -> GraphBatch:
        rows, graph, counts = self._rows(w, idx)
        n = layout.num_nodes(int(counts.max()))
        local = rows - torch.repeat_interleave(w.ptr[torch.as_tensor(idx)], counts)  # loop index in its program
        for_nodes, interval_nodes = layout.for_node(local), layout.interval_node(local, counts[graph])
        x = torch.zeros(len(idx), n, self.width)
        layout.place(x, graph, for_nodes, interval_nodes, self._normalized(w.features[rows]))
        base = graph * n
        edges = layout.edges(base + layout.parent_node(w.parents[rows]), base + for_nodes, base + interval_nodes)
        return GraphBatch(x, edges, layout.present(x))


# ---------------------------------------------------------------------------------------------
# Cache


def _cache_path(directory: Path, version: str, store: WorkloadStore) -> Path:
    return directory / "cache" / version / store.workload.family / f"{workload_slug(store.workload)}.safetensors"


def encode_programs(encoder: "GraphEncoder", programs: Sequence, key: str, family: str, split: str,
                    log_thr: Sequence[float]) -> EncodedWorkload:
    """Compact encodings of postprocessed schedules (or PrimFuncs) of one workload."""
    feats, slots, parents, ptr = [], [], [], [0]
    for program in programs:
        enc = encoder.analyse(program)
        feats.append(torch.from_numpy(enc.features))
        slots.append(torch.from_numpy(encoder.slots_of(enc)))
        parents.append(torch.tensor([lp.parent for lp in enc.program.loops], dtype=torch.long))
        ptr.append(ptr[-1] + len(enc.program.loops))
    width = len(encoder.template.features)
    return EncodedWorkload(
        key=key, family=family, split=split,
        features=torch.cat(feats) if feats else torch.zeros(0, width),
        slots=torch.cat(slots) if slots else torch.zeros(0, dtype=torch.long),
        parents=torch.cat(parents) if parents else torch.zeros(0, dtype=torch.long),
        ptr=torch.tensor(ptr, dtype=torch.long), log_thr=torch.tensor(list(log_thr), dtype=torch.float32),
    )


def concat(parts: Sequence[EncodedWorkload]) -> EncodedWorkload:
    """The programs of all parts, in order (parts of one workload)."""
    first = parts[0]
    offsets = torch.cumsum(torch.tensor([0] + [int(p.ptr[-1]) for p in parts[:-1]]), 0)
    return EncodedWorkload(
        first.key, first.family, first.split, torch.cat([p.features for p in parts]),
        torch.cat([p.slots for p in parts]), torch.cat([p.parents for p in parts]),
        torch.cat([first.ptr[:1]] + [p.ptr[1:] + o for p, o in zip(parts, offsets)]),
        torch.cat([p.log_thr for p in parts]),
    )


def log_throughput(flops: float, run_secs: Sequence[float]) -> float:
    return math.log2(flops / median_latency([float(x) for x in run_secs]) / 1e9)


def encode_store(store: WorkloadStore, encoder: "GraphEncoder",
                 candidates: Sequence["MeasureCandidate"] | None = None) -> EncodedWorkload:
    """Extract the loops of each record's program (replayed here unless `candidates` holds the replays)."""
    replayed = store.measure_candidates() if candidates is None else candidates
    log_thr = [log_throughput(store.workload.flops, secs) for secs in store.run_secs()]
    return encode_programs(encoder, [c.sch for c in replayed], store.workload.key, store.workload.family,
                           store.split, log_thr)


def dataset_template(directory: Path) -> Template:
    """The super-graph template of a dataset's device kind (CPU or CUDA programs)."""
    card = dataset_card(Path(directory))
    return Template.for_target(DeviceFingerprint.from_json(card["device"]).tvm_target())


CACHED_FIELDS = ("features", "slots", "parents", "ptr", "log_thr")


def _cache_meta(store: WorkloadStore, version: str) -> dict[str, str]:
    """What a cache file must say to be current: the workload, its split and record count, the template."""
    return {"workload": store.workload.key, "split": store.split, "records": str(store.num_records),
            "template_version": version}


def _cache_is_current(path: Path, meta: dict[str, str]) -> bool:
    from safetensors import safe_open

    if not path.exists():
        return False
    with safe_open(str(path), "pt") as f:
        return f.metadata() == meta


def encode_to_cache(store: WorkloadStore, encoder: "GraphEncoder", path: Path,
                    candidates: Sequence["MeasureCandidate"] | None = None) -> None:
    """Encode a workload into the file `graph_caches` names for it."""
    from safetensors.torch import save

    enc = encode_store(store, encoder, candidates)
    tensors = {k: getattr(enc, k).contiguous() for k in CACHED_FIELDS}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, save(tensors, metadata=_cache_meta(store, encoder.version)))


def graph_caches(directory: Path, encoder: "GraphEncoder", min_records: int = 1) -> list[tuple[WorkloadStore, Path, bool]]:
    """Every complete (sealed) workload with at least `min_records`, its cache file and whether that is current."""
    stores = [s for s in DatasetStore(directory, repair=False) if s.sealed and s.num_records >= min_records]
    paths = [_cache_path(Path(directory), encoder.version, s) for s in stores]
    return [(s, p, _cache_is_current(p, _cache_meta(s, encoder.version))) for s, p in zip(stores, paths)]


_worker_encoder: GraphEncoder | None = None


def _start_encoder_worker(template: dict) -> None:
    global _worker_encoder  # pylint: disable=global-statement
    torch.set_num_threads(1)
    _worker_encoder = GraphEncoder(Template.from_json(template))


def _encode_in_worker(store_dir: str, path: str) -> str:
    assert _worker_encoder is not None, "worker started without _start_encoder_worker"
    store = WorkloadStore(Path(store_dir), repair=False)
    encode_to_cache(store, _worker_encoder, Path(path))
    return store.workload.family


def load_encoded(directory: Path, encoder: "GraphEncoder", min_records: int = 1,
                 workers: int | None = None) -> list[EncodedWorkload]:
    """Every complete (sealed) workload, from the cache when it is current, else encoded and cached.

    Workloads still being measured are left out: a clean checkout holds only sealed ones, so
    this keeps what a model was trained on reproducible from the repository. Uncached workloads
    are encoded by one process per core (`workers` caps it): replaying traces is pure CPU work.
    """
    from safetensors.torch import load_file

    caches = graph_caches(directory, encoder, min_records)
    stores, paths = [s for s, _, _ in caches], [p for _, p, _ in caches]
    missing = [(s, p) for s, p, current in caches if not current]
    with progress_bar() as bar:
        task = bar.add_task("encode", total=len(stores), completed=len(stores) - len(missing), status="")
        n = worker_count(len(missing), workers)
        if n > 1:
            with process_pool(n, _start_encoder_worker, (encoder.template.to_json(),)) as pool:
                futures = [pool.submit(_encode_in_worker, str(s.dir), str(p)) for s, p in missing]
                for future in as_completed(futures):
                    bar.update(task, advance=1, status=future.result())
        else:
            for store, path in missing:
                encode_to_cache(store, encoder, path)
                bar.update(task, advance=1, status=store.workload.family)
    return [EncodedWorkload(s.workload.key, s.workload.family, s.split, **load_file(str(p))) for s, p in zip(stores, paths)]


def split_sets(encoded: Sequence[EncodedWorkload]) -> tuple[list[EncodedWorkload], list[EncodedWorkload]]:
    return [w for w in encoded if w.split == "train"], [w for w in encoded if w.split != "train"]


def describe(encoded: Sequence[EncodedWorkload]) -> str:
    by_split: dict[str, list[int]] = {}
    for w in encoded:
        by_split.setdefault(w.split, []).append(len(w))
    return json.dumps({k: {"workloads": len(v), "programs": sum(v)} for k, v in by_split.items()})


def iter_batches(n: int, size: int) -> Iterator[torch.Tensor]:
    for i in range(0, n, size):
        yield torch.arange(i, min(i + size, n))
