"""`metatune dataset import`: TVM JSON databases of plain MetaSchedule runs become a dataset of one device,
checked before anything is written, and importing them again changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metatune.dataset import sources
from metatune.dataset.card import compute_counts, read_card
from metatune.dataset.importer import FAILURE_KIND, import_databases
from metatune.dataset.sources import SourceError
from metatune.dataset.store import DatasetStore
from tests.dataset.gpu_sources import A100_TARGET, BATCH_MATMUL, DENSE, SHIPPED_GPU, archive, set_target, write_source
from tests.processes import run_metatune


def _files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name != "card.json"}


def test_a_folder_and_an_archive_import_as_sealed_workloads_and_again_change_nothing(tmp_path):
    dense = write_source(tmp_path / "src" / "dense", DENSE, records=6, failed=1)
    bmm = archive(write_source(tmp_path / "src" / "bmm", BATCH_MATMUL, records=4, failed=1, split="heldout"),
                  tmp_path / "pack")
    out = tmp_path / "ds"

    result = import_databases([dense, bmm], out, note="two small runs")
    assert (result.records, result.failures, result.duplicates, result.sources) == (10, 2, 0, 2)
    card = read_card(out)
    assert card["device"]["device_id"] == "cuda-sm90-h100" and "spec" not in card
    assert card["totals"] == {"workloads": 2, "complete": 2, "records": 10, "failures": 2}
    assert card["counts"]["batch_matmul"]["heldout"]["records"] == 4
    assert card["failures_by_kind"] == {"dense": {FAILURE_KIND: 1}, "batch_matmul": {FAILURE_KIND: 1}}
    assert card["source"]["note"] == "two small runs"
    assert card["source"]["workloads"][DENSE]["from"] == ["dense"] and card["wall_s"] == 5.0
    assert all(ws.sealed for ws in DatasetStore(out))
    assert card["workloads"] == compute_counts(DatasetStore(out))["workloads"]

    before = _files(out)
    again = import_databases([dense, tmp_path / "pack"], out)  # the archive, found in its folder this time
    assert (again.records, again.failures, again.duplicates) == (0, 0, 12)
    assert _files(out) == before and again.card["dataset_id"] == card["dataset_id"]
    assert again.card["source"]["note"] == "two small runs"


def test_an_imported_dataset_exports_a_database_tvm_reads_and_replays(tmp_path):
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    out = tmp_path / "ds"
    import_databases([write_source(tmp_path / "dense", DENSE, records=3, failed=0)], out)
    wl, rec = DatasetStore(out).export_tvm_database(tmp_path / "tvm")
    records = JSONDatabase(str(wl), str(rec)).get_all_tuning_records()
    assert len(records) == 3
    sch = Schedule(records[0].workload.mod)
    records[0].trace.apply_to_schedule(sch, remove_postproc=False)
    assert "threadIdx" in sch.mod.script()


def test_duplicates_within_the_sources_are_imported_once(tmp_path):
    first = write_source(tmp_path / "a", DENSE, records=4, failed=0)
    second = write_source(tmp_path / "b", DENSE, records=6, failed=0)  # its first four are the same
    result = import_databases([first, second], tmp_path / "ds")
    assert (result.records, result.duplicates) == (6, 4)
    ws = next(iter(DatasetStore(tmp_path / "ds")))
    assert len(set(ws.record_keys())) == ws.num_records == 6


def test_a_configuration_that_failed_in_one_source_and_ran_in_another_keeps_its_latency(tmp_path):
    def failed(row: list) -> None:
        row[1] = [1e10]  # MetaSchedule's mark of a failed measurement (e.g. a timeout under load)

    first = write_source(tmp_path / "a", DENSE, records=2, failed=0, edit=failed)
    second = write_source(tmp_path / "b", DENSE, records=2, failed=0)  # the same two, measured
    result = import_databases([first, second], tmp_path / "ds")
    assert (result.records, result.failures, result.duplicates) == (2, 0, 2)


def test_importing_into_a_dataset_of_another_device_is_refused(tmp_path):
    out = tmp_path / "ds"
    import_databases([write_source(tmp_path / "h100", DENSE, records=2, failed=0)], out)
    before = _files(out)
    a100 = write_source(tmp_path / "a100", BATCH_MATMUL, records=2, failed=0, edit=set_target(A100_TARGET))
    with pytest.raises(SourceError, match="holds measurements of cuda-sm90-h100, these records are of cuda-sm80-generic"):
        import_databases([a100], out)
    assert _files(out) == before


def test_records_of_several_targets_are_refused(tmp_path):
    h100 = write_source(tmp_path / "h100", DENSE, records=2, failed=0)
    a100 = write_source(tmp_path / "a100", BATCH_MATMUL, records=2, failed=0, edit=set_target(A100_TARGET))
    with pytest.raises(SourceError, match="measured for 2 targets"):
        import_databases([h100, a100], tmp_path / "ds")
    assert not (tmp_path / "ds").exists()


def test_a_target_that_contradicts_the_records_is_refused(tmp_path):
    source = write_source(tmp_path / "h100", DENSE, records=2, failed=0)
    with pytest.raises(SourceError, match="contradicts"):
        import_databases([source], tmp_path / "ds", target="nvidia/nvidia-a100")


def test_records_of_a_cpu_they_do_not_name_need_the_target_of_the_machine_that_measured_them(tmp_path):
    """TVM's plain `llvm` compiles for the machine it runs on: such records would otherwise be filed as
    this machine's, wherever they were measured."""
    plain = write_source(tmp_path / "plain", DENSE, records=2, failed=0, edit=set_target({"kind": "llvm"}))
    with pytest.raises(SourceError, match="names no CPU"):
        import_databases([plain], tmp_path / "ds")
    sixteen = write_source(tmp_path / "16c", DENSE, records=2, failed=0,
                           edit=set_target({"kind": "llvm", "mcpu": "znver3", "num-cores": 16}))
    with pytest.raises(SourceError, match="contradicts"):
        import_databases([sixteen], tmp_path / "ds", target="llvm -mcpu=znver3 -num-cores=2")
    assert not (tmp_path / "ds").exists()


