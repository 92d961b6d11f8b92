"""Dataset cards: provenance plus counts that can always be recomputed from the records."""

from __future__ import annotations

import collections
import json
from pathlib import Path

from metatune import MetatuneError
from metatune.dataset.store import DatasetStore, StoreError
from metatune.fileio import CARD_FILE, write_atomic


def compute_counts(store: DatasetStore) -> dict:
    """Counts per family and split, failures by kind, totals, and the records timed while other
    processes kept cores busy, read from the records."""
    counts: dict[str, dict[str, collections.Counter]] = collections.defaultdict(
        lambda: collections.defaultdict(collections.Counter)
    )
    kinds: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    per_workload: dict[str, dict] = {}
    for ws in store:
        per_workload[ws.workload.key] = {
            "split": ws.split, "records": ws.num_records, "failures": len(ws.failures), "complete": ws.sealed,
            **({"disturbed": len(ws.disturbed)} if ws.disturbed else {}),  # cards from before the check match
        }
        c = counts[ws.workload.family][ws.split]
        c["workloads"] += 1
        c["complete"] += int(ws.sealed)
        c["records"] += ws.num_records
        c["failures"] += len(ws.failures)
        for f in ws.failures:
            kinds[ws.workload.family][f.kind] += 1
    plain = {fam: {split: dict(c) for split, c in splits.items()} for fam, splits in counts.items()}
    for splits in plain.values():
        for c in splits.values():
            for key in ("workloads", "complete", "records", "failures"):
                c.setdefault(key, 0)
    totals = collections.Counter()
    for splits in plain.values():
        for c in splits.values():
            totals.update(c)
    return {
        "counts": plain,
        "failures_by_kind": {fam: dict(k) for fam, k in kinds.items()},
        "totals": {k: totals.get(k, 0) for k in ("workloads", "complete", "records", "failures")},
        "workloads": per_workload,
        "disturbed_records": sum(w.get("disturbed", 0) for w in per_workload.values()),
    }


def read_card(directory: Path) -> dict | None:
    path = Path(directory) / CARD_FILE
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise StoreError(f"{path} is not a readable dataset card ({err}); restore it (from git or a copy): it names "
                         "the device its records were measured on") from None


def dataset_card(directory: Path) -> dict:
    """The card of an existing dataset, or a one-line error: every command but `dataset build` needs one."""
    card = read_card(directory)
    if card is None:
        raise MetatuneError(f"{directory} is not a dataset (no card.json); build one with `metatune dataset build`")
    return card


def require_card_with_records(directory: Path) -> dict | None:
    """The dataset's card; None for a new dataset. Records without a card are refused: the card names
    their device, and adding to them without it could mix two devices' measurements."""
    card = read_card(directory)
    if card is None and (Path(directory) / "workloads").exists():
        raise StoreError(f"{directory} holds workloads but no {CARD_FILE}, which names the device they were "
                         "measured on: restore it (from git or a copy), or use a new --out")
    return card


def current_card(directory: Path) -> dict | None:
    """The card with its counts recomputed from the records: the card is rewritten only between
    workloads, so after a crash (kill -9) it lags behind what the records hold. Writes nothing."""
    card = read_card(directory)
    if card is None:
        return None
    return {**card, **compute_counts(DatasetStore(directory, repair=False))}


def write_card(directory: Path, card: dict) -> None:
    Path(directory).mkdir(parents=True, exist_ok=True)
    write_atomic(Path(directory) / CARD_FILE, (json.dumps(card, indent=2, sort_keys=True) + "\n").encode())
