"""Crash-safe, append-only storage of measured records, one TVM JSON database per workload.

Layout of a dataset directory::

    DIR/card.json                       dataset card (counts recomputable from the records)
    DIR/workloads/<family>/<slug>/
        meta.json                       workload key and split
        database_workload.json          TVM JSONDatabase workload line
        database_tuning_record.json     TVM JSONDatabase records (measured configurations only)
        failures.jsonl                  configurations that failed, with the failure kind
        disturbed.jsonl                 measured configurations kept although other processes kept
                                        cores busy while they were timed (absent when there were none)

Every append is one `write()` of one complete line to a file opened with O_APPEND, so a
`kill -9` can at worst leave a partial last line, which loading detects and truncates.
A completed workload is *sealed*: its growing files are gzipped (`*.gz`) and never
change again, so a dataset in git grows by adding files. `export_tvm_database` writes all
records as one JSONDatabase pair that MetaSchedule reads directly.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from metatune import MetatuneError
from metatune.fileio import RECORD_FILE, WORKLOAD_FILE, cut_torn_line, hold_directory, write_atomic
from metatune.workload.operators import Workload

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule.database import TuningRecord
    from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate

FAILURE_FILE = "failures.jsonl"
DISTURBED_FILE = "disturbed.jsonl"
META_FILE = "meta.json"


class StoreError(MetatuneError):
    """A dataset directory that cannot be read."""


def _ffi_json():
    import tvm

    return tvm.get_global_func("ffi.json.Stringify"), tvm.get_global_func("ffi.json.Parse")


def config_key(trace: Any) -> str:
    """Identity of a configuration: hash of its printed trace (decisions included), up to the
    postprocessors, which are a deterministic function of what precedes them."""
    text = str(trace).split("sch.enter_postproc()")[0]
    return hashlib.sha1(text.encode()).hexdigest()


def workload_slug(workload: Workload) -> str:
    return "_".join(f"{k}{v}" for k, v in workload.shape)


def _append_line(path: Path, line: str) -> None:
    data = (line.rstrip("\n") + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _read_lines(path: Path, repair: bool = True) -> list[str]:
    """Complete lines of a (possibly gzipped) file; with `repair`, a torn last line is cut off the file
    (without, it is only skipped: an inspection must not write to a dataset another process may be building)."""
    gz = path.with_name(path.name + ".gz")
    if gz.exists():
        if repair:
            path.unlink(missing_ok=True)  # crash between sealing and deleting: the .gz is complete
        with gzip.open(gz, "rt", encoding="utf-8") as f:
            return [line for line in f.read().splitlines() if line.strip()]
    if not path.exists():
        return []
    if repair:
        cut_torn_line(path)
    raw = path.read_bytes()
    complete_len = raw.rfind(b"\n") + 1  # each append writes its newline in the same write()
    lines = [line for line in raw[:complete_len].decode().splitlines() if line.strip()]
    valid = []
    for i, line in enumerate(lines):
        try:
            json.loads(line)
            valid.append(line)
        except ValueError:
            raise StoreError(f"{path}: line {i + 1} is not JSON; the file was modified by hand") from None
    return valid


@dataclass
class Failure:
    key: str
    kind: str
    message: str


class WorkloadStore:
    """The records of one workload: append while measuring, read for training."""

    def __init__(self, directory: Path, workload: Workload | None = None, split: str | None = None,
                 repair: bool = True) -> None:
        self.dir = Path(directory)
        meta_path = self.dir / META_FILE
        if meta_path.exists():
            meta = json.loads(meta_path.read_text())
            self.workload = Workload.parse(meta["workload"])
            self.split = meta["split"]
            if workload is not None and workload != self.workload:
                raise StoreError(f"{self.dir} holds {self.workload}, not {workload}")
        elif workload is None:
            raise StoreError(f"{self.dir} is not a workload directory (no {META_FILE})")
        else:
            self.workload, self.split = workload, split or "train"
            self.dir.mkdir(parents=True, exist_ok=True)
            write_atomic(meta_path, json.dumps({"workload": workload.key, "split": self.split}).encode())
        self._record_lines = _read_lines(self.dir / RECORD_FILE, repair)
        self._failures = [Failure(**json.loads(l)) for l in _read_lines(self.dir / FAILURE_FILE, repair)]
        self._disturbed = {d["key"]: d["cores"] for d in map(json.loads, _read_lines(self.dir / DISTURBED_FILE, repair))}
        self._keys: set[str] | None = None
        self._record_keys: list[str] | None = None
        half_sealed = any((self.dir / (name + ".gz")).exists() for name in (FAILURE_FILE, DISTURBED_FILE))
        if repair and half_sealed and not self.sealed:
            self.seal()  # a crash in the middle of sealing: finish it

    # -- reading -----------------------------------------------------------------------------

    @property
    def sealed(self) -> bool:
        """The records are compressed: `seal` does that last, so everything else is too."""
        return (self.dir / (RECORD_FILE + ".gz")).exists()

    @property
    def num_records(self) -> int:
        return len(self._record_lines)

    @property
    def failures(self) -> list[Failure]:
        return list(self._failures)

    @property
    def disturbed(self) -> dict[str, float]:
        """Config key -> other processes' busy cores while it was timed, for the records kept although
        their batch was disturbed (its latencies may read too slow)."""
        return dict(self._disturbed)

    def tvm_workload(self) -> Any:
        from tvm.s_tir.meta_schedule.database import Workload as TVMWorkload

        _, parse = _ffi_json()
        line = (self.dir / WORKLOAD_FILE).read_text().strip()
        return TVMWorkload.from_json(parse(line))

    def records(self) -> list["TuningRecord"]:
        """TVM TuningRecords, in measurement order."""
        from tvm.s_tir.meta_schedule.database import TuningRecord

        if not self._record_lines:
            return []
        _, parse = _ffi_json()
        wl = self.tvm_workload()
        return [TuningRecord.from_json(parse(json.dumps(json.loads(l)[1])), wl) for l in self._record_lines]

    def measure_candidates(self) -> list["MeasureCandidate"]:
        """Each record's program, replayed from its trace with the postprocessors' steps, and its arguments.
        Replaying is a large share of what encoding or featurising a workload costs (sharing it cut
        both phases of a training run from 301 to 179 s): a caller that needs both replays once."""
        return [record.as_measure_candidate() for record in self.records()]

    def run_secs(self) -> list[list[float]]:
        """Latency samples per record without building TVM objects (fast)."""
        return [[float(x) for x in json.loads(l)[1][1]] for l in self._record_lines]

    def trace_texts(self) -> list[str]:
        """Each record's trace as stored (JSON text), without TVM: one configuration measured in two
        datasets of the same spec has the same text in both."""
        return [json.dumps(json.loads(l)[1][0], separators=(",", ":")) for l in self._record_lines]

    def keys(self) -> set[str]:
        """Config keys of everything recorded, measured or failed (never measure these again)."""
        if self._keys is None:
            self._keys = set(self.record_keys()) | {f.key for f in self._failures}
        return self._keys

    def record_keys(self) -> list[str]:
        if self._record_keys is None:
            self._record_keys = [config_key(r.trace) for r in self.records()]
        return self._record_keys

    # -- writing -----------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if self.sealed:
            raise StoreError(f"{self.dir} is sealed; its records never change")

    def ensure_workload_line(self, mod: Any) -> None:
        from tvm.s_tir.meta_schedule.database import Workload as TVMWorkload

        path = self.dir / WORKLOAD_FILE
        if path.exists():
            return
        stringify, _ = _ffi_json()
        write_atomic(path, (str(stringify(TVMWorkload(mod).as_json(), None)) + "\n").encode())

    def append_record(self, record: "TuningRecord", key: str) -> None:
        self._check_writable()
        stringify, _ = _ffi_json()
        line = json.dumps([0, json.loads(str(stringify(record.as_json(), None)))], separators=(",", ":"))
        keys, record_keys = self.keys(), self.record_keys()  # known before this record, not parsed from it
        _append_line(self.dir / RECORD_FILE, line)
        self._record_lines.append(line)
        keys.add(key)
        record_keys.append(key)

    def append_failure(self, key: str, kind: str, message: str) -> None:
        self._check_writable()
        failure = Failure(key, kind, message)
        _append_line(self.dir / FAILURE_FILE, json.dumps(failure.__dict__))
        self._failures.append(failure)
        self.keys().add(key)

    def append_disturbed(self, key: str, cores: float) -> None:
        """Marks the measured record `key` as timed while other processes kept `cores` cores busy."""
        self._check_writable()
        _append_line(self.dir / DISTURBED_FILE, json.dumps({"key": key, "cores": round(cores, 2)}))
        self._disturbed[key] = round(cores, 2)

    def seal(self) -> None:
        """Compress the growing files, the records last (`sealed`); the workload becomes immutable.
        A store opened after a crash in the middle of it finishes it."""
        for name in (DISTURBED_FILE, FAILURE_FILE, RECORD_FILE):
            path = self.dir / name
            gz = path.with_name(name + ".gz")
            if gz.exists() or (name == DISTURBED_FILE and not path.exists()):
                continue
            data = path.read_bytes() if path.exists() else b""
            write_atomic(gz, gzip.compress(data, mtime=0))
            path.unlink(missing_ok=True)


class DatasetStore:
    """All workload stores below a dataset directory; `repair=False` reads without writing (see `_read_lines`)."""

    def __init__(self, directory: Path, repair: bool = True) -> None:
        self.dir = Path(directory)
        self.repair = repair

    def workload_dir(self, workload: Workload) -> Path:
        return self.dir / "workloads" / workload.family / workload_slug(workload)

    def is_sealed(self, workload: Workload) -> bool:
        """`WorkloadStore.sealed` without opening the store (`open` creates a missing one)."""
        return (self.workload_dir(workload) / (RECORD_FILE + ".gz")).exists()

    def open(self, workload: Workload, split: str) -> WorkloadStore:
        return WorkloadStore(self.workload_dir(workload), workload, split)

    def __iter__(self) -> Iterator[WorkloadStore]:
        root = self.dir / "workloads"
        if not root.exists():
            return iter(())
        return (WorkloadStore(meta.parent, repair=self.repair) for meta in sorted(root.glob(f"*/*/{META_FILE}")))

    def export_tvm_database(self, out_dir: Path) -> tuple[Path, Path]:
        """Write every measured record as one MetaSchedule JSONDatabase pair into `out_dir`, which must not
        hold a database already (its records would be lost). Each file is replaced whole, the workload file
        last: a crash leaves no database TVM would read as complete, and the export can simply be run again."""
        wl_path, rec_path = out_dir / WORKLOAD_FILE, out_dir / RECORD_FILE
        with hold_directory(out_dir, "a dataset export"):
            if wl_path.exists():
                raise StoreError(f"{out_dir} holds a TVM database already ({WORKLOAD_FILE}); export into a new "
                                 "directory (TVM can read several databases, see ms.database.UnionDatabase)")
            workloads, records = [], []
            for index, store in enumerate(s for s in self if s.num_records):
                workloads.append((store.dir / WORKLOAD_FILE).read_text().strip() + "\n")
                records += [json.dumps([index, json.loads(line)[1]], separators=(",", ":")) + "\n"
                            for line in store._record_lines]
            write_atomic(rec_path, "".join(records).encode())
            write_atomic(wl_path, "".join(workloads).encode())
        return wl_path, rec_path
