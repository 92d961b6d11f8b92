"""`metatune train` and `metatune evaluate` end to end on a few real workloads of the shipped dataset."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from typer.testing import CliRunner

from metatune import MetatuneError
from metatune.cli import app
from metatune.dataset.store import DatasetStore
from metatune.fileio import REPO_ROOT
from metatune.learn.config import TrainConfig, load_config
from metatune.learn.train import run_evaluate, run_train

SHIPPED = REPO_ROOT / "datasets" / "x86_64-sapphirerapids-2c"
CONFIG = SHIPPED.parents[1] / "train" / "configs" / "x86_64-sapphirerapids-2c.yaml"


def cli(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> tuple[Path, Path]:
    """Four training and one held-out workload (symlinked), trained with a few steps."""
    root = tmp_path_factory.mktemp("train")
    data = root / "dataset"
    shipped = [s for s in DatasetStore(SHIPPED) if s.sealed]
    chosen = [s for s in shipped if s.split == "train"][:4] + [next(s for s in shipped if s.split == "heldout")]
    for store in chosen:
        link = data / "workloads" / store.workload.family / store.dir.name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(store.dir)
    shutil.copy(SHIPPED / "card.json", data / "card.json")
    config = root / "tiny.yaml"
    config.write_text(CONFIG.read_text().split("\nmodel:")[0] + """
