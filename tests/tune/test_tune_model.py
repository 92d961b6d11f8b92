"""`metatune tune --model`: import through Relax, task extraction, fallback routing, tuning end to end."""

import collections
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from metatune.fileio import RECORD_FILE
from metatune.measure.measurer import BROKEN_TIMING
from metatune.measure.reference_timing import MAX_PASSES, PASS_S, PASSES
from tests.processes import CPU_ONLY_INTRINSICS, run_metatune, run_metatune_fresh


def tune(*args: str) -> subprocess.CompletedProcess:
    return run_metatune(["tune", *args], timeout=900)


def weight_shape(task) -> tuple[int, ...]:
    """The convolution weight among a conv task's parameters: the 4-D one whose first axis is not the batch."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    shapes = [tuple(int(x) for x in info.shape) for info in ArgInfo.from_prim_func(task.dispatched[0]["main"])]
    (shape,) = [s for s in shapes if len(s) == 4 and s[0] != 1]
    return shape


# Relax task name (ops without FuseTIR's numbering) -> the metatune family it is an instance of.
FUSED_FAMILIES = {
    ("conv2d", "add"): "conv2d_bias",
    ("conv2d", "add", "relu"): "conv2d_bias_relu",
    ("conv2d", "add", "add", "relu"): "conv2d_bias_add_relu",
    ("matmul", "add"): "dense_bias",
}


def fused_family(task_name: str) -> str | None:
    ops = tuple(re.sub(r"\d+$", "", op) for op in task_name.split("_"))
    return FUSED_FAMILIES.get(ops[1:]) if ops[0] == "fused" else None


def structure(func) -> tuple[list, list]:
    """Loops (name, extent, parent) and blocks of a PrimFunc: the block name without the number
    FuseTIR (`T_add1`) or te (`T_add_1`) gives a repeated op, its iteration variables, enclosing
    loops, and each access (write first) as offset and stride per loop."""
    from metatune.encode.loopgraph import extract

    program = extract(func)
    loop_of = {lp.var: lp.index for lp in program.loops}

    def access(a) -> tuple:
        return a.offset, sorted((loop_of[h], stride) for h, stride in a.strides.items())

    blocks = [(re.sub(r"_?\d+$", "", b.name), b.iter_names, b.iter_reduce, b.chain,
               [access(a) for a in (b.write, *b.reads)]) for b in program.blocks]
    return [(lp.name, lp.extent, lp.parent) for lp in program.loops], blocks


@pytest.fixture(scope="module")
def resnet18(target):
    """ResNet-18 through Relax and its tasks, imported once for the tests below."""
    from metatune.workload.model_source import ModelSource
    from metatune.workload.relax_tasks import extract_tasks, import_model

    imported = import_model(ModelSource.parse("resnet18"))
    return imported.model, extract_tasks(imported.mod, target)


def test_resnet18_tasks_are_its_convolutions_with_batchnorm_folded(resnet18):
    from torch import nn

    model, tasks = resnet18
    assert (model.folded_batchnorms, model.left_batchnorms) == (20, 0)
    convs = [t for t in tasks if "conv2d" in t.task_name]
    expected = collections.Counter(tuple(m.weight.shape) for m in model.module.modules() if isinstance(m, nn.Conv2d))
    found: collections.Counter = collections.Counter()
    for t in convs:
        found[weight_shape(t)] += t.weight
    assert sum(expected.values()) == 20 and found == expected
    others = sorted(t.task_name for t in tasks if t not in convs)
    assert all(re.fullmatch(r"(fused_matmul_add|mean|reshape|max_pool2d)\d*", n) for n in others), others


def test_fused_families_are_the_programs_relax_extracts(resnet18):
    """Each conv and linear task of ResNet-18 is, loop for loop and access for access, the
    metatune workload of its family and shape (stride and padding from its PyTorch layer)."""
    from torch import nn
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from metatune.workload.operators import Workload

    model, tasks = resnet18
    conv_layout = {tuple(m.weight.shape): (m.stride[0], m.padding[0])
                   for m in model.module.modules() if isinstance(m, nn.Conv2d)}
    families = collections.Counter()
    for task in tasks:
        family = fused_family(task.task_name)
        if family is None:
            continue
        func = task.dispatched[0]["main"]
        shapes = [tuple(int(x) for x in info.shape) for info in ArgInfo.from_prim_func(func)]
        if family == "dense_bias":
            (m, k), (_, n) = shapes[:2]
            workload = Workload.create(family, m=m, n=n, k=k)
        else:
            (n, c, h, w), (k, _, r, s) = shapes[:2]
            stride, pad = conv_layout[shapes[1]]
            workload = Workload.create(family, n=n, c=c, h=h, w=w, k=k, r=r, s=s, stride=stride, pad=pad)
        assert [*workload.input_shapes(), shapes[-1]] == shapes, task.task_name
        assert structure(workload.prim_func()) == structure(func), task.task_name
        families[family] += 1
    assert families == {"conv2d_bias_relu": 8, "conv2d_bias_add_relu": 4, "conv2d_bias": 3, "dense_bias": 1}


def test_unknown_model_and_unsupported_strategy_are_one_line_errors():
    res = tune("--model", "nosuch")
    assert res.returncode == 2 and "unknown model 'nosuch'; give resnet18, tinycnn, PATH.onnx" in res.stderr
    res = tune("--model", "tinycnn", "--strategy", "xgb-transfer")
    assert res.returncode == 2 and "not available for --model" in res.stderr
    assert "Traceback" not in res.stderr


def softmax_module():
    """A task outside every family metatune's template was probed on (its rfactored max and
    sum reductions have no slots)."""
    from tvm import IRModule, te, topi

    x = te.placeholder((4, 64), name="x")
    return IRModule({"main": te.create_prim_func([x, topi.nn.softmax(x)])})


def test_tasks_metatune_cannot_encode_go_to_xgb(target, tmp_path):
    """Routing on real candidates: an encodable conv2d is scored by metatune's model, a softmax
    by XGBModel; a task wrongly routed to metatune moves to XGBModel, with the reason."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    from metatune.encode.supergraph import GraphEncoder
    from metatune.env.device import local_fingerprint
    from metatune.env.tvm_setup import import_tensor_intrinsics
    from metatune.measure.database import earlier_results
    from metatune.search.online_model import MetaTuneCostModel
    from metatune.space.knob_space import DesignSpaces
    from metatune.tune.fallback import RoutedCostModel, uncovered_reason
    from metatune.tune.tuner import resolve_checkpoint
    from metatune.workload.model_source import ModelSource
    from metatune.workload.relax_tasks import extract_tasks, import_model

    import_tensor_intrinsics()  # before the first TuneContext, which would import them the slow way
    tasks = {t.task_name: t for t in extract_tasks(import_model(ModelSource.parse("tinycnn")).mod, target)}
    conv = next(n for n in tasks if re.fullmatch(r"conv2d\d*", n))
    modules = {conv: tasks[conv].dispatched[0], "softmax": softmax_module()}
    contexts = {n: ms.TuneContext(mod=mod, target=target, space_generator="post-order-apply", task_name=n)
                for n, mod in modules.items()}
    encoder = GraphEncoder()
    assert uncovered_reason(contexts[conv], encoder) is None
    assert "super-graph template" in uncovered_reason(contexts["softmax"], encoder)

    rng = np.random.default_rng(0)
    cands = {n: [DesignSpaces.from_context(c).random_candidate(rng).measure_candidate()] for n, c in contexts.items()}
    metatune = MetaTuneCostModel(resolve_checkpoint("auto", local_fingerprint())[0])
    xgb = ms.cost_model.CostModel.create("xgb", num_tuning_cores=1)
    router = RoutedCostModel(metatune, xgb, {conv})
    assert router.predict(contexts[conv], cands[conv]) == pytest.approx(metatune.predict(contexts[conv], cands[conv]))
    assert router.predict(contexts["softmax"], cands["softmax"]).shape == (1,)
    assert not router.demoted

    wrong = RoutedCostModel(metatune, xgb, {conv, "softmax"})
    assert wrong.predict(contexts["softmax"], cands["softmax"]).shape == (1,)
    assert "softmax" in wrong.demoted and "slot" in wrong.demoted["softmax"]
    assert wrong.primary_tasks == {conv}

    # With the run's database, the demoted task's XGBModel first learns what was measured before
    database = ms.database.JSONDatabase(work_dir=str(tmp_path))
    workload = database.commit_workload(modules["softmax"])
    measured = [DesignSpaces.from_context(contexts["softmax"]).random_candidate(rng) for _ in range(3)]
    for cand, secs in zip(measured, ([2e-5], [1e10], [1e-5])):  # the second one failed
        database.commit_tuning_record(ms.database.TuningRecord(cand.trace, workload, secs, target,
                                                               cand.measure_candidate().args_info))
    fresh = ms.cost_model.CostModel.create("xgb", num_tuning_cores=1)
    handed = RoutedCostModel(metatune, fresh, {conv, "softmax"}, tmp_path)
    assert handed.predict(contexts["softmax"], cands["softmax"]).shape == (1,) and "softmax" in handed.demoted
    [group] = fresh.data.values()
    assert len(group.costs) == 3  # all three, the failure as the worst
    # BatchBO's resume then has the model learn the same records: not twice
    records = [r for r in database.get_all_tuning_records() if r.workload.same_as(workload)]
    handed.update(contexts["softmax"], [r.as_measure_candidate() for r in records], earlier_results(records))
    assert len(next(iter(fresh.data.values())).costs) == 3
    handed.update(contexts["softmax"], cands["softmax"], [RunnerResult([3e-5], None)])  # a new measurement is learnt
    assert len(next(iter(fresh.data.values())).costs) == 4


