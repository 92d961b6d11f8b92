"""TVM JSON databases to import: where they are, what they hold, and whether they say what they claim.

A source is a folder holding a MetaSchedule JSONDatabase pair of one workload (optionally with a
meta.json naming its workload and split), a .tar.gz of such a folder, or a folder of those. Every
check here reads only the sources, so `dataset import` refuses bad input before it writes anything.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metatune import MetatuneError
from metatune.dataset.store import META_FILE, config_key
from metatune.env.target import parse_target, target_json
from metatune.fileio import RECORD_FILE, WORKLOAD_FILE
from metatune.measure.measurer import successful_run_seconds
from metatune.workload.operators import Workload

if TYPE_CHECKING:
    from tvm.s_tir.meta_schedule.database import TuningRecord

SPLITS = ("train", "heldout")
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")
# A database file is read whole; one larger than this (~200,000 records of 5 KB) is refused before it is read, so that
# a small archive that unpacks to gigabytes cannot fill the machine's memory.
MAX_FILE_BYTES = 1 << 30


class SourceError(MetatuneError):
    """A source that is not a database metatune can import, or one that contradicts the others."""


@dataclass
class Source:
    """One database: its workload line, its record lines (JSON text) and its meta.json, if any."""

    name: str
    workload_line: str
    record_lines: list[str]
    meta: dict[str, Any]
    workload: Workload | None = None
    split: str = "train"
    tvm_workload: Any = None  # the database's workload, checked to be `workload`'s program
    # (config key, record, run_secs if it failed else None)
    records: list[tuple[str, "TuningRecord", Any]] = field(default_factory=list)


def _is_source(path: Path) -> bool:
    if path.is_dir():
        return (path / WORKLOAD_FILE).is_file() and (path / RECORD_FILE).is_file()
    return path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES)


def find_sources(paths: list[Path]) -> list[Path]:
    """Each path as a database folder, a .tar.gz of one, or a folder of those."""
    found: list[Path] = []
    for path in paths:
        if not path.exists():
            raise SourceError(f"{path}: no such file or directory")
        children = sorted(p for p in path.iterdir() if _is_source(p)) if path.is_dir() else []
        if _is_source(path):
            found.append(path)
        elif children:
            found += children
        else:
            raise SourceError(f"{path} is not a TVM database: expected a folder with {WORKLOAD_FILE} and "
                              f"{RECORD_FILE}, a .tar.gz of one, or a folder of those")
    if len(set(found)) != len(found):
        raise SourceError("a source is given twice")
    return found


def _check_size(path: Path, name: str, size: int) -> None:
    if size > MAX_FILE_BYTES:
        raise SourceError(f"{path}: {name} is {size:,} bytes, over the {MAX_FILE_BYTES:,} a database file "
                          "may have; split the run into several databases")


def _folder_files(path: Path) -> dict[str, bytes]:
    files = [path / n for n in (WORKLOAD_FILE, RECORD_FILE, META_FILE) if (path / n).is_file()]
    for file in files:
        _check_size(path, file.name, file.stat().st_size)
    return {file.name: file.read_bytes() for file in files}


def _archive_files(path: Path) -> dict[str, bytes]:
    wanted = (WORKLOAD_FILE, RECORD_FILE, META_FILE)
    try:
        with tarfile.open(path, "r:*") as tar:
            members = [m for m in tar.getmembers() if m.isfile() and m.name.rsplit("/", 1)[-1] in wanted]
            names = [m.name.rsplit("/", 1)[-1] for m in members]
            if len(names) != len(set(names)):
                raise SourceError(f"{path} holds several databases; archive one per file")
            for name, member in zip(names, members):
                _check_size(path, name, member.size)  # the size its header declares, before anything is unpacked
            return {name: tar.extractfile(m).read() for name, m in zip(names, members)}  # type: ignore[union-attr]
    except (tarfile.TarError, OSError, EOFError) as err:
        raise SourceError(f"{path} is not a readable .tar.gz ({err})") from None


def read_source(path: Path) -> Source:
    """The database at `path` (a folder or an archive), its lines checked to be JSON records."""
    if path.is_dir():
        files = _folder_files(path)
    else:
        files = _archive_files(path)
    missing = [n for n in (WORKLOAD_FILE, RECORD_FILE) if n not in files]
    if missing:
        raise SourceError(f"{path} is not a TVM database: it has no {' or '.join(missing)}")
    try:
        texts = {name: data.decode() for name, data in files.items()}
    except UnicodeDecodeError:
        raise SourceError(f"{path}: a database file is not UTF-8 text") from None
    workload_lines = [line for line in texts[WORKLOAD_FILE].splitlines() if line.strip()]
    if len(workload_lines) != 1:
        raise SourceError(f"{path}: {WORKLOAD_FILE} holds {len(workload_lines)} workloads; "
                          "import databases of one workload each")
    record_lines = texts[RECORD_FILE].splitlines()
    for i, line in enumerate(record_lines):
        if line.strip() and not _is_record(line):
            raise SourceError(f"{path}: line {i + 1} of {RECORD_FILE} is not a tuning record (torn by a killed run, "
                              "or edited); remove it and import again")
    record_lines = [line for line in record_lines if line.strip()]
    if not record_lines:
        raise SourceError(f"{path}: {RECORD_FILE} holds no records")
    return Source(str(path), workload_lines[0], record_lines, _read_meta(path, texts.get(META_FILE)))


def _read_meta(path: Path, text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        meta = json.loads(text)
    except ValueError as err:
        raise SourceError(f"{path}: {META_FILE} is not JSON ({err})") from None
    if not isinstance(meta, dict):
        raise SourceError(f"{path}: {META_FILE} is not a JSON object")
    return meta


def _is_record(line: str) -> bool:
    """`[workload index, [trace, run_secs, target, args_info]]`, the workload being the database's only one."""
    try:
        row = json.loads(line)
    except ValueError:
        return False
    return (isinstance(row, list) and len(row) == 2 and row[0] == 0 and isinstance(row[1], list)
            and len(row[1]) == 4 and isinstance(row[1][2], dict))


