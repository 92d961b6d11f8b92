"""The dataset shipped for this machine's device class is consistent and readable by TVM."""


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


def test_shipped_records_load_in_tvm_and_replay(card, tmp_path):
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    wl_path, rec_path = DatasetStore(SHIPPED).export_tvm_database(tmp_path)
    db = JSONDatabase(str(wl_path), str(rec_path))
    records = db.get_all_tuning_records()
    complete_records = sum(v["records"] for v in card["workloads"].values() if v["complete"])
    assert len(records) >= complete_records > 0
    record = records[len(records) // 2]
    sch = Schedule(record.workload.mod)
    record.trace.apply_to_schedule(sch, remove_postproc=False)
    assert "T.parallel" in sch.mod.script()


def test_card_provenance(card):
    assert card["device"]["device_id"] == "x86_64-sapphirerapids-2c"
    assert len(card["spec_hash"]) == 64 and card["versions"]["tvm"].startswith("0.27")


def test_the_spec_still_hashes_to_the_card(card):
    """Validation details (strict types, list ranges) must not change a spec's digest: a build resumes only
    under the digest on its card."""
    from metatune.dataset.spec import load_spec

    assert load_spec(REPO_ROOT / "datasets" / "specs" / f"{card['spec_name']}.yaml").digest() == card["spec_hash"]
