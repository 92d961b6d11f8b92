"""`metatune dataset import`: TVM JSON databases measured by plain MetaSchedule runs, as a dataset.

A MetaSchedule run that samples schedules (`tune_tir` with replay-trace and a random cost model, on a
GPU machine without metatune) measures what `dataset build` does; imported into the same layout (one
sealed store per workload, failures with a kind, a card naming the device) its records train alike.
Every source is read and checked (sources.py) before anything is written; a dataset of another device
is refused. Nothing is written twice, so importing the same sources again changes nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from metatune import __version__
from metatune.dataset.card import compute_counts, require_card_with_records, write_card
from metatune.dataset.sources import (
    Source,
    SourceError,
    assign_workload,
    check_workload,
    find_sources,
    parse_records,
    read_source,
    records_target,
)
from metatune.dataset.store import DatasetStore
from metatune.env.device import DeviceFingerprint, fingerprint_for_target, local_fingerprint
from metatune.fileio import hold_directory
from metatune.progress import progress_bar

SOURCE_FORMAT = "TVM MetaSchedule JSONDatabase"
FAILURE_KIND = "build_or_run_error"  # a failed record's kind: MetaSchedule's database does not say which
# meta.json keys the card keeps, under its names (a source's "device" is the name its GPU or CPU reported)
META_PROVENANCE = {"device": "measured_on", "tvm": "tvm", "sampling": "sampling", "evaluator": "evaluator",
                   "wall_s": "wall_s"}
TARGET_IDENTITY = ("kind", "arch", "mcpu", "mtriple", "num-cores")  # what --target may not contradict


def import_device(config: dict[str, Any], target: str | None) -> DeviceFingerprint:
    """The device of the records' target, or of --target, which may add to it but not contradict it.

    A CPU target of this machine's architecture that names neither CPU nor features (TVM's plain `llvm`,
    which TVM gives the host's triple) compiled for whichever machine measured the records, which the
    records do not say: --target must name it, or they would be filed as this machine's."""
    if target is None:
        device = fingerprint_for_target(json.dumps(config))
        names_no_cpu = config.get("kind") == "llvm" and not {"mcpu", "mattr"} & set(config)
        if names_no_cpu and device.arch == local_fingerprint().arch:
            raise SourceError(f"the records' target {config} names no CPU: TVM compiled them for the machine "
                              "that measured them, which the records do not say; pass that machine's --target "
                              "(`metatune device` there shows it; --target llvm if it was this one)")
        return device
    device = fingerprint_for_target(target)
    clash = [k for k in TARGET_IDENTITY if k in config and k in device.target and config[k] != device.target[k]]
    if clash or config["kind"] != device.target.get("kind"):
        raise SourceError(f"the records were measured for {config}, which --target {target} ({device.target}) "
                          "contradicts")
    return device


def check_destination(out: Path, device: DeviceFingerprint) -> dict[str, Any] | None:
    """The dataset's card, if any; a dataset of another device, or one `dataset build` made, is refused."""
    card = require_card_with_records(out)
    if card is None:
        return None
    if card["device"]["device_id"] != device.device_id:
        raise SourceError(f"{out} holds measurements of {card['device']['device_id']}, these records are of "
                          f"{device.device_id}; import into another --out")
    if "source" not in card:
        raise SourceError(f"{out} was built by 'metatune dataset build' from spec {card.get('spec_name')}; "
                          "import into another --out")
    return card


@dataclass
class ImportResult:
    """What an import added (duplicates: records already in the dataset or given twice)."""

    card: dict[str, Any]
    sources: int
    records: int
    failures: int
    duplicates: int


Plan = dict[str, tuple[list[Source], list[tuple[str, Any, Any]]]]  # workload key -> its sources, its new records


def plan_import(store: DatasetStore, sources: list[Source]) -> tuple[Plan, int]:
    """The records each workload lacks, and how many were duplicates. A sealed workload never changes,
    so one that would get new records is refused here, before anything is written."""
    existing = {ws.workload.key: ws for ws in store}
    groups: dict[str, list[Source]] = {}
    for source in sources:
        groups.setdefault(source.workload.key, []).append(source)  # type: ignore[union-attr]
    plan: Plan = {}
    duplicates = 0
    for key, group in groups.items():
        names = ", ".join(s.name for s in group)
        splits = {s.split for s in group} | ({existing[key].split} if key in existing else set())
        if len(splits) > 1:
            where = f"{names} and {store.dir}" if key in existing else names
            raise SourceError(f"{key} is both {' and '.join(sorted(splits))} ({where})")
        seen = set(existing[key].keys()) if key in existing else set()
        chosen: dict[str, tuple] = {}  # config -> its record: the first success, else the first failure
        for source in group:
            for config, record, failed in source.records:
                if config in seen or (config in chosen and (failed is not None or chosen[config][2] is None)):
                    duplicates += 1
                    continue
                duplicates += config in chosen  # a failure (e.g. a transient timeout) gives way to a success
                chosen[config] = (config, record, failed)
        fresh = list(chosen.values())
        if key in existing and existing[key].sealed and fresh:
            raise SourceError(f"{key} is already in {store.dir}, sealed; {len(fresh)} records of it not yet there "
                              f"({names}) would change it: import them into another --out")
        plan[key] = (group, fresh)
    return plan, duplicates