def _parse_workload(source: Source, text: str) -> Workload:
    try:
        return Workload.parse(text)
    except MetatuneError as err:
        raise SourceError(f"{source.name}: {err}") from None


def assign_workload(source: Source, workload_text: str | None, split: str | None) -> None:
    """The source's workload and split: from its meta.json, else from --workload/--split."""
    claimed = source.meta.get("workload")
    if not (workload_text or claimed):
        raise SourceError(f"{source.name} has no {META_FILE} naming its workload; give it with --workload")
    source.workload = _parse_workload(source, str(workload_text or claimed))
    if claimed and workload_text and _parse_workload(source, str(claimed)) != source.workload:
        raise SourceError(f"{source.name}: its {META_FILE} says {claimed}, --workload says {workload_text}")
    source.split = split or str(source.meta.get("split", "train"))
    if source.split not in SPLITS:
        raise SourceError(f"{source.name}: split {source.split!r} is neither {' nor '.join(SPLITS)}")


def _parse_json() -> Any:
    """TVM's JSON parser: its objects' `from_json` take what it returns."""
    import tvm

    return tvm.get_global_func("ffi.json.Parse")


def _last_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[-1]


def check_workload(source: Source) -> None:
    """The database's workload must be the program metatune generates for the claimed one."""
    import tvm_ffi
    from tvm.s_tir.meta_schedule.database import Workload as TVMWorkload

    parse = _parse_json()
    try:
        found = TVMWorkload.from_json(parse(source.workload_line))
    except Exception as err:  # noqa: BLE001 - TVM raises several error types for a bad line
        raise SourceError(f"{source.name}: {WORKLOAD_FILE} is not a TVM workload ({_last_line(err)})") from None
    assert source.workload is not None
    if not tvm_ffi.structural_equal(found.mod, source.workload.irmodule()):
        raise SourceError(f"{source.name}: the database's workload is not {source.workload} "
                          "(its program differs from the one metatune generates for it)")
    source.tvm_workload = found


def records_target(sources: list[Source]) -> dict[str, Any]:
    """The one target every record of every source was measured for."""
    seen: dict[str, tuple[dict[str, Any], str]] = {}
    for source in sources:
        for raw in {json.dumps(json.loads(line)[1][2], sort_keys=True) for line in source.record_lines}:
            config = target_json(parse_target(json.loads(raw)))
            seen.setdefault(json.dumps(config, sort_keys=True), (config, source.name))
    if len(seen) > 1:
        (a, a_src), (b, b_src) = list(seen.values())[:2]
        raise SourceError(f"the records were measured for {len(seen)} targets, e.g. {a} ({a_src}) and {b} ({b_src}); "
                          "a dataset holds one device: import each into its own --out")
    return next(iter(seen.values()))[0]


def parse_records(source: Source, advance: Callable[[int], Any]) -> None:
    """TVM's records of the source, each with its config key and, if it failed, its run_secs."""
    from tvm.s_tir.meta_schedule.database import TuningRecord

    parse = _parse_json()
    for i, line in enumerate(source.record_lines):
        row = json.loads(line)[1]
        try:
            record = TuningRecord.from_json(parse(json.dumps(row)), source.tvm_workload)
        except Exception as err:  # noqa: BLE001 - TVM raises several error types for a bad record
            raise SourceError(f"{source.name}: record {i + 1} is not a TVM tuning record ({_last_line(err)})") from None
        run_secs = row[1]
        failed = successful_run_seconds(run_secs) is None  # no times, TVM's failure marker, or a broken timer
        source.records.append((config_key(record.trace), record, run_secs if failed else None))
        advance(1)
