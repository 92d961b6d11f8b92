"""`metatune zoo adapt` end to end: real measurements on this machine compiled for another CPU
class, the shipped checkpoint continued on them, published into a copy of the zoo and resolved."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from metatune.cli import app
from metatune.env.device import fingerprint_for_target, usable_cores
from metatune.fileio import CARD_FILE, REPO_ROOT, WEIGHTS_FILE
from metatune.learn.adapt import CANDIDATES
from metatune.learn.checkpoint import TrainedModel

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


def test_adapting_again_resumes_without_measuring_anything_new(adapted):
    zoo, out, _ = adapted
    shards = sorted(p.name for p in (out / "data" / "workloads").rglob("*") if p.is_file())
    again = cli("zoo", "adapt", "--from", SOURCE, "--target", TARGET, "--spec", SPEC, "--samples", 32,
                "--out", out, "--data", out / "data", "--zoo", zoo, "--no-publish", "--json")
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in (out / "data" / "workloads").rglob("*") if p.is_file()) == shards
    card = json.loads((out / CARD_FILE).read_text())
    assert card["dataset"]["records"] == 3 * 32 and card["adaptation"]["wall_s"]["measure"] < 60
    assert printed_json(again.stdout)["published"] is None
