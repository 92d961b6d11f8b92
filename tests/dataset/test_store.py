"""A workload store: its keys as records are appended, and sealing that a crash interrupted."""

import gzip

import pytest

from metatune.dataset import store as store_module
from metatune.dataset.store import FAILURE_FILE, RECORD_FILE, DatasetStore
from metatune.fileio import REPO_ROOT

SHIPPED = REPO_ROOT / "datasets" / "x86_64-sapphirerapids-2c"


def test_a_fresh_store_knows_each_appended_record_once(tmp_path):
    source = next(s for s in DatasetStore(SHIPPED) if s.workload.family == "dense")
    records, keys = source.records()[:2], source.record_keys()[:2]
    store = DatasetStore(tmp_path).open(source.workload, "train")
    store.ensure_workload_line(source.workload.irmodule())
    for record, key in zip(records, keys):
        store.append_record(record, key)
    assert store.record_keys() == keys and store.keys() == set(keys) and store.num_records == 2
    assert next(iter(DatasetStore(tmp_path))).record_keys() == keys


def test_a_crash_in_the_middle_of_sealing_is_finished_when_the_store_is_opened(tmp_path, monkeypatch):
    source = next(s for s in DatasetStore(SHIPPED) if s.workload.family == "dense")
    store = DatasetStore(tmp_path).open(source.workload, "train")
    store.append_record(source.records()[0], source.record_keys()[0])
    store.append_failure("failed-config", "build_error", "no")
    write_atomic = store_module.write_atomic

    def power_cut_before_the_records(path, data):
        if path.name == RECORD_FILE + ".gz":
            raise OSError("power cut")
        write_atomic(path, data)

    monkeypatch.setattr(store_module, "write_atomic", power_cut_before_the_records)
    with pytest.raises(OSError, match="power cut"):
        store.seal()
    monkeypatch.undo()
    assert (store.dir / (FAILURE_FILE + ".gz")).exists() and not store.sealed  # the records are still plain

    inspected = next(iter(DatasetStore(tmp_path, repair=False)))  # an inspection writes nothing
    assert not inspected.sealed and inspected.num_records == 1
    reopened = next(iter(DatasetStore(tmp_path)))
    assert reopened.sealed and reopened.num_records == 1 and [f.key for f in reopened.failures] == ["failed-config"]
    assert len(gzip.decompress((reopened.dir / (RECORD_FILE + ".gz")).read_bytes()).splitlines()) == 1
    assert not (reopened.dir / RECORD_FILE).exists()
