"""The encoding cache: workers in other processes encode exactly what one process does."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import torch

from metatune.dataset.store import DatasetStore
from metatune.encode.graphs import dataset_template, load_encoded
from metatune.encode.supergraph import GraphEncoder
from metatune.fileio import REPO_ROOT

SHIPPED = REPO_ROOT / "datasets" / "x86_64-sapphirerapids-2c"


def small_dataset(root: Path, workloads: int = 3) -> Path:
    """The shipped dataset's smallest sealed workloads, linked into a dataset of their own."""
    stores = sorted((s for s in DatasetStore(SHIPPED) if s.sealed), key=lambda s: s.workload.flops)[:workloads]
    for store in stores:
        link = root / "workloads" / store.workload.family / store.dir.name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(store.dir)
    shutil.copy(SHIPPED / "card.json", root / "card.json")
    return root


def test_workers_encode_what_one_process_encodes(tmp_path):
    one, two = small_dataset(tmp_path / "one"), small_dataset(tmp_path / "two")
    encoder = GraphEncoder(dataset_template(one))
    alone = load_encoded(one, encoder, workers=1)
    shared = load_encoded(two, encoder, workers=2)
    assert [w.key for w in alone] == [w.key for w in shared] and len(alone) == 3
    for a, b in zip(alone, shared):
        for name in ("features", "slots", "parents", "ptr", "log_thr"):
            assert torch.equal(getattr(a, name), getattr(b, name)), (a.key, name)
    cached = sorted((two / "cache" / encoder.version).rglob("*.safetensors"))
    assert len(cached) == 3
    # a second load reads the cache: nothing is written again
    stamps = [p.stat().st_mtime_ns for p in cached]
    again = load_encoded(two, encoder, workers=2)
    assert [p.stat().st_mtime_ns for p in cached] == stamps
    assert all(torch.equal(a.features, b.features) for a, b in zip(alone, again))


def _cmdline(pid: str) -> str:
    try:
        return (Path("/proc") / pid / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""  # ended meanwhile


def test_a_stop_ends_dataset_encode_and_its_workers_at_once(tmp_path):
    """SIGTERM to the main process alone (a service manager's): the workers do not finish every queued
    workload first, the command says how to go on, and what was encoded stays cached."""
    import signal

    from tests.processes import group_members, start, stop, wait_until

    def workers() -> int:  # spawned pool workers (the pool's resource tracker aside)
        return sum("--multiprocessing-fork" in _cmdline(member.split()[0]) for member in group_members(proc.pid))

    data = small_dataset(tmp_path / "data", workloads=12)
    proc = start("dataset", "encode", str(data))
    wait_until(lambda: workers() >= 2, proc, timeout_s=120)
    stopped = stop(proc, signal.SIGTERM, group=False)
    assert stopped.returncode == 130 and stopped.seconds < 20, stopped.stderr
    assert "Traceback" not in stopped.stderr and "resource_tracker" not in stopped.stderr, stopped.stderr
    assert "to resume, run the same command again" in stopped.stderr
    deadline = time.monotonic() + 5  # the resource tracker leaves once the main process has gone
    while group_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert group_members(proc.pid) == [], "a worker outlived the command"
    assert len(list((data / "cache").rglob("*.safetensors"))) < 12
