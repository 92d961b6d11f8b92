"""`metatune zoo adapt` end to end: real measurements on this machine compiled for another CPU
class, the shipped checkpoint continued on them, published into a copy of the zoo and resolved."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from metatune import MetatuneError
from metatune.cli import app
from metatune.dataset.store import DatasetStore
from metatune.env.device import fingerprint_for_target, usable_cores
from metatune.fileio import CARD_FILE, REPO_ROOT, WEIGHTS_FILE
from metatune.learn.adapt import CANDIDATES
from metatune.learn.checkpoint import TrainedModel
from metatune.learn.transfer_study import FINETUNE_GRID

SPEC = Path(__file__).parent / "data" / "adapt-tiny.yaml"
SOURCE = "x86_64-sapphirerapids-2c/v5"
TARGET = f"llvm -mcpu=haswell -num-cores={usable_cores()}"  # AVX2: runs on every machine that runs the tests


def cli(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def printed_json(text: str) -> dict:
    """The indented JSON object that ends the output (progress lines may come before it)."""
    lines = text.splitlines()
    start = max(i for i, line in enumerate(lines) if line == "{")
    return json.loads("\n".join(lines[start:]))


@pytest.fixture(scope="module")
def adapted(tmp_path_factory) -> tuple[Path, Path, dict]:
    root = tmp_path_factory.mktemp("adapt")
    zoo = root / "zoo"
    shutil.copytree(REPO_ROOT / "zoo", zoo)
    out = root / "run"
    result = cli("zoo", "adapt", "--from", SOURCE, "--target", TARGET, "--spec", SPEC, "--samples", 32,
                 "--out", out, "--data", out / "data", "--zoo", zoo, "--json")
    assert result.exit_code == 0, result.output
    return zoo, out, printed_json(result.stdout)


def test_adapt_measures_adapts_and_publishes_the_device(adapted):
    zoo, out, summary = adapted
    device = fingerprint_for_target(TARGET).device_id
    card = json.loads((out / CARD_FILE).read_text())
    assert card["device"]["device_id"] == device != "x86_64-sapphirerapids-2c"
    assert card["adapted_from"]["id"] == SOURCE and len(card["adapted_from"]["sha256"]) == 64
    assert card["dataset"]["records"] == 3 * 32 and card["dataset"]["samples_per_workload"] == 32
    adaptation = card["adaptation"]
    assert adaptation["chosen"] in CANDIDATES and set(adaptation["validation_scores"]) == set(CANDIDATES)
    assert adaptation["workloads"]["validation"] == ["dense:m=32,n=256,k=128"]
    assert adaptation["validation_scores"][adaptation["chosen"]] == max(adaptation["validation_scores"].values())
    assert 0.0 <= card["metrics"]["metatune"]["8"]["pairwise_acc"] <= 1.0
    assert summary["published"] == f"{device}/v1"
    published = TrainedModel.load(zoo / device / "v1" / WEIGHTS_FILE)
    assert published.builder.template.version == card["template_version"]


def test_the_adapted_checkpoint_is_what_its_device_resolves_to(adapted):
    zoo, _, _ = adapted
    device = fingerprint_for_target(TARGET).device_id
    resolved = cli("zoo", "resolve", "--device-id", device, "--zoo", zoo, "--json")
    assert resolved.exit_code == 0, resolved.output
    resolution = json.loads(resolved.stdout)
    assert resolution["exact"] and resolution["checkpoint"] == f"{device}/v1"
    assert cli("zoo", "verify", "--zoo", zoo).exit_code == 0


def test_adapting_again_from_complete_data_needs_neither_measuring_nor_the_device(adapted, monkeypatch):
    """As after measuring on a GPU machine: the data's card names the device, no --target is given,
    and nothing may be measured or run (both refused here)."""
    from metatune.env import device as device_module
    from metatune.learn import adapt

    zoo, out, _ = adapted
    shards = sorted(p.name for p in (out / "data" / "workloads").rglob("*") if p.is_file())

    def refuse(*args, **kwargs):
        raise AssertionError("complete data must not be measured again")

    monkeypatch.setattr(adapt, "build_dataset", refuse)
    monkeypatch.setattr(device_module, "require_runnable", refuse)
    again = cli("zoo", "adapt", "--from", SOURCE, "--spec", SPEC, "--samples", 32,
                "--out", out, "--data", out / "data", "--zoo", zoo, "--no-publish", "--json")
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in (out / "data" / "workloads").rglob("*") if p.is_file()) == shards
    card = json.loads((out / CARD_FILE).read_text())
    assert card["dataset"]["records"] == 3 * 32 and card["adaptation"]["wall_s"]["measure"] < 60
    assert card["device"]["device_id"] == fingerprint_for_target(TARGET).device_id
    assert printed_json(again.stdout)["published"] is None
    other = cli("zoo", "adapt", "--from", SOURCE, "--target", "llvm -mcpu=x86-64", "--spec", SPEC, "--samples", 32,
                "--out", out, "--data", out / "data", "--zoo", zoo, "--no-publish")
    assert other.exit_code != 0 and "was measured on" in str(other.exception) + other.output


@pytest.fixture(scope="module")
def source_data(tmp_path_factory) -> Path:
    """Two sealed training workloads of the source device's shipped dataset (xgb-transfer's data)."""
    root = tmp_path_factory.mktemp("source-data")
    shipped = REPO_ROOT / "datasets" / "x86_64-sapphirerapids-2c"
    (root / CARD_FILE).symlink_to(shipped / CARD_FILE)
    for store in [s for s in DatasetStore(shipped) if s.split == "train" and s.sealed][:2]:
        link = root / "workloads" / store.workload.family / store.dir.name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(store.dir)
    return root


def test_transfer_study_sets_the_source_beside_the_adapted_checkpoint(adapted, source_data, tmp_path):
    zoo, out, _ = adapted
    device = fingerprint_for_target(TARGET).device_id
    result = cli("evaluate", "--transfer", SOURCE, "--data", out / "data", "--zoo", zoo, "--ks", "0,8",
                 "--repeats", 1, "--source-data", source_data, "--out", tmp_path)
    assert result.exit_code == 0, result.output
    assert f"no native checkpoint of {device}" in result.output  # the zoo copy holds only the adapted one
    assert f"{device}/v1 was adapted on" in result.output  # the adaptation's own data: said to be optimistic
    study = json.loads((tmp_path / "transfer.json").read_text())
    assert study["source"]["id"] == SOURCE and study["target"]["device_id"] == device
    assert study["adapted"]["id"] == f"{device}/v1" and study["adapted"]["adapted_from"] == SOURCE
    metrics = study["metrics"]
    assert set(metrics) == {"source", "source-finetune", "adapted", "scratch", "xgb", "xgb-transfer"}
    assert set(metrics["xgb"]) == {"8"}  # XGBoost cannot rank before it has seen a sample
    assert all(set(metrics[m]) == {"0", "8"} for m in ("source", "source-finetune", "adapted", "scratch"))
    assert all(0 <= by_k[k]["pairwise_acc"] <= 1 and by_k[k]["workloads"] == 1
               for by_k in metrics.values() for k in by_k)
    # the source unchanged and the adapted checkpoint predict alike exactly when the adaptation kept the source
    chosen = json.loads((out / CARD_FILE).read_text())["adaptation"]["chosen"]
    assert (metrics["adapted"]["0"] == metrics["source"]["0"]) == (chosen == "source")
    assert metrics["source-finetune"]["0"] == metrics["source"]["0"]  # k = 0: nothing to fine-tune on
    assert len(study["finetune_choice"]["grid_scores"]) == len(FINETUNE_GRID)  # chosen on B's training workloads
    assert "| source-finetune | 8 |" in (tmp_path / "transfer.md").read_text()


@pytest.mark.parametrize("args, fragment", [
    ((), "give either --run"),
    (("--transfer", SOURCE, "--methods", "source,magic"), "unknown methods magic"),
    (("--transfer", "nosuchdevice/v9"), "neither a file or directory nor a zoo checkpoint"),
    (("--transfer", SOURCE, "--native", SOURCE), "is of x86_64-sapphirerapids-2c, not of"),
    (("--transfer", SOURCE, "--config", "x.yaml"), "--config applies to --run only"),
    (("--run", "run-dir", "--repeats", "2"), "apply to --transfer only"),
])
def test_bad_transfer_options_are_one_line_errors(args, fragment):
    result = cli("evaluate", "--data", REPO_ROOT / "datasets" / "x86_64-znver3-2c-adapt-cpu", *args)
    assert isinstance(result.exception, MetatuneError), result.output
    assert fragment in str(result.exception)


def test_a_transfer_study_needs_another_device_than_the_source():
    result = cli("evaluate", "--transfer", SOURCE, "--data", REPO_ROOT / "datasets" / "x86_64-sapphirerapids-2c")
    assert isinstance(result.exception, MetatuneError), result.output
    assert "a transfer study needs another device's dataset" in str(result.exception)


def test_the_candidate_chosen_is_the_best_scored_and_never_one_without_a_score():
    from metatune.learn.adapt import choose_candidate

    nan = float("nan")
    assert choose_candidate({"source": 0.6, "finetune": 0.7, "finetune+maml": 0.7}) == "finetune"  # tie: the earlier
    for scores in ({"source": nan, "finetune": 0.6, "finetune+maml": 0.55},
                   {"source": 0.5, "finetune": nan, "finetune+maml": 0.6}):
        assert choose_candidate(scores) == max((v, k) for k, v in scores.items() if v == v)[1]


def test_the_validation_draws_follow_the_adapt_seed_unless_given():
    from metatune.learn.adapt import AdaptConfig
    from metatune.learn.config import EvalConfig

    assert AdaptConfig(seed=3).evaluation.seed == 3
    given = EvalConfig(ks=(0, 8), repeats=1, seed=1, methods=CANDIDATES)
    assert AdaptConfig(seed=3, evaluation=given).evaluation.seed == 1