def test_workloads_without_their_card_are_not_added_to(tmp_path):
    """The card names the device of the records: without it, another device's could be mixed in."""
    from metatune import MetatuneError
    from metatune.dataset.builder import build_dataset
    from tests.dataset.test_dataset import write_spec

    out = tmp_path / "ds"
    import_databases([write_source(tmp_path / "a", DENSE, records=2, failed=0)], out)
    (out / "card.json").unlink()
    before = _files(out)
    with pytest.raises(MetatuneError, match="holds workloads but no card.json"):
        import_databases([write_source(tmp_path / "b", DENSE, records=3, failed=0)], out)
    with pytest.raises(MetatuneError, match="holds workloads but no card.json"):
        build_dataset(write_spec(tmp_path, samples=2), out, batch=2)
    assert _files(out) == before


def test_records_timed_at_zero_or_less_are_imported_as_failures(tmp_path):
    """A broken timer's 0 s would be an infinite throughput to learn from, and deployed first on export."""
    def broken(row: list) -> None:
        row[1] = [0.0] if row[1] != [1e10] else row[1]

    result = import_databases([write_source(tmp_path / "a", DENSE, records=3, failed=1, edit=broken)], tmp_path / "ds")
    assert (result.records, result.failures) == (0, 4)


def test_the_workload_must_be_the_program_metatune_generates(tmp_path):
    source = write_source(tmp_path / "dense", DENSE, records=2, failed=0, meta=False)
    with pytest.raises(SourceError, match="has no meta.json naming its workload"):
        import_databases([source], tmp_path / "ds")
    with pytest.raises(SourceError, match=r"the database's workload is not dense:m=1,n=64,k=128"):
        import_databases([source], tmp_path / "ds", workload="dense:m=1,n=64,k=128")
    result = import_databases([source], tmp_path / "ds", workload=DENSE, split="heldout")
    assert result.records == 2 and result.card["counts"]["dense"]["heldout"]["records"] == 2
    with pytest.raises(SourceError, match="--workload names the workload of one source; 2"):
        import_databases([source, write_source(tmp_path / "other", DENSE, meta=False)], tmp_path / "ds", workload=DENSE)


