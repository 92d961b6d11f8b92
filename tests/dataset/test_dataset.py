"""Dataset specs, the crash-safe store and the resumable builder (real measurements)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from metatune.dataset.card import compute_counts, read_card
from metatune.dataset.spec import load_spec
from metatune.dataset.store import RECORD_FILE, DatasetStore
from metatune.encode.supergraph import Template
from metatune.fileio import REPO_ROOT
from metatune.workload.operators import get_suite
from tests.processes import run_metatune

TINY_SPEC = """
name: tiny
seed: 1
samples_per_workload: {samples}
max_gflop: 0.01
families:
  dense:
    workloads: 2
    params: {{m: {{choices: [16, 32]}}, n: {{choices: [32, 64]}}, k: {{choices: [16, 32]}}}}
held_out:
  workloads: ["dense:m=8,n=8,k=8"]
"""


def write_spec(tmp_path: Path, samples: int = 12, text: str | None = None) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text if text is not None else TINY_SPEC.format(samples=samples))
    return path


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run_metatune(list(args), timeout=timeout)


@pytest.mark.parametrize(
    "replace, fragment",
    [
        (("dense:", "densely:"), "unknown family 'densely'"),
        (("k: {choices: [16, 32]}", "k: [64, 8]"), "range of 'k' is empty"),
        (("samples_per_workload: 12\n", ""), "samples_per_workload: Field required"),
        (("n: {choices: [32, 64]}, ", ""), "missing n"),
        (("m: {choices: [16, 32]}", "m: {choices: [16, 32]}, q: 3"), "unknown q"),
        (("dense:m=8,n=8,k=8", "dense:m=8,n=8"), "missing parameter"),
        (("max_gflop: 0.01", "max_gflop: 0.000001"), "only 0 of 2 valid shapes"),
    ],
)
def test_bad_specs_are_rejected_before_measuring(tmp_path, replace, fragment):
    spec = write_spec(tmp_path, text=TINY_SPEC.format(samples=12).replace(*replace))
    out = cli("dataset", "build", "--spec", str(spec), "--out", str(tmp_path / "ds"), timeout=120)
    assert out.returncode == 2, out.stderr
    assert fragment in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "ds").exists(), "nothing may be written for a bad spec"


def test_held_out_never_in_training(tmp_path):
    spec = load_spec(REPO_ROOT / "datasets/specs/default-cpu.yaml")
    held = {w.key for w in spec.held_out_workloads()}
    train = {w.key for w in spec.training_workloads()}
    assert held and train and not (held & train)
    assert {w.key for w in spec.held_out_workloads()} >= {str(w) for w in get_suite("resnet18")}
    families = {w.split(":")[0] for w in train}
    assert len(families) == 9 and len(train) >= 64


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "datasets" / "specs").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_specs_draw_every_workload_they_ask_for(path):
    """Each shipped spec draws as many distinct training workloads as its families ask for, none of them
    held out; the adaptation specs hold no ResNet-18 layer, so that suite stays unseen after `zoo adapt`."""
    spec = load_spec(path)
    train = {w.key for w in spec.training_workloads()}
    held = {w.key for w in spec.held_out_workloads()}
    assert len(train) == sum(f.workloads for f in spec.families.values())
    assert held and not (held & train)
    if spec.name.startswith("adapt"):
        assert not (train | held) & {str(w) for w in get_suite("resnet18")}


def test_torn_line_is_cut_on_load(tmp_path):
    from metatune.dataset.store import WorkloadStore
    from metatune.workload.operators import Workload

    store = WorkloadStore(tmp_path / "w", Workload.parse("dense:m=2,n=2,k=2"), "train")
    path = store.dir / RECORD_FILE
    path.write_text('[0,[1,[0.1]]]\n[0,[2,[0.2]]]\n[0,[3,[0.')  # died mid-append
    again = WorkloadStore(tmp_path / "w")
    assert again.num_records == 2
    assert path.read_text().endswith("]]\n")


def _snapshot(directory: Path) -> dict[str, list[str]]:
    """Config keys of every record on disk, per workload (what was reported measured)."""
    return {ws.workload.key: ws.record_keys() for ws in DatasetStore(directory)}


def test_sigkill_then_resume_loses_and_duplicates_nothing(tmp_path):
    spec = write_spec(tmp_path, samples=8)
    out = tmp_path / "ds"
    proc = subprocess.Popen(
        [sys.executable, "-m", "metatune", "dataset", "build", "--spec", str(spec), "--out", str(out), "--batch", "4"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )
    deadline = time.time() + 240
    while time.time() < deadline:  # kill once some, but not all, records exist
        n = sum(len(v) for v in _snapshot(out).values()) if out.exists() else 0
        if n >= 6:
            break
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _snapshot(out)
    assert 6 <= sum(len(v) for v in before.values()) < 24

    done = cli("dataset", "build", "--spec", str(spec), "--out", str(out), "--batch", "4", timeout=600)
    assert done.returncode == 0, done.stderr
    after = _snapshot(out)
    for key, keys in before.items():
        assert keys == after[key][: len(keys)], "a record reported measured was lost or rewritten"
    for key, keys in after.items():
        assert len(keys) == len(set(keys)), f"duplicate configuration in {key}"
        ws = DatasetStore(out)
        failures = next(w for w in ws if w.workload.key == key).failures
        assert not ({f.key for f in failures} & set(keys)), "a configuration is both measured and failed"
    assert all(len(v) == 8 for v in after.values())

    card = read_card(out)
    assert card["counts"] == compute_counts(DatasetStore(out))["counts"]
    assert card["totals"]["records"] == 24 and card["totals"]["complete"] == 3

    # MetaSchedule's own JSONDatabase reads the export, and a record re-applies to its workload.
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    assert cli("dataset", "export", str(out), "--out", str(tmp_path / "tvm")).returncode == 0
    db = JSONDatabase(str(tmp_path / "tvm" / "database_workload.json"), str(tmp_path / "tvm" / "database_tuning_record.json"))
    records = db.get_all_tuning_records()
    assert len(records) == 24
    from tvm.s_tir import Schedule

    sch = Schedule(records[0].workload.mod)
    records[0].trace.apply_to_schedule(sch, remove_postproc=False)
    assert "T.parallel" in sch.mod.script() or "T.vectorized" in sch.mod.script()
    again = cli("dataset", "export", str(out), "--out", str(tmp_path / "tvm"))  # would replace a database's records
    assert again.returncode == 2 and "holds a TVM database already" in again.stderr, again.stderr
    assert len(JSONDatabase(str(tmp_path / "tvm" / "database_workload.json"),
                            str(tmp_path / "tvm" / "database_tuning_record.json")).get_all_tuning_records()) == 24

    info = cli("dataset", "info", str(out), "--json")
    assert json.loads(info.stdout)["totals"]["records"] == 24

    # The encoding cache: every complete workload once; a second run reads it instead of re-encoding.
    TEMPLATE_VERSION = Template.load().version

    first = cli("dataset", "encode", str(out), timeout=300)
    assert first.returncode == 0 and "3 complete workloads, 24 programs" in first.stdout, first.stderr
    cache = sorted((out / "cache" / str(TEMPLATE_VERSION)).rglob("*.safetensors"))
    assert len(cache) == 3
    mtimes = [p.stat().st_mtime_ns for p in cache]
    assert cli("dataset", "encode", str(out), timeout=300).returncode == 0
    assert [p.stat().st_mtime_ns for p in cache] == mtimes


def test_resume_refuses_another_spec(tmp_path):
    spec = write_spec(tmp_path, samples=2)
    out = tmp_path / "ds"
    assert cli("dataset", "build", "--spec", str(spec), "--out", str(out), "--batch", "2", timeout=300).returncode == 0
    other = write_spec(tmp_path, text=TINY_SPEC.format(samples=3))
    res = cli("dataset", "build", "--spec", str(other), "--out", str(out), timeout=120)
    assert res.returncode == 2 and "another spec" in res.stderr


def test_info_recounts_the_records_a_killed_build_left(tmp_path):
    """The card is rewritten between workloads only: after a kill -9 it says 0 where the records hold 8.
    `dataset info` recounts from the records, and writes nothing (the torn line stays for the builder)."""
    import gzip
    import shutil

    from metatune.fileio import WORKLOAD_FILE

    shipped = REPO_ROOT / "datasets" / "x86_64-sapphirerapids-2c"
    source = sorted((shipped / "workloads" / "dense").iterdir())[0]
    out = tmp_path / "ds"
    workload_dir = out / "workloads" / "dense" / source.name
    workload_dir.mkdir(parents=True)
    for name in ("meta.json", WORKLOAD_FILE):
        shutil.copy(source / name, workload_dir)
    lines = gzip.decompress((source / (RECORD_FILE + ".gz")).read_bytes()).decode().splitlines()
    records = "\n".join(lines[:8]) + "\n" + lines[8][:40]  # killed in the middle of the ninth append
    (workload_dir / RECORD_FILE).write_text(records)
    card = json.loads((shipped / "card.json").read_text())
    zero = {"workloads": 0, "complete": 0, "records": 0, "failures": 0}
    card.update(counts={}, failures_by_kind={}, totals=zero, workloads={})
    (out / "card.json").write_text(json.dumps(card))

    info = cli("dataset", "info", str(out), "--json", timeout=120)
    assert info.returncode == 0, info.stderr
    data = json.loads(info.stdout)
    assert data["totals"] == {"workloads": 1, "complete": 0, "records": 8, "failures": 0}
    split = json.loads((source / "meta.json").read_text())["split"]
    assert data["counts"]["dense"][split]["records"] == 8 and data["dataset_id"] == card["dataset_id"]
    text = cli("dataset", "info", str(out), timeout=120).stdout
    assert ": 8 records, 0 failures, 1 workloads" in text
    assert (workload_dir / RECORD_FILE).read_text() == records
    assert json.loads((out / "card.json").read_text())["totals"] == zero


def test_a_workload_tvm_cannot_schedule_on_the_target_stops_the_build_before_anything_is_measured(tmp_path):
    """conv2d_winograd has no CUDA design space in TVM 0.27: a GPU build of a spec with it (the CPU
    adaptation spec) is refused at once, naming it, instead of failing after hours of measuring."""
    from metatune import MetatuneError
    from metatune.dataset.builder import DatasetBuilder
    from metatune.env.device import fingerprint_for_target
    from metatune.measure.measurer import Measurer

    spec = load_spec(REPO_ROOT / "datasets/specs/adapt-cpu.yaml")
    device = fingerprint_for_target("nvidia/nvidia-h100")
    with Measurer(device.tvm_target()) as measurer:
        with pytest.raises(MetatuneError, match=r"1 workload\(s\) of spec adapt-cpu .* on cuda .*: "
                                                r"conv2d_winograd:[^;]*; .*adapt-cuda.yaml"):
            DatasetBuilder(spec, tmp_path / "ds", measurer, device).run()
    assert read_card(tmp_path / "ds") is None and not (tmp_path / "ds" / "workloads").exists()  # nothing written


def test_the_gpu_adaptation_spec_has_a_cuda_design_space_for_every_workload():
    from tvm.target import Target

    from metatune.dataset.builder import plan
    from metatune.space.knob_space import DesignSpaces

    planned = plan(load_spec(REPO_ROOT / "datasets/specs/adapt-cuda.yaml"))
    target = Target("nvidia/nvidia-h100")
    assert len(planned) == 12 and all(DesignSpaces(p.workload, target).spaces for p in planned)
