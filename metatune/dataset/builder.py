"""`metatune dataset build`: sample workloads from a spec, measure random configurations.

Resumable by construction: every measured or failed configuration is appended to its
workload's store before it is counted, a re-run reads the stores back, never measures a
recorded configuration again, and continues with the workloads that are not complete. The card
(device, spec) is written before the first measurement, so that even a build that crashed refuses
to go on with another device or spec.
One build at a time writes a dataset directory (it is locked); Ctrl-C drops the batch in
flight, writes the card and stops (env/interrupt.py).

Labels are only as good as the machine was quiet: a dataset timed beside other work reads some
workloads several times too slow, and no spread between a batch's repeats shows it. A local build
therefore watches the CPU time of processes outside its own tree while each batch is timed, times
a disturbed batch again after a pause, and keeps it, marked in the store, only when the load
outlasts its retries; the card counts both.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from metatune import MetatuneError, __version__
from metatune.dataset.card import compute_counts, read_card, require_card_with_records, write_card
from metatune.dataset.spec import DatasetSpec, load_spec
from metatune.dataset.store import DatasetStore, WorkloadStore, config_key
from metatune.env.device import DeviceFingerprint
from metatune.env.interrupt import Interrupted
from metatune.fileio import hold_directory
from metatune.measure.cpu_load import DISTURBING_CORES, OtherLoad
from metatune.measure.measurer import Measurer, MeasureSettings
from metatune.measure.runners import make_runner
from metatune.progress import progress_bar
from metatune.space.knob_space import DesignSpaces, UnsupportedOnTarget
from metatune.workload.operators import Workload

if TYPE_CHECKING:
    from metatune.measure.measurer import Measurer, MeasureResult

logger = logging.getLogger(__name__)

MAX_ATTEMPTS_FACTOR = 2  # stop a workload after this many times its target in attempts
HELD_OUT_EVERY = 5  # interleave one held-out workload after every 5 training workloads
RETRIES_UNDER_LOAD = 2  # times a disturbed batch is timed again before it is kept, marked
RETRY_PAUSE_S = 10.0  # wait before timing a disturbed batch again: a short burst of other work ends


@dataclass
class PlannedWorkload:
    workload: Workload
    split: str


def plan(spec: DatasetSpec) -> list[PlannedWorkload]:
    """Families round-robin and held-out workloads interleaved, so that a partial build
    (the build takes hours and resumes across machines) already covers every family and split."""
    by_family: dict[str, list[Workload]] = {}
    for w in spec.training_workloads():
        by_family.setdefault(w.family, []).append(w)
    round_robin = [ws[i] for i in range(max(map(len, by_family.values()))) for ws in by_family.values() if i < len(ws)]
    train = [PlannedWorkload(w, "train") for w in round_robin]
    held = [PlannedWorkload(w, "heldout") for w in spec.held_out_workloads()]
    order: list[PlannedWorkload] = []
    while train or held:
        order += train[:HELD_OUT_EVERY]
        train = train[HELD_OUT_EVERY:]
        if held:
            order.append(held.pop(0))
    return order


def _seed(spec: DatasetSpec, workload: Workload, attempt: int) -> int:
    digest = hashlib.sha256(f"{spec.seed}/{workload.key}/{attempt}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


class DatasetBuilder:
    """Measures the planned workloads into a dataset directory."""

    def __init__(
        self, spec: DatasetSpec, out: Path, measurer: "Measurer", fingerprint: "DeviceFingerprint",
        batch_size: int = 32, watch_load: bool = True, retries_under_load: int = RETRIES_UNDER_LOAD,
    ) -> None:
        self.spec = spec
        self.store = DatasetStore(out)
        self.measurer = measurer
        self.fingerprint = fingerprint
        self.batch_size = batch_size
        self.watch_load = watch_load  # False where the timing runs elsewhere (RPC)
        self.retries_under_load = retries_under_load
        self.remeasured_batches = 0
        self._check_compatible(out)

    def _check_compatible(self, out: Path) -> None:
        card = require_card_with_records(out)
        if card is None:
            return
        if card["device"]["device_id"] != self.fingerprint.device_id:
            raise MetatuneError(
                f"{out} holds measurements of {card['device']['device_id']}, this device is "
                f"{self.fingerprint.device_id}; use a new --out directory"
            )
        if "source" in card:
            raise MetatuneError(f"{out} was imported from TVM databases ('metatune dataset import'), not built from "
                                "a spec; use a new --out directory")
        if card.get("spec_hash") != self.spec.digest():
            raise MetatuneError(f"{out} was built from another spec ({card.get('spec_name')}); use a new --out directory")

    def run(self) -> dict:
        planned = plan(self.spec)
        target = self.spec.samples_per_workload
        spaces = self._design_spaces([p.workload for p in planned if not self.store.is_sealed(p.workload)])
        start = time.perf_counter()
        prior = read_card(self.store.dir) or {}
        prior_wall = prior.get("wall_s", 0.0)
        prior_load = prior.get("load_check") or {}
        self.remeasured_batches = prior_load.get("remeasured_batches", 0)
        # a resumed build is watched only if its earlier parts were (a card from before the check has none)
        self.watched_throughout = self.watch_load and (not prior or bool(prior_load.get("watched")))
        if not prior:  # the device and spec on record before any workload folder: a crash cannot lose them
            self._write_card(0.0)
        stores = [self.store.open(p.workload, p.split) for p in planned]
        done = sum(min(s.num_records, target) for s in stores)
        if prior and all(s.sealed for s in stores):
            return prior  # nothing left to measure: the card already describes every record
        with progress_bar() as bar:
            task = bar.add_task("dataset", total=target * len(stores), completed=done, status="")
            try:
                for store in stores:
                    if store.sealed:
                        continue
                    bar.update(task, status=str(store.workload)[:60])
                    self._measure_workload(store, spaces[str(store.workload)], lambda n: bar.update(task, advance=n))
                    bar.update(task, completed=sum(min(s.num_records, target) for s in stores))
                    self._write_card(prior_wall + time.perf_counter() - start)
            except Interrupted:
                self._write_card(prior_wall + time.perf_counter() - start)  # counts and time up to the stop
                raise
        return self._write_card(prior_wall + time.perf_counter() - start)

    def _design_spaces(self, workloads: list[Workload]) -> dict[str, DesignSpaces]:
        """The design spaces of every workload still to measure, before anything is written: a
        workload TVM cannot schedule on this target stops the build at once, with every such one named."""
        spaces, unsupported = {}, []
        for workload in workloads:
            try:
                spaces[str(workload)] = DesignSpaces(workload, self.measurer.target)
            except UnsupportedOnTarget:
                unsupported.append(str(workload))
        if unsupported:
            kind = self.measurer.target.kind.name
            raise MetatuneError(f"{len(unsupported)} workload(s) of spec {self.spec.name} have no MetaSchedule design "
                                f"space on {kind} (a TVM limitation): {', '.join(unsupported)}; leave their families "
                                "out of the spec" + (" (datasets/specs/adapt-cuda.yaml does)" if kind == "cuda" else ""))
        return spaces

    def _measure_workload(self, store: WorkloadStore, spaces: DesignSpaces, advance) -> None:
        target = self.spec.samples_per_workload
        store.ensure_workload_line(spaces.mod)
        tvm_workload = store.tvm_workload()
        while store.num_records < target:
            attempts = store.num_records + len(store.failures)
            if attempts >= MAX_ATTEMPTS_FACTOR * target:
                break
            want = min(self.batch_size, target - store.num_records)
            fresh = [
                (c, k)
                for c in spaces.random_candidates(2 * want, seed=_seed(self.spec, store.workload, attempts))
                if (k := config_key(c.trace)) not in store.keys()
            ][:want]
            if not fresh:
                break  # the space is exhausted (or nearly): keep what we have
            measure_candidates = [c.measure_candidate() for c, _ in fresh]
            results, other_cores = self._measure_batch(store.workload, measure_candidates)
            measured = 0
            for (cand, key), mc, result in zip(fresh, measure_candidates, results):
                if result.ok:
                    store.append_record(self._record(cand, mc, result.latencies_s, tvm_workload), key)
                    if other_cores >= DISTURBING_CORES:
                        store.append_disturbed(key, other_cores)
                    measured += 1
                else:
                    store.append_failure(key, result.failure.value, result.message)
            advance(measured)
        store.seal()

    def _measure_batch(self, workload: Workload, candidates: list) -> tuple[list["MeasureResult"], float]:
        """Times `candidates`, again while other processes kept cores busy (up to `retries_under_load`
        times, after a pause); returns the kept results and the other load they were timed beside
        (0 when not watched)."""
        for attempt in range(self.retries_under_load + 1):
            load = OtherLoad((os.getpid(),), descendants=True).start() if self.watch_load else None
            results = self.measurer.measure(workload, candidates)
            cores = load.cores() if load is not None else 0.0
            if cores < DISTURBING_CORES:
                return results, cores
            if attempt < self.retries_under_load:
                self.remeasured_batches += 1
                logger.warning("%s: other processes kept %.1f cores busy while %d candidates were timed; timing "
                               "them again in %.0f s", workload, cores, len(candidates), RETRY_PAUSE_S)
                time.sleep(RETRY_PAUSE_S)
        logger.warning("%s: still %.1f cores of other load after %d retries; the batch is kept and its records "
                       "marked disturbed", workload, cores, self.retries_under_load)
        return results, cores

    def _record(self, cand, mc, latencies: list[float], tvm_workload):
        from tvm.s_tir.meta_schedule.database import TuningRecord

        return TuningRecord(cand.trace, tvm_workload, latencies, self.measurer.target, mc.args_info)

    def _write_card(self, wall_s: float) -> dict:
        import tvm

        card = {
            "dataset_id": f"{self.spec.name}-{self.fingerprint.device_id}-{self.spec.digest()[:8]}",
            "spec_name": self.spec.name,
            "spec_hash": self.spec.digest(),
            "spec": self.spec.model_dump(mode="json"),
            "device": self.fingerprint.to_json(),
            "samples_per_workload": self.spec.samples_per_workload,
            **compute_counts(self.store),
            "measure_settings": self.measurer.settings.__dict__,
            "load_check": {"watched": self.watched_throughout, "limit_cores": DISTURBING_CORES,
                           "retries": self.retries_under_load, "remeasured_batches": self.remeasured_batches},
            "wall_s": round(wall_s, 1),
            "versions": {"metatune": __version__, "tvm": tvm.__version__},
            "updated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        write_card(self.store.dir, card)
        return card


def summarize(card: dict) -> str:
    """Human summary of a dataset card."""
    lines = [
        f"dataset {card['dataset_id']} on {card['device']['device_id']}: {card['totals']['records']} records, "
        f"{card['totals']['failures']} failures, {card['totals']['workloads']} workloads, {card['wall_s'] / 3600:.2f} h measured",
        f"{'family':<18}{'split':<9}{'workloads':>10}{'complete':>10}{'records':>9}{'failures':>9}",
    ]
    if "source" in card:
        lines.insert(1, f"imported from {card['source']['format']} files (metatune dataset import)")
    for family, splits in sorted(card["counts"].items()):
        for split, c in sorted(splits.items()):
            lines.append(
                f"{family:<18}{split:<9}{c['workloads']:>10}{c['complete']:>10}{c['records']:>9}{c['failures']:>9}"
            )
    load = card.get("load_check")
    if load is None:
        if "source" not in card:
            lines.append("other processes' load: not watched when this dataset was built")
    elif load["watched"]:
        lines.append(f"other processes' load: {load['remeasured_batches']} batches timed again, "
                     f"{card.get('disturbed_records', 0)} records kept although timed beside "
                     f">= {load['limit_cores']} busy cores")
    else:
        lines.append("other processes' load: not watched for all of this dataset's build")
    kinds = card.get("failures_by_kind", {})
    if kinds:
        lines.append("failures by kind: " + json.dumps(kinds, sort_keys=True))
    return "\n".join(lines)


def build_dataset(spec_path: Path, out: Path, runner: str = "local", workers: int | None = None, batch: int = 32,
                  verify: bool = True, target: str | None = None, samples: int | None = None,
                  retries_under_load: int = RETRIES_UNDER_LOAD) -> dict:
    """Build (or resume) the dataset `spec_path` describes into `out`; returns its card. `samples`
    overrides the spec's samples per workload (the card's spec then says so, and so does its hash).

    Every spec error surfaces before anything is measured, or `out` created. `out` has one writer
    at a time: two builds would measure the same configurations and seal shards with duplicates."""
    spec = _load_spec(spec_path, samples)
    spec.training_workloads()
    settings = MeasureSettings(build_workers=workers, run_timeout_s=10.0, verify=verify)
    runner_obj, fingerprint = make_runner(runner, settings, target)
    with (hold_directory(out, "a dataset build"),
          Measurer(fingerprint.tvm_target(), settings, runner=runner_obj) as measurer):
        return DatasetBuilder(spec, out, measurer, fingerprint, batch_size=batch, watch_load=runner == "local",
                              retries_under_load=retries_under_load).run()


def _load_spec(spec_path: Path, samples: int | None) -> DatasetSpec:
    spec = load_spec(spec_path)
    return spec if samples is None else spec.model_copy(update={"samples_per_workload": samples})


def complete_build(spec_path: Path, out: Path, samples: int | None = None) -> DeviceFingerprint | None:
    """The device `out` was measured on if it already holds every record of the spec (as
    `build_dataset` would finish it), else None: what comes after the measuring (adapting a
    checkpoint) then needs neither the device nor a build."""
    card = read_card(out)
    spec = _load_spec(spec_path, samples)
    if card is None or "source" in card or card.get("spec_hash") != spec.digest():
        return None
    store = DatasetStore(out, repair=False)
    if not all(store.is_sealed(p.workload) for p in plan(spec)):
        return None
    return DeviceFingerprint.from_json(card["device"])
