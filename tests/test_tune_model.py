"""`metatune tune --model`: import through Relax, task extraction, fallback routing, tuning end to end."""

import collections
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ZOO = Path(__file__).parents[1] / "zoo"
needs_zoo = pytest.mark.skipif(not (ZOO / "index.json").exists(), reason="no shipped zoo checkpoint")


def tune(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "metatune.cli", "tune", *args], capture_output=True, text=True,
                          timeout=900)


def weight_shape(task) -> tuple[int, ...]:
    """The convolution weight among a conv task's parameters: the 4-D one whose first axis is not the batch."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    shapes = [tuple(int(x) for x in info.shape) for info in ArgInfo.from_prim_func(task.dispatched[0]["main"])]
    (shape,) = [s for s in shapes if len(s) == 4 and s[0] != 1]
    return shape


def test_resnet18_tasks_are_its_convolutions_with_batchnorm_folded(target):
    from torch import nn

    from metatune.models import get_model
    from metatune.tune.relax_model import extract_tasks, import_model

    model = import_model(get_model("resnet18"))
    assert (model.folded_batchnorms, model.left_batchnorms) == (20, 0)
    tasks = extract_tasks(model.mod, target)
    convs = [t for t in tasks if "conv2d" in t.task_name]
    expected = collections.Counter(tuple(m.weight.shape) for m in model.module.modules() if isinstance(m, nn.Conv2d))
    found: collections.Counter = collections.Counter()
    for t in convs:
        found[weight_shape(t)] += t.weight
    assert sum(expected.values()) == 20 and found == expected
    others = sorted(t.task_name for t in tasks if t not in convs)
    assert all(re.fullmatch(r"(fused_matmul_add|mean|reshape|max_pool2d)\d*", n) for n in others), others


def test_unknown_model_and_unsupported_strategy_are_one_line_errors():
    res = tune("--model", "nosuch")
    assert res.returncode == 2 and "unknown model 'nosuch'; known: resnet18, tinycnn" in res.stderr
    res = tune("--model", "tinycnn", "--strategy", "xgb-transfer")
    assert res.returncode == 2 and "not available for --model" in res.stderr
    assert "Traceback" not in res.stderr


@needs_zoo
def test_tasks_metatune_cannot_encode_go_to_xgb(target):
    """Routing on real candidates: an encodable conv2d is scored by metatune's model, a pooling
    reduction by XGBModel; a task wrongly routed to metatune moves to XGBModel, with the reason."""
    from tvm.s_tir import meta_schedule as ms

    from metatune.device import local_fingerprint
    from metatune.encode.supergraph import GraphEncoder
    from metatune.models import get_model
    from metatune.space import DesignSpaces
    from metatune.tune.cost_model import MetaTuneCostModel
    from metatune.tune.fallback import RoutedCostModel, uncovered_reason
    from metatune.tune.relax_model import extract_tasks, import_model
    from metatune.tune.tuner import resolve_checkpoint
    from metatune.tvm_setup import import_tensor_intrinsics

    import_tensor_intrinsics()  # before the first TuneContext, which would import them the slow way
    tasks = {t.task_name: t for t in extract_tasks(import_model(get_model("tinycnn")).mod, target)}
    conv = next(n for n in tasks if re.fullmatch(r"conv2d\d*", n))
    contexts = {n: ms.TuneContext(mod=tasks[n].dispatched[0], target=target, space_generator="post-order-apply",
                                  task_name=n) for n in (conv, "mean")}
    encoder = GraphEncoder()
    assert uncovered_reason(contexts[conv], encoder) is None
    assert "super-graph template" in uncovered_reason(contexts["mean"], encoder)

    rng = np.random.default_rng(0)
    cands = {n: [DesignSpaces.from_context(c).random_candidate(rng).measure_candidate()] for n, c in contexts.items()}
    metatune = MetaTuneCostModel(resolve_checkpoint("auto", local_fingerprint())[0])
    xgb = ms.cost_model.CostModel.create("xgb", num_tuning_cores=1)
    router = RoutedCostModel(metatune, xgb, {conv})
    assert router.predict(contexts[conv], cands[conv]) == pytest.approx(metatune.predict(contexts[conv], cands[conv]))
    assert router.predict(contexts["mean"], cands["mean"]).shape == (1,)
    assert not router.demoted

    wrong = RoutedCostModel(metatune, xgb, {conv, "mean"})
    assert wrong.predict(contexts["mean"], cands["mean"]).shape == (1,)
    assert "mean" in wrong.demoted and "slot" in wrong.demoted["mean"]
    assert wrong.primary_tasks == {conv}


def test_tinycnn_tunes_compiles_verifies_and_resumes(tmp_path):
    db, out = tmp_path / "db", tmp_path / "r.json"
    args = ("--model", "tinycnn", "--strategy", "random", "--trials", "8", "--db", str(db), "--json", str(out))
    res = tune(*args)
    assert res.returncode == 0, res.stderr
    result = json.loads(out.read_text())
    assert result["model"] == "tinycnn" and result["strategy"] == "random" and result["trials"] == 8
    assert result["verified"] and result["max_rel_error"] < 1e-4
    assert result["model_latency_ms"] > 0 and result["torch_latency_ms"] > 0
    tasks = {t["name"]: t for t in result["tasks"]}
    assert len(tasks) == 4 and all(t["trials"] >= 1 and t["best_latency_us"] for t in tasks.values())
    assert result["untuned"] == [] and {t["tuner"] for t in tasks.values()} == {"random"}
    assert tasks["mean"]["uncovered"] and any(t["uncovered"] is None for t in tasks.values())
    assert "TVM" in res.stdout and "PyTorch" in res.stdout

    again = tune(*args)  # the database already holds 8 trials: nothing is measured again
    assert again.returncode == 0, again.stderr
    resumed = json.loads(out.read_text())
    assert resumed["trials"] == 8 and resumed["tune_s"] == 0.0 and resumed["verified"]


@pytest.mark.slow
@needs_zoo
def test_tinycnn_with_metatune_falls_back_per_task(tmp_path):
    """The metatune strategy end to end (slow: TVM's evolutionary search for the fallback tasks;
    routing is covered by test_tasks_metatune_cannot_encode_go_to_xgb, the pipeline by the random run)."""
    out = tmp_path / "r.json"
    res = tune("--model", "tinycnn", "--trials", "16", "--db", str(tmp_path / "db"), "--json", str(out))
    assert res.returncode == 0, res.stderr
    result = json.loads(out.read_text())
    assert result["strategy"] == "metatune" and result["trials"] == 16 and result["verified"]
    assert result["checkpoint"].startswith("x86_64-")
    tuners = {t["name"]: t["tuner"] for t in result["tasks"]}
    assert "metatune" in tuners.values() and tuners["mean"] == "xgb-fallback"
    assert all((t["tuner"] == "metatune") == (t["uncovered"] is None) for t in result["tasks"])
    assert any("encodes" in n for n in result["notes"])