def write_plan(store: DatasetStore, plan: Plan) -> tuple[int, int]:
    """Append each workload's new records and failures, then seal it; returns (records, failures)."""
    records = failures = 0
    for group, fresh in plan.values():
        workload = group[0].workload
        assert workload is not None
        ws = store.open(workload, group[0].split)
        if ws.sealed:
            continue
        ws.ensure_workload_line(workload.irmodule())
        for config, record, failed in fresh:
            if failed is None:
                ws.append_record(record, config)
                records += 1
            else:
                ws.append_failure(config, FAILURE_KIND, f"MetaSchedule recorded run_secs {failed}, its mark of a "
                                  "failed build or run")
                failures += 1
        ws.seal()
    return records, failures


def _provenance(source: Source, old: dict[str, Any] | None) -> dict[str, Any]:
    entry = dict(old or {})
    entry.update({name: source.meta[k] for k, name in META_PROVENANCE.items() if k in source.meta})
    entry["from"] = sorted(set(entry.get("from", [])) | {Path(source.name).name})
    entry["split"] = source.split
    return entry


def make_card(store: DatasetStore, device: DeviceFingerprint, sources: list[Source], old: dict[str, Any] | None,
              note: str | None) -> dict[str, Any]:
    """The card of an imported dataset: counts recounted from the records, and where they came from."""
    import tvm

    old_source = (old or {}).get("source", {})
    workloads = dict(old_source.get("workloads", {}))
    for source in sources:
        key = source.workload.key  # type: ignore[union-attr]
        workloads[key] = _provenance(source, workloads.get(key))
    counts = compute_counts(store)
    # What training and zoo cards cite as the data's identity ("spec_hash"); no spec made these records,
    # so it is the import's: which databases gave how many records and failures to which workload.
    identity = {k: [v["records"], v["failures"], workloads.get(k, {}).get("from", [])]
                for k, v in counts["workloads"].items()}
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    source_block: dict[str, Any] = {"format": SOURCE_FORMAT, "failure_kind": FAILURE_KIND, "workloads": workloads}
    if note or old_source.get("note"):
        source_block["note"] = note or old_source["note"]
    return {
        "dataset_id": f"imported-{device.device_id}-{digest[:8]}",
        "spec_hash": digest,
        "device": device.to_json(),
        "source": source_block,
        **counts,
        "wall_s": round(sum(float(w.get("wall_s", 0.0)) for w in workloads.values()), 1),
        "versions": {"metatune": __version__, "tvm": tvm.__version__},
        "updated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def import_databases(paths: list[Path], out: Path, target: str | None = None, workload: str | None = None,
                     split: str | None = None, note: str | None = None) -> ImportResult:
    """Import the databases at `paths` into the dataset `out` (created if missing). Every check that
    reads only the sources comes before `out` is created."""
    found = find_sources(paths)
    if workload is not None and len(found) != 1:
        raise SourceError(f"--workload names the workload of one source; {len(found)} sources were given")
    if split is not None and workload is None:
        raise SourceError("--split goes with --workload; a source's meta.json gives its own split")
    sources = [read_source(p) for p in found]
    for source in sources:
        assign_workload(source, workload, split)
        check_workload(source)
    device = import_device(records_target(sources), target)
    check_destination(out, device)
    with progress_bar() as bar:
        task = bar.add_task("import", total=sum(len(s.record_lines) for s in sources), status="")
        for source in sources:
            bar.update(task, status=str(source.workload)[:60])
            parse_records(source, lambda n: bar.update(task, advance=n))
    with hold_directory(out, "a dataset import"):
        old = check_destination(out, device)  # again: another process may have written it meanwhile
        store = DatasetStore(out)
        plan, duplicates = plan_import(store, sources)
        write_card(out, make_card(store, device, [], old, note))  # the device is on record before any workload
        records, failures = write_plan(store, plan)
        card = make_card(store, device, sources, old, note)
        write_card(out, card)
    return ImportResult(card, len(sources), records, failures, duplicates)