@pytest.fixture(scope="module")
def tinycnn_run(tmp_path_factory) -> tuple[Path, Path, tuple[str, ...], subprocess.CompletedProcess]:
    """tinycnn tuned for 8 random trials: (database, result JSON, CLI args, process)."""
    tmp = tmp_path_factory.mktemp("tinycnn")
    db, out = tmp / "db", tmp / "r.json"
    args = ("--model", "tinycnn", "--strategy", "random", "--trials", "8", "--db", str(db), "--json", str(out))
    return db, out, args, tune(*args)


def test_tinycnn_tunes_compiles_verifies_and_resumes(tinycnn_run):
    db, out, args, res = tinycnn_run
    assert res.returncode == 0, res.stderr
    result = json.loads(out.read_text())
    assert result["model"] == "tinycnn" and result["strategy"] == "random" and result["trials"] == 8
    assert result["verified"] and result["max_rel_error"] < 1e-4
    assert result["model_ms"] > 0 and result["reference_ms"] > 0
    comparison = result["comparison"]  # PyTorch eager timed in its own process, passes alternating with TVM's
    assert comparison["spec"] == {"kind": "model", "name": "tinycnn", "threads": result["threads"], "pass_s": PASS_S,
                                  "device": "cpu", "inputs": [], "library": "PyTorch eager"}
    assert result["reference"] == comparison["library"] == "PyTorch eager"
    assert result["inputs"] == [{"name": "input0", "shape": [1, 3, 16, 16], "dtype": "float32"}]
    assert PASSES <= len(comparison["tvm"]["passes_ms"]) == len(comparison["reference"]["passes_ms"]) <= MAX_PASSES
    assert result["model_ms"] == pytest.approx(comparison["tvm"]["median_ms"], abs=5e-4)
    assert result["reference_ms"] == pytest.approx(comparison["reference"]["median_ms"], abs=5e-4)
    assert (comparison["speedup"] is None) == comparison["unstable"]
    assert comparison["reference"]["max_rel_error"] < 1e-4
    tasks = {t["name"]: t for t in result["tasks"]}
    assert len(tasks) == 4 and all(t["trials"] >= 1 and t["best_latency_us"] for t in tasks.values())
    assert result["untuned"] == [] and {t["tuner"] for t in tasks.values()} == {"random"}
    assert result["fallback_tasks"] == [] and all(t["uncovered"] is None for t in tasks.values())
    assert "TVM" in res.stdout and "PyTorch" in res.stdout

    lines = (db / RECORD_FILE).read_text().splitlines()
    broken = json.loads(lines[0])
    broken[1][1] = [0.0]  # a trial timed at 0 s: TVM would deploy it first
    (db / RECORD_FILE).write_text("\n".join([json.dumps(broken), *lines[1:]]) + "\n")
    again = tune(*args, "--reference-passes", str(PASSES))  # the database holds 8 trials: nothing is measured again
    assert again.returncode == 0, again.stderr
    resumed = json.loads(out.read_text())
    assert resumed["trials"] == 8 and resumed["tune_s"] == 0.0 and resumed["verified"]
    assert len(resumed["comparison"]["ratios"]) == PASSES
    assert json.loads((db / RECORD_FILE).read_text().splitlines()[0])[1][1] == [1e10]  # set aside before compiling
    assert any(BROKEN_TIMING in note for note in resumed["notes"])


