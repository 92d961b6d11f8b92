"""The dataset shipped for this machine's device class is consistent and readable by TVM."""

import json

import pytest

from metatune.dataset.card import compute_counts, read_card
from metatune.dataset.store import DatasetStore
from metatune.fileio import REPO_ROOT

SHIPPED = REPO_ROOT / "datasets" / "x86_64-sapphirerapids-2c"


@pytest.fixture(scope="module")
def card():
    card = read_card(SHIPPED)
    assert card is not None, f"no dataset card in {SHIPPED}"
    return card


def test_card_counts_match_the_records(card):
    """Every complete (sealed, shipped) workload's counts are recomputed from its records."""
    recomputed = compute_counts(DatasetStore(SHIPPED))["workloads"]
    complete = {k: v for k, v in card["workloads"].items() if v["complete"]}
    assert complete, "the shipped dataset has no complete workload"
    for key, entry in complete.items():
        assert recomputed[key] == entry, key
    assert sum(v["records"] for v in complete.values()) == sum(
        v["records"] for v in recomputed.values() if v["complete"]
    )


def exported(card, out):
    """The shipped dataset exported as one TVM database pair, and its record lines (one per record)."""
    wl_path, rec_path = DatasetStore(SHIPPED).export_tvm_database(out)
    lines = rec_path.read_text().splitlines()
    complete_records = sum(v["records"] for v in card["workloads"].values() if v["complete"])
    assert len(lines) >= complete_records > 0
    return wl_path, rec_path, lines


def load_and_replay(wl_path, rec_path, expected: int) -> None:
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    records = JSONDatabase(str(wl_path), str(rec_path)).get_all_tuning_records()  # TVM replays each trace
    assert len(records) == expected

    def replayed(record) -> str:
        sch = Schedule(record.workload.mod)
        record.trace.apply_to_schedule(sch, remove_postproc=False)
        return sch.mod.script()

    assert any("T.parallel" in replayed(record) for record in records[::max(1, len(records) // 20)])


def test_shipped_records_of_every_workload_load_in_tvm_and_replay(card, tmp_path):
    """Every workload, and every 50th record, of the export (TVM loads 220 records a second: the
    whole dataset is the slow test below)."""
    wl_path, rec_path, lines = exported(card, tmp_path)
    by_workload: dict[int, list[str]] = {}
    for line in lines:
        by_workload.setdefault(json.loads(line)[0], []).append(line)
    sample = list(dict.fromkeys([records[0] for records in by_workload.values()] + lines[1::50]))
    assert len(by_workload) == len(wl_path.read_text().splitlines())
    rec_path.write_text("\n".join(sample) + "\n")
    load_and_replay(wl_path, rec_path, len(sample))


@pytest.mark.slow
def test_every_shipped_record_loads_in_tvm_and_replays(card, tmp_path):
    wl_path, rec_path, lines = exported(card, tmp_path)
    load_and_replay(wl_path, rec_path, len(lines))


def test_card_provenance(card):
    assert card["device"]["device_id"] == "x86_64-sapphirerapids-2c"
    assert len(card["spec_hash"]) == 64 and card["versions"]["tvm"].startswith("0.27")


def test_the_spec_still_hashes_to_the_card(card):
    """Validation details (strict types, list ranges) must not change a spec's digest: a build resumes only
    under the digest on its card."""
    from metatune.dataset.spec import load_spec

    assert load_spec(REPO_ROOT / "datasets" / "specs" / f"{card['spec_name']}.yaml").digest() == card["spec_hash"]