def test_a_sealed_workload_never_changes(tmp_path):
    out = tmp_path / "ds"
    import_databases([write_source(tmp_path / "few", DENSE, records=2, failed=0)], out)
    with pytest.raises(SourceError, match="sealed; 2 records of it not yet there"):
        import_databases([write_source(tmp_path / "more", DENSE, records=4, failed=0)], out)


@pytest.mark.parametrize("make, fragment", [
    (lambda tmp: tmp / "nope", "no such file or directory"),
    (lambda tmp: tmp, "is not a TVM database"),
    (lambda tmp: _torn(write_source(tmp / "torn", DENSE, records=3, failed=0)), "line 3 of database_tuning_record.json"),
    (lambda tmp: _garbage_archive(tmp), "is not a readable .tar.gz"),
    (lambda tmp: _empty(write_source(tmp / "empty", DENSE)), "holds no records"),
])
def test_bad_sources_are_one_clear_error(tmp_path, make, fragment):
    with pytest.raises(SourceError, match=fragment):
        import_databases([make(tmp_path)], tmp_path / "ds")
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("packed", [False, True])
def test_a_database_file_too_large_to_read_is_refused_before_it_is_read(tmp_path, monkeypatch, packed):
    source = write_source(tmp_path / "src" / "dense", DENSE, records=3, failed=0)
    (source / "database_tuning_record.json").write_text((source / "database_tuning_record.json").read_text() * 10)
    size = (source / "database_tuning_record.json").stat().st_size  # the largest file of the database
    monkeypatch.setattr(sources, "MAX_FILE_BYTES", size - 1)
    with pytest.raises(SourceError, match=f"database_tuning_record.json is {size:,} bytes, over the {size - 1:,}"):
        import_databases([archive(source, tmp_path / "pack") if packed else source], tmp_path / "ds")
    assert not (tmp_path / "ds").exists()
    monkeypatch.setattr(sources, "MAX_FILE_BYTES", size)
    assert import_databases([source], tmp_path / "ds").records == 3


def _torn(source: Path) -> Path:
    path = source / "database_tuning_record.json"
    text = path.read_text()
    path.write_text(text[: len(text) - 200])  # a run killed in the middle of its last append
    return source


def _empty(source: Path) -> Path:
    (source / "database_tuning_record.json").write_text("")
    return source


def _garbage_archive(tmp: Path) -> Path:
    path = tmp / "run.tar.gz"
    path.write_bytes(b"not gzip at all")
    return path


def test_build_refuses_to_resume_into_a_dataset_of_another_device(tmp_path):
    out = tmp_path / "ds"
    import_databases([write_source(tmp_path / "h100", DENSE, records=2, failed=0)], out)
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: tiny\nseed: 1\nsamples_per_workload: 2\nmax_gflop: 0.01\nfamilies:\n  dense:\n"
                    "    workloads: 1\n    params: {m: 16, n: 16, k: 16}\n")
    res = run_metatune(["dataset", "build", "--spec", str(spec), "--out", str(out)], timeout=300)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "holds measurements of cuda-sm90-h100" in res.stderr


def test_the_shipped_gpu_dataset_is_consistent():
    card = read_card(SHIPPED_GPU)
    assert card["device"]["device_id"] == "cuda-sm90-h100" and card["totals"]["workloads"] == 28
    assert card["workloads"] == compute_counts(DatasetStore(SHIPPED_GPU))["workloads"]
    assert all(w["complete"] for w in card["workloads"].values())
    assert set(json.loads((SHIPPED_GPU / "torch_refs_h100.json").read_text())["refs"]) <= set(card["workloads"])
    info = run_metatune(["dataset", "info", str(SHIPPED_GPU)], timeout=120)
    assert info.returncode == 0 and "on cuda-sm90-h100: " in info.stdout, info.stderr