def _break_a_deployed_kernel(db: Path, task, target) -> tuple[int, object]:
    """Commit, as the fastest trial of `task`, its deployed schedule with one intermediate buffer stored as
    int32 (TVM's unsafe_set_dtype): a genuinely wrong kernel, as a code-generation bug would make one.
    Returns its trial index and program."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord

    from metatune.encode.loopgraph import extract
    from metatune.measure.database import best_so_far, record_of, trial_lines

    mod = task.dispatched[0]
    lines = trial_lines(db, mod)
    deployed = best_so_far(lines, [len(lines)])[0]
    record = record_of(lines[deployed.trial])
    sch = Schedule(record.workload.mod)
    record.trace.apply_to_schedule(sch, remove_postproc=False)

    def broken(name: str, how: str) -> Schedule | None:
        """The schedule with an intermediate buffer of block `name` stored as int32: its output, that output
        made intermediate by a cache_write stage, or the cache_read copy of its read `how` (read0: the first);
        None where TVM refuses."""
        attempt = sch.copy()
        try:
            block = attempt.get_sblock(name)
            if how.startswith("read"):
                block = attempt.cache_read(block, int(how[4:]), "global")
            elif how == "cache_write":
                attempt.cache_write(block, 0, "global")
            attempt.unsafe_set_dtype(block, 0, "int32")
            return attempt
        except Exception as err:  # noqa: BLE001 - TVM refuses this block: try the next
            refused.append(f"{name} ({how}): {str(err).splitlines()[-1]}")
            return None

    refused: list[str] = []
    names = list(dict.fromkeys(b.name for b in extract(sch.mod["main"]).blocks))
    sch = next((b for how in ("output", "cache_write", "read0", "read1", "read2") for n in names
                if (b := broken(n, how)) is not None), None)
    assert sch is not None, f"no block of {task.task_name} could be broken: {refused}"
    database = JSONDatabase(work_dir=str(db))
    database.commit_tuning_record(TuningRecord(sch.trace, database.commit_workload(mod), [deployed.latency_s / 2],
                                               target, record.args_info))
    return len(lines), sch.mod


def test_a_wrong_task_kernel_is_set_aside_and_the_next_best_compiled(tinycnn_run, target, tmp_path):
    """The network disagrees with PyTorch: the task whose deployed kernel disagrees with the task's own
    function is found, its trial recorded as failed, and the network compiled with the next best."""
    import shutil

    from metatune.tune.task_check import kernel_error
    from metatune.workload.model_source import ModelSource
    from metatune.workload.relax_tasks import extract_tasks, import_model

    source_db, _, _, res = tinycnn_run
    assert res.returncode == 0, res.stderr
    db, out = tmp_path / "db", tmp_path / "r.json"
    shutil.copytree(source_db, db)
    tasks = extract_tasks(import_model(ModelSource.parse("tinycnn")).mod, target)
    task = next(t for t in tasks if re.fullmatch(r"conv2d\d*", t.task_name))
    broken, program = _break_a_deployed_kernel(db, task, target)
    assert not kernel_error(task.dispatched[0], program, target) <= 1e-2  # the kernel is wrong indeed (or NaN)
    proc = tune("--model", "tinycnn", "--strategy", "random", "--trials", "8", "--db", str(db), "--json", str(out),
                "--reference-passes", str(PASSES))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["verified"] and result["trials"] == 9
    note = f"task {task.task_name}: trial {broken + 1}'s kernel computes wrong results"
    assert any(note in n for n in result["notes"])
    assert json.loads((db / RECORD_FILE).read_text().splitlines()[-1])[1][1] == [1e10]


def test_a_resumed_model_run_warms_each_task_in_its_cost_model(tinycnn_run, target):
    """Resuming routes every task's earlier measurements to the model that tunes it: the
    encodable tasks' to metatune's (its predictions move), the others' to XGBModel."""
    from tvm.s_tir import meta_schedule as ms

    from metatune.env.device import local_fingerprint
    from metatune.env.tvm_setup import import_tensor_intrinsics
    from metatune.search.online_model import MetaTuneCostModel
    from metatune.tune.fallback import RoutedCostModel
    from metatune.tune.tuner import measured_latencies, resolve_checkpoint, warm_start
    from metatune.workload.model_source import ModelSource
    from metatune.workload.relax_tasks import extract_tasks, import_model

    db, _, _, res = tinycnn_run
    assert res.returncode == 0, res.stderr
    import_tensor_intrinsics()
    tasks = extract_tasks(import_model(ModelSource.parse("tinycnn")).mod, target)
    conv = next(t for t in tasks if re.fullmatch(r"conv2d\d*", t.task_name))
    trained = resolve_checkpoint("auto", local_fingerprint())[0]
    metatune, xgb = MetaTuneCostModel(trained), ms.cost_model.CostModel.create("xgb", num_tuning_cores=1)
    router = RoutedCostModel(metatune, xgb, {conv.task_name})
    db_obj = ms.database.JSONDatabase(work_dir=str(db))
    warm_start(router, db_obj, target, [(t.dispatched[0], t.task_name) for t in tasks])

    others = sum(len(measured_latencies(db, t.dispatched[0])) for t in tasks if t is not conv)
    assert sum(len(group.costs) for group in xgb.data.values()) == others > 0
    context = ms.TuneContext(mod=conv.dispatched[0], target=target, task_name=conv.task_name)
    workload = db_obj.commit_workload(conv.dispatched[0])
    candidates = [r.as_measure_candidate() for r in db_obj.get_all_tuning_records() if r.workload.same_as(workload)]
    cold = MetaTuneCostModel(trained).predict(context, candidates)
    assert not np.allclose(metatune.predict(context, candidates), cold), "metatune's model ignored the records"