ablation: true
model: {hidden: 16, gcn_layers: 1, fc_hidden: 16}
pretrain: {epochs: 2, steps_per_epoch: 3, workloads_per_batch: 2, graphs_per_workload: 8, rank_loss: true}
maml: {k_support: 8, q_query: 8, tasks_per_batch: 2, iterations: 4, eval_every: 2}
evaluation: {ks: [0, 8], repeats: 1, methods: [metatune, scratch, xgb, xgb-transfer]}
""")
    out = root / "run"
    # two workers: the models and XGBoost are trained and evaluated in spawned processes
    result = cli("train", "--data", data, "--config", config, "--out", out, "--workers", 2)
    assert result.exit_code == 0, result.output
    assert "in 2 worker processes" in result.output
    return data, out


TINY_METHODS = {"metatune", "scratch", "metatune-plain", "xgb", "xgb-transfer"}


def test_train_writes_weights_card_and_table(tiny_run):
    _, out = tiny_run
    card = json.loads((out / "card.json").read_text())
    assert card["dataset"]["train_workloads"] + card["dataset"]["valid_workloads"] == 4
    assert set(card["metrics"]) == TINY_METHODS
    assert list(card["metrics"]) == ["metatune", "scratch", "metatune-plain", "xgb", "xgb-transfer"]
    assert 0.0 <= card["metrics"]["metatune"]["8"]["pairwise_acc"] <= 1.0
    assert "| metatune | 8 |" in (out / "eval.md").read_text()
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert {"model.safetensors", "pretrained.safetensors", "plain.safetensors"} <= {p.name for p in out.iterdir()}
    # where the run's time went: every phase and job it ran, and each evaluated method
    assert set(card["wall_s"]) == {"encode", "train and evaluate", "main: train", "main: evaluation", "scratch: evaluation",
                                   "ablation: train", "ablation: evaluation", "xgb: evaluation",
                                   "xgb-transfer: evaluation", "replay: loop graphs and xgb features",
                                   "evaluation_by_method"}
    assert TINY_METHODS <= set(card["wall_s"]["evaluation_by_method"])
    assert card["wall_s"]["main: train"] == card["train_wall_s"] > 0


def test_one_process_trains_what_the_workers_train(tiny_run, tmp_path):
    """The jobs are independent: run one after another in this process, they give the same table."""
    data, out = tiny_run
    alone = run_train(data, out.parent / "tiny.yaml", tmp_path / "alone", echo=lambda _: None, workers=1)
    parallel = json.loads((out / "card.json").read_text())
    assert alone["metrics"] == parallel["metrics"]
    assert alone["metrics_per_workload"] == parallel["metrics_per_workload"]
    # every row again in one process from the saved weights, the scratch GCN built from the trained
    # model's config rather than in its own job: the same table
    assert run_evaluate(data, tmp_path / "alone", None, echo=lambda _: None).per_workload == alone["metrics_per_workload"]
    for name in ("model.safetensors", "plain.safetensors"):  # same tensors and metadata (its order is not kept)
        with safe_open(str(tmp_path / "alone" / name), "pt") as a, safe_open(str(out / name), "pt") as b:
            assert a.metadata() == b.metadata() and sorted(a.keys()) == sorted(b.keys())
            assert all(torch.equal(a.get_tensor(k), b.get_tensor(k)) for k in a.keys())


def test_evaluate_side_study_prints_its_table_and_keeps_the_card(tiny_run):
    data, out = tiny_run
    before = (out / "card.json").read_text(), (out / "eval.md").read_text()
    result = cli("evaluate", "--data", data, "--run", out, "--ks", "16,150", "--methods", "scratch,finetune")
    assert result.exit_code == 0, result.output
    assert "| scratch | 150 |" in result.output and "| finetune | 16 |" in result.output
    assert "| metatune |" not in result.output
    assert ((out / "card.json").read_text(), (out / "eval.md").read_text()) == before


@pytest.mark.parametrize("command, args, fragment", [
    ("evaluate", ("--methods", "metatune,magic"), "unknown evaluation method(s) magic"),
    ("evaluate", ("--ks", "8,-1"), "ks must be >= 0"),
    ("evaluate", ("--ks", "eight"), "--ks: expected numbers"),
    ("learning-curve", ("--fractions", "0,1"), "--fractions must lie in (0, 1]"),
    ("learning-curve", ("--fractions", "half"), "--fractions: expected numbers"),
    ("learning-curve", ("--records", "1"), "--records must be at least 2"),
    ("learning-curve", ("--seeds", "0,-1"), "--seeds must lie in 0..2147483647"),
    ("learning-curve", ("--seeds", str(2**31)), "--seeds must lie in 0..2147483647"),
    ("learning-curve", ("--out", "/nonexistent-folder/curve.json"), "--out /nonexistent-folder/curve.json: no such"),
])
def test_bad_options_are_one_line_errors(tiny_run, command, args, fragment):
    data, out = tiny_run
    target = ("--run", out) if command == "evaluate" else ("--config", out.parent / "tiny.yaml")
    result = cli(command, "--data", data, *target, *args)
    assert isinstance(result.exception, MetatuneError), result.output
    assert fragment in str(result.exception)


def test_learning_curve_writes_every_point(tiny_run, tmp_path):
    data, _ = tiny_run
    config = tiny_run[1].parent / "tiny.yaml"
    out = tmp_path / "curve.json"
    result = cli("learning-curve", "--data", data, "--config", config, "--fractions", "0.5,1", "--records", "20",
                 "--out", out)
    assert result.exit_code == 0, result.output
    points = json.loads(out.read_text())
    # 3 training workloads after validation: half of them (2), all 3, all 3 cut to 20 records each.
    assert [(p["workloads"], p["records"]) for p in points] == [(2, 200), (3, 200), (3, 20)]
    assert all(0.0 <= p["heldout_pairwise"] <= 1.0 for p in points)
    assert "| training workloads | records each |" in result.output


def test_learning_curve_from_a_checkpoint_fine_tunes_it_beside_its_goal(tiny_run, tmp_path):
    """--from: each subset fine-tunes the checkpoint instead of a fresh model; the checkpoint itself and
    --native are ranked first, as they are."""
    data, run = tiny_run
    out = tmp_path / "adapt-curve.json"
    result = cli("learning-curve", "--data", data, "--config", run.parent / "tiny.yaml", "--from", run,
                 "--native", run, "--fractions", "0.5,1", "--records", "20", "--cross", "--out", out)
    assert result.exit_code == 0, result.output
    points = json.loads(out.read_text())
    assert [(p["model"], p["workloads"], p["records"]) for p in points] == [
        ("source", 0, 0), ("native", 0, 0), ("fine-tuned", 2, 20), ("fine-tuned", 3, 20)]
    source, native = points[:2]
    assert source["heldout_pairwise"] == native["heldout_pairwise"]  # the same weights, ranked the same way
    assert all(0.0 <= p["heldout_pairwise"] <= 1.0 and 0.0 <= p["train_pairwise"] <= 1.0 for p in points)
    assert "| source | — | — |" in result.output and "| fine-tuned | 2 | 20 |" in result.output


def test_learning_curve_native_without_a_source_is_refused(tiny_run):
    data, run = tiny_run
    result = cli("learning-curve", "--data", data, "--config", run.parent / "tiny.yaml", "--native", run)
    assert isinstance(result.exception, MetatuneError)
    assert "give --from too" in str(result.exception)


@pytest.mark.parametrize("path", sorted(CONFIG.parent.rglob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_configs_load(path):
    """The shipped configs and ablations (model options included) pass validation and name the device
    of the dataset they train on."""
    from metatune.dataset.card import read_card
    from metatune.fileio import REPO_ROOT

    config = load_config(path)
    assert config.device_id == read_card(REPO_ROOT / config.dataset)["device"]["device_id"]


@pytest.mark.parametrize("old, new, fragment", [
    ("patience: 4}", "patience: 4, epoch: 3}", "pretrain.epoch: Extra inputs are not permitted"),
    ("eval_every: 20}", "eval_every: 20, inner_lrr: 1}", "maml.inner_lrr: Extra inputs are not permitted"),
    ("repeats: 3", "repeats: 3, foo: 1", "evaluation.foo: Extra inputs are not permitted"),
    ("methods: [metatune,", "methods: [magic, metatune,", "unknown evaluation method(s) magic"),
    ("ks: [0, 8", "ks: [-1, 8", "ks must be >= 0"),
    ("iterations: 400", "iterations: many", "maml.iterations: Input should be a valid integer"),
    ("seed: 0", "seed: -1", "seed: Input should be greater than or equal to 0"),  # numpy refuses it
    ("repeats: 3", "repeats: 3, seed: 4294967296", "evaluation.seed: Input should be less than or equal to 2147483647"),
])
def test_config_errors_are_one_line_and_name_the_key(tmp_path, old, new, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(CONFIG.read_text().replace(old, new))
    with pytest.raises(MetatuneError) as err:
        load_config(path)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_an_empty_config_is_named_as_the_config(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    with pytest.raises(MetatuneError, match=r"empty.yaml: the config: Input should be a valid dictionary"):
        load_config(path)


def test_config_sections_keep_what_the_file_wrote(tmp_path):
    """Run cards record the sections as written; the evaluation seed follows the config's seed."""
    path = tmp_path / "seeded.yaml"
    text = CONFIG.read_text().replace("seed: 0", "seed: 7")
    text = text[:text.index("evaluation:")] + "evaluation: {repeats: 2}\nablation: true\n"
    path.write_text(text)
    config = load_config(path)
    assert config.evaluation.seed == 7 and config.evaluation.repeats == 2
    dumped = config.model_dump(mode="json")
    assert dumped["evaluation"] == {"repeats": 2}
    assert dumped["pretrain"]["epochs"] == 15 and "weight_decay" not in dumped["pretrain"]
    assert TrainConfig.model_validate(dumped) == config


def test_evaluate_refuses_to_write_another_datasets_table_into_the_card(tiny_run):
    _, out = tiny_run
    before = (out / "card.json").read_text()
    result = cli("evaluate", "--data", REPO_ROOT / "datasets" / "x86_64-znver4-2c", "--run", out)
    assert isinstance(result.exception, MetatuneError) and "was trained on dataset" in str(result.exception)
    assert (out / "card.json").read_text() == before