def test_tinycnn_with_metatune_tunes_every_task_with_its_model(tmp_path):
    """The metatune strategy end to end: every task of tinycnn is tuned by metatune's model
    (routing to XGBModel is covered by test_tasks_metatune_cannot_encode_go_to_xgb). In a fresh
    interpreter: `tune --model` imports TVM's tensor intrinsics the quick way, and not CUDA's."""
    out = tmp_path / "r.json"
    res = run_metatune_fresh(["tune", "--model", "tinycnn", "--trials", "16", "--db", tmp_path / "db", "--json", out,
                              "--reference-passes", PASSES], timeout=900)
    assert res.returncode == 0, res.stderr
    assert CPU_ONLY_INTRINSICS in res.stderr
    result = json.loads(out.read_text())
    assert result["strategy"] == "metatune" and result["trials"] == 16 and result["verified"]
    assert result["checkpoint"].startswith("x86_64-")
    tuners = {t["name"]: t["tuner"] for t in result["tasks"]}
    assert set(tuners.values()) == {"metatune"} and result["fallback_tasks"] == []


def test_a_gpu_target_is_refused_before_the_model_is_imported(tmp_path):
    """The tuned network runs on this machine's CPU: tuning it for a GPU would fail only after tuning."""
    from metatune import MetatuneError
    from metatune.tune.model_tuner import tune_model

    with pytest.raises(MetatuneError, match="is not a CPU: tune its operators one by one with --workload"):
        tune_model(str(tmp_path / "missing.onnx"), 2, "random", tmp_path / "db", target="nvidia/nvidia-h100")
    assert not list((tmp_path / "db").glob("*.json"))  # nothing measured, no device claimed

