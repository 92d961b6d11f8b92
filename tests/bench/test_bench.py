"""`metatune bench`: a small suite end to end (structure only, not speed), suites, bad input."""

from __future__ import annotations

import csv
import functools
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from metatune import MetatuneError
from metatune.bench.harness import (
    BenchConfig,
    RunKey,
    check_resumed_settings,
    merge_segments,
    plan,
    remeasure_references,
    run_bench,
)
from metatune.bench.model_bench import model_table
from metatune.bench.report import Run, markdown, write_csv
from metatune.bench.suites import load_suite, suite_names
from metatune.cli.bench import default_strategies as cli_default_strategies
from metatune.cli.bench import DEFAULT_TRIALS_TOTAL, REFERENCE_PASSES, check_modes, report_budgets
from metatune.dataset.store import DatasetStore
from metatune.env.device import local_fingerprint
from metatune.fileio import RECORD_FILE, REPO_ROOT
from metatune.learn.named_checkpoint import open_checkpoint
from metatune.measure.reference_timing import PASSES
from metatune.tune.tuner import DEVICE_FILE
from metatune.zoo.resolution import resolve
from tests.processes import free_port, run_metatune

SHIPPED = REPO_ROOT / "datasets" / "x86_64-sapphirerapids-2c"
NAMED = "metatune@x86_64-sapphirerapids-2c/v5"  # a strategy with its own checkpoint, beside the default's
STRATEGIES = ["metatune", "xgb", "xgb-transfer", "random", NAMED]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_metatune(list(args), env=env, timeout=900)


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory) -> Path:
    """Two sealed training workloads of the shipped dataset: enough to pretrain xgb-transfer quickly."""
    root = tmp_path_factory.mktemp("dataset")
    stores = [s for s in DatasetStore(SHIPPED) if s.split == "train" and s.sealed][:2]
    assert len(stores) == 2
    for store in stores:
        link = root / "workloads" / store.workload.family / store.dir.name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(store.dir)
    return root


# A workload that tunes in seconds with every strategy: TVM's evolutionary search (xgb, xgb-transfer) takes
# tens of seconds a run on the quick suite's convolutions, and the bench's code is the same for all (the
# strategies' rotation over workloads: test_plan_rotates_strategies_per_workload).
BENCH_SUITE = "- {name: dense, workload: 'dense:m=64,n=64,k=64'}\n"


@pytest.fixture(scope="module")
def bench_suite(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("suite") / "suite.yaml"
    path.write_text(BENCH_SUITE)
    return str(path)


@pytest.fixture(scope="module")
def quick_bench(tmp_path_factory, small_dataset, bench_suite) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("bench")
    args = ("bench", "--suite", bench_suite, "--budgets", "2,4", "--trials-per-iter", "4",
            "--strategies", ",".join(STRATEGIES), "--out", str(out), "--reference-passes", str(PASSES))
    return out, run_cli(*args, env={"METATUNE_DATASET": str(small_dataset)})


def test_every_strategy_produces_verified_results(quick_bench, bench_suite):
    out, proc = quick_bench
    assert proc.returncode == 0, proc.stderr[-3000:]
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    names = [b.name for b in load_suite(bench_suite)]
    assert {(r["workload"], r["strategy"], r["budget"]) for r in rows} == {
        (n, s, b) for n in names for s in STRATEGIES for b in ("2", "4")}
    assert all(r["verified"] == "True" and float(r["best_gflops"]) > 0 for r in rows)
    for path in (out / "runs").glob("*/*.json"):  # every budget's best kernel, not only the last, checked
        assert set(json.loads(path.read_text())["checked_at"]) == {"2", "4"}
    # each run tunes with its own checkpoint and keeps its label
    named = json.loads((out / "runs" / "dense" / "metatune@x86_64-sapphirerapids-2c_v5-r0.json").read_text())
    assert named["strategy"] == NAMED and named["checkpoint"] == "x86_64-sapphirerapids-2c/v5"
    default = json.loads((out / "runs" / "dense" / "metatune-r0.json").read_text())
    assert default["checkpoint"] == resolve().entry.id  # this machine's
    for r in rows:  # best-so-far never decreases with the budget
        if r["budget"] == "4":
            at2 = next(x for x in rows if x["budget"] == "2" and (x["workload"], x["strategy"]) == (r["workload"], r["strategy"]))
            assert float(r["best_gflops"]) >= float(at2["best_gflops"])


def test_a_bench_writes_table_curves_and_references(quick_bench, bench_suite):
    out, proc = quick_bench
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = (out / "table.md").read_text()
    for strategy in STRATEGIES:
        assert f"| {strategy} |" in table
    assert "vs xgb @4" in table
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    references = json.loads((out / "references.json").read_text())
    assert references["fp32_peak_gflops"] > 0
    assert set(references["torch"]) == {b.name for b in load_suite(bench_suite)}
    assert all(r["max_rel_error"] < 1e-4 and r["latency_us"] > 0 and r["spread"] >= 0
               for r in references["torch"].values())
    # every pass is kept (no more than --reference-passes), and whether they disagreed
    assert all(len(r["passes_us"]) == PASSES and r["unstable"] == bool(r["reasons"])
               for r in references["torch"].values())
    assert all(r["interval_us"][0] <= r["latency_us"] <= r["interval_us"][1] for r in references["torch"].values())
    assert len(references["fp32_peak"]["passes_gflops"]) == PASSES
    # the peak is the fastest GEMM library's, and says which
    peak = references["fp32_peak"]
    assert set(peak["libraries_gflops"]) == {"PyTorch eager", "oneDNN"}
    assert references["fp32_peak_gflops"] == max(peak["libraries_gflops"].values())
    assert peak["libraries_gflops"][peak["library"]] == references["fp32_peak_gflops"]
    assert f"{peak['library']}'s matmul" in table
    assert references["device_id"] == local_fingerprint().device_id  # another machine's are refused
    # a table rebuilt later (--report-only, --retime) has the budgets the bench asked for
    assert json.loads((out / "bench.json").read_text()) == {"budgets": [2, 4]}
    assert report_budgets(None, out) == [2, 4]


def test_rerunning_a_finished_bench_measures_nothing(quick_bench, small_dataset, bench_suite):
    out, proc = quick_bench
    assert proc.returncode == 0
    before = {p: p.read_text() for p in (out / "runs").glob("*/*.json")}
    again = run_cli("bench", "--suite", bench_suite, "--budgets", "2,4", "--strategies", ",".join(STRATEGIES),
                    "--out", str(out), env={"METATUNE_DATASET": str(small_dataset)})
    assert again.returncode == 0, again.stderr[-2000:]
    assert {p: p.read_text() for p in (out / "runs").glob("*/*.json")} == before


def test_retime_times_each_runs_deployed_kernels_again_side_by_side(quick_bench, tmp_path, bench_suite):
    """`--retime`: for every run and budget, the trial TVM would deploy (its database's first: the lowest
    mean of the repeats) is built, verified and timed again, in the given number of rounds; the table
    gains the re-timed comparison."""
    out, proc = quick_bench
    assert proc.returncode == 0, proc.stderr[-3000:]
    copy = tmp_path / "bench"
    shutil.copytree(out, copy)
    retimed = ["metatune", "xgb"]  # of the runs in --out, those of the strategies named
    res = run_cli("bench", "--suite", bench_suite, "--budgets", "2,4", "--strategies", ",".join(retimed),
                  "--out", str(copy), "--retime", "--rounds", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    data = json.loads((copy / "retimed.json").read_text())
    assert not (copy / "retimed.partial.json").exists()  # renamed once finished: a stop keeps the last one
    names = [b.name for b in load_suite(bench_suite)]
    assert sorted(data["workloads"]) == sorted(names) and data["rounds"] == 2
    for name in names:
        runs = data["workloads"][name]["runs"]
        assert sorted((r["strategy"], r["budget"]) for r in runs) == sorted((s, b) for s in retimed for b in (2, 4))
        for r in runs:
            key = RunKey(name, r["strategy"], 0)
            curve = json.loads(key.result_path(copy).read_text())["curve"]
            lines = (key.db_dir(copy) / RECORD_FILE).read_text().splitlines()[:r["budget"]]
            means = [sum(s) / len(s) if s and max(s) < 1e9 else float("inf") for s in (json.loads(x)[1][1] for x in lines)]
            assert r["trial"] == means.index(min(means)) + 1  # TVM's pick: the lowest mean, the earliest of equals
            assert r["tuned_gflops"] <= curve[r["budget"] - 1] * (1 + 1e-3)  # the curve gives the lowest median
            assert len(r["rounds_s"]) == 2 and r["gflops"] > 0
    assert "Re-timed side by side (2 interleaved rounds" in (copy / "table.md").read_text()
    device = RunKey(names[0], "xgb", 0).db_dir(copy) / DEVICE_FILE  # kernels tuned on another machine
    device.write_text(json.dumps({"device_id": "x86_64-elsewhere-2c"}))
    again = run_cli("bench", "--suite", bench_suite, "--strategies", "xgb", "--out", str(copy), "--retime")
    assert again.returncode == 2 and "holds measurements of x86_64-elsewhere-2c" in again.stderr, again.stderr[-2000:]
    assert json.loads((copy / "retimed.json").read_text()) == data


def test_a_run_whose_space_ran_out_is_not_tuned_again(tmp_path):
    """48 configurations in all: BatchBO stops short of 64 trials, and a second bench leaves the run alone."""
    suite = tmp_path / "suite.yaml"
    suite.write_text("- {name: tiny, workload: 'dense:m=1,n=2,k=1'}\n")
    args = ("bench", "--suite", str(suite), "--budgets", "64", "--strategies", "metatune", "--no-references",
            "--trials-per-iter", "16", "--out", str(tmp_path / "b"))
    assert (first := run_cli(*args)).returncode == 0, first.stderr[-2000:]
    result = tmp_path / "b" / "runs" / "tiny" / "metatune-r0.json"
    data = json.loads(result.read_text())
    assert data["exhausted"] and data["trials"] < 64
    assert (second := run_cli(*args)).returncode == 0, second.stderr[-2000:]
    assert json.loads(result.read_text()) == data


def test_retime_without_runs_is_one_line(tmp_path):
    proc = run_cli("bench", "--suite", "quick", "--out", str(tmp_path / "empty"), "--retime")
    assert proc.returncode == 2 and "holds no runs" in proc.stderr and "Traceback" not in proc.stderr


def test_a_resumed_run_adds_its_segments_times(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text("- {name: tiny, workload: 'dense:m=32,n=32,k=32'}\n")
    args = ("bench", "--suite", str(suite), "--strategies", "random", "--trials-per-iter", "2", "--no-references",
            "--out", str(tmp_path / "out"))
    first = run_cli(*args, "--budgets", "2")
    assert first.returncode == 0, first.stderr[-2000:]
    path = tmp_path / "out" / "runs" / "tiny" / "random-r0.json"
    earlier = json.loads(path.read_text())
    assert (earlier["trials"], earlier["timed_trials"], earlier["resumed"]) == (2, 2, False)
    assert earlier["trials_per_iter"] == 2
    other = run_cli(*[a if a != "2" else "4" for a in args], "--budgets", "2,4")  # --trials-per-iter 4
    assert other.returncode == 2 and "was tuned with --trials-per-iter 2, not 4" in other.stderr, other.stderr[-2000:]
    assert json.loads(path.read_text()) == earlier
    again = run_cli(*args, "--budgets", "2,4")
    assert again.returncode == 0, again.stderr[-2000:]
    resumed = json.loads(path.read_text())
    assert (resumed["trials"], resumed["timed_trials"], resumed["resumed"]) == (4, 4, True)
    assert resumed["wall_s"] > earlier["wall_s"] and resumed["measure_s"] > earlier["measure_s"]
    assert resumed["started"] == earlier["started"]  # tables order workloads by when their runs began
    path.unlink()  # as a segment killed before writing its result leaves the run: records in the database only
    killed = run_cli(*args, "--budgets", "2,6")
    assert killed.returncode == 0, killed.stderr[-2000:]
    after_kill = json.loads(path.read_text())
    assert (after_kill["trials"], after_kill["timed_trials"], after_kill["resumed"]) == (6, 2, True)


def test_times_of_a_killed_segment_are_not_counted_as_timed():
    earlier = {"trials": 64, "wall_s": 100.0, "search_s": 40.0, "measure_s": 50.0, "encode_s": 1.0, "update_s": 2.0,
               "disturbed": [[17, 32, 1.2]]}
    # the database held 128 trials when the last segment started: a killed segment measured 64 more
    latest = {"trials": 256, "timed_trials": 128, "wall_s": 300.0, "search_s": 120.0, "measure_s": 150.0,
              "encode_s": 3.0, "update_s": 6.0, "disturbed": [[129, 144, 0.8]]}
    merged = merge_segments(earlier, latest)
    assert merged["timed_trials"] == 192 and merged["trials"] == 256
    assert merged["disturbed"] == [[17, 32, 1.2], [129, 144, 0.8]]  # an earlier segment's stay on record
    assert (merged["wall_s"], merged["search_s"], merged["measure_s"]) == (400.0, 160.0, 200.0)
    assert merge_segments(None, latest) == latest


def test_plan_rotates_strategies_per_workload():
    suite = load_suite("quick")
    order = [key.strategy for _, key in plan(suite, ["a", "b", "c"], repeats=1)]
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]


def test_suite_from_file(tmp_path):
    path = tmp_path / "suite.yaml"
    path.write_text("- C6\n- {name: small, workload: 'dense:m=64,n=64,k=64'}\n- 'dense:m=32,n=32,k=32'\n")
    assert [b.name for b in load_suite(str(path))] == ["C6", "small", "dense"]


def test_shipped_suites_are_real_layers_the_dataset_has_not_seen():
    """A suite shipped to check that a gain is not tuned to ResNet-18 must hold none of the default
    dataset's workloads (training or held out; the spec is seeded, so every device's dataset has these)."""
    seen = {s.workload for s in DatasetStore(REPO_ROOT / "datasets" / "x86_64-sapphirerapids-2c")}
    assert len(seen) == 79
    suite = load_suite("other-networks")
    assert len(suite) == 13 and len({b.workload for b in suite}) == 13
    assert not seen & {b.workload for b in suite}
    validation = load_suite("search-validation")  # where search designs are chosen: disjoint from all of them
    assert len(validation) == 8 and len({b.workload.family for b in validation}) == 7
    assert not (seen | {b.workload for b in suite} | {b.workload for b in load_suite("resnet18")}) & {
        b.workload for b in validation}
    assert {"other-networks", "search-validation"} <= set(suite_names())


@pytest.mark.parametrize("content, fragment", [
    ("- 'nosuchop:m=1'\n", "unknown family"),
    ("{}\n", "non-empty list"),
    ("- {name: a, workload: C6}\n- {name: a, workload: C7}\n", "duplicate workload names a"),
    ("- {name: a/b, workload: C6}\n", "name 'a/b' must be letters, digits"),
    ("- {name: .., workload: C6}\n", "name '..' must be letters, digits"),
])
def test_bad_suite_files_are_rejected(tmp_path, content, fragment):
    path = tmp_path / "suite.yaml"
    path.write_text(content)
    with pytest.raises(MetatuneError, match=fragment):
        load_suite(str(path))


@pytest.mark.parametrize("args, fragment", [
    (("--suite", "nosuch"), "unknown suite"),
    (("--budgets", "16,x"), "--budgets"),
    (("--strategies", "metatune,magic"), "unknown strategy magic"),
    (("--runner", "rpc://127.0.0.1:9190/cpu"), "pass --no-references with an RPC runner"),
    (("--runner", "rpc://127.0.0.1:9190/cpu", "--retime"), "--retime times on this machine; it takes no --runner"),
    (("--reference-passes", "8"), "--reference-passes 8: at least 9"),
    (("--report-only", "--retime"), "--report-only and --retime are different modes of bench: give one"),
    (("--references-only", "--no-references"), "--references-only measures the references that --no-references"),
    (("--rounds", "5"), "--rounds applies to --retime only"),
    (("--retime", "--reference-passes", "12"), "--reference-passes does not apply to --retime"),
    (("--report-only", "--strategies", "xgb", "--repeats", "2"), "--strategies, --repeats do not apply to --report-only"),
    (("--retime", "--checkpoint", "x86_64-znver3-2c"), "--checkpoint does not apply to --retime (it tunes nothing)"),
    (("--references-only", "--trials-per-iter", "8"), "--trials-per-iter does not apply to --references-only"),
    (("--report-only", "--target", "llvm", "--no-references"),
     "--target does not apply to --report-only (it measures nothing"),
    (("--report-only", "--runner", "rpc://127.0.0.1:9190/cpu"), "--runner does not apply to --report-only"),
    (("--trials-total", "200", "--input-shape", "1,3,8,8"), "--input-shape, --trials-total apply to --model benches"),
    (("--model", "tinycnn", "--trials-total", "0,4"), "--trials-total 0,4: each must be at least 1"),
    (("--suite", "."), "unknown suite '.'"),
])
def test_bench_bad_input_is_one_line(tmp_path, args, fragment):
    proc = run_cli("bench", *args, "--out", str(tmp_path / "b"))
    assert proc.returncode == 2 and fragment in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("mode", ["report_only", "retime"])
def test_a_mode_takes_the_tuning_commands_no_references(mode):
    """`--no-references` asks for nothing these modes would do, so the documented recipe (the tuning
    command's arguments plus --retime or --report-only) is not refused for it."""
    check_modes(None, report_only=mode == "report_only", references_only=False, retime=mode == "retime",
                references=False, rounds=3, input_shape=None, trials_total=DEFAULT_TRIALS_TOTAL, replay_at=None,
                reference_passes=REFERENCE_PASSES, budgets="16,32", tuning_options={"--strategies": mode == "retime"},
                measuring_options={"--runner": False, "--target": False})


def test_default_strategies_are_those_that_can_run_here(tmp_path, monkeypatch, small_dataset):
    """Left out, --strategies holds xgb-transfer only where a dataset can pretrain it, and for --model
    what whole-model tuning offers; named without a dataset, xgb-transfer stops the bench before it measures."""
    from metatune.bench.harness import SUITE_STRATEGIES, default_strategies

    notes: list[str] = []
    monkeypatch.setenv("METATUNE_DATASET", str(tmp_path))
    assert default_strategies(None, notes.append) == ["metatune", "xgb", "random"]
    assert len(notes) == 1 and "xgb-transfer left out" in notes[0] and str(tmp_path) in notes[0]
    monkeypatch.setenv("METATUNE_DATASET", str(small_dataset))
    assert default_strategies(None, notes.append) == list(SUITE_STRATEGIES) and len(notes) == 1
    # over RPC with no --target, the servers' dataset is unknown: left out, rather than refused as asked for
    assert "xgb-transfer" not in cli_default_strategies(None, None, "rpc://127.0.0.1:9190/cpu", tuning=True)
    assert "xgb-transfer" in cli_default_strategies(None, None, "local", tuning=True)
    proc = run_cli("bench", "--model", "nosuchnet", "--out", str(tmp_path / "m"))
    assert proc.returncode == 2 and "nosuchnet" in proc.stderr and "not available for --model" not in proc.stderr
    out = tmp_path / "b"
    proc = run_cli("bench", "--suite", "quick", "--strategies", "metatune,xgb-transfer", "--no-references",
                   "--out", str(out), env={"METATUNE_DATASET": str(tmp_path / "none")})
    assert proc.returncode == 2 and "xgb-transfer needs the training records" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not (out / "runs").exists()


TAKES_A_CHECKPOINT = "only metatune, metatune-evolve, metatune-task, metatune-local, metatune-early-chains, metatune-deep-chains, metatune-space-incumbents, metatune-task-chains, metatune-task-hedge, metatune-factor-moves, metatune-recent-gp, metatune-wide-first, gradient take a checkpoint"


@pytest.mark.parametrize("strategies, fragment", [
    (["xgb@x86_64-sapphirerapids-2c/v5"], TAKES_A_CHECKPOINT),
    (["metatune@"], TAKES_A_CHECKPOINT),
    (["metatune", "metatune"], "names a strategy twice"),
])
def test_bad_checkpoint_strategies_are_rejected(strategies, fragment):
    with pytest.raises(MetatuneError, match=fragment):
        BenchConfig("quick", [2], strategies)


def test_config_sorts_and_checks_budgets():
    assert BenchConfig("quick", [64, 16, 32, 16], ["xgb"]).budgets == [16, 32, 64]
    with pytest.raises(MetatuneError):
        BenchConfig("quick", [0], ["xgb"])
    with pytest.raises(MetatuneError, match="--budgets 100000000 is more than 10000000"):  # a typo, not a plan
        BenchConfig("quick", [16, 10**8], ["xgb"])


def test_model_bench_tunes_compiles_and_tabulates(tmp_path):
    out = tmp_path / "model-bench"
    proc = run_cli("bench", "--model", "tinycnn", "--trials-total", "4,8", "--replay-at", "2", "--strategies",
                   "random", "--out", str(out), "--reference-passes", str(PASSES))
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second = (json.loads((out / "model" / "tinycnn" / f"random-r0-t{t}.json").read_text()) for t in (4, 8))
    assert first["trials"] >= 4 and second["trials"] >= 8  # the second total resumed the first run's database
    # the replay: the model as the run's first two trials left it, compiled without tuning more
    replayed = json.loads((out / "model" / "tinycnn" / "random-r0-t2-of8.json").read_text())
    assert replayed["trials"] == 2 and replayed["replay_of"] == 8 and replayed["tune_s"] < 5
    # (a replay at the largest total, the finished model timed again, goes through the same replay)
    records = (out / "model" / "tinycnn" / "random-r0-at2" / RECORD_FILE).read_text().splitlines()
    assert records == (out / "model" / "tinycnn" / "random-r0" / RECORD_FILE).read_text().splitlines()[:2]
    for result in (first, second, replayed):
        assert result["verified"] and result["model_ms"] > 0 and result["reference_ms"] > 0
        ort = result["onnxruntime"]  # the tuned library timed against onnxruntime on the exported ONNX twin
        assert ort["library"] == "onnxruntime" and ort["reference"]["median_ms"] > 0
        assert len(ort["ratios"]) == len(result["comparison"]["ratios"]) == PASSES  # --reference-passes
    assert (out / "model" / "tinycnn" / "tinycnn.onnx").exists()
    table = (out / "model_table.md").read_text()
    assert "| tinycnn | random | 4 |" in table and "| tinycnn | random | 8 |" in table
    assert "| tinycnn | random | 2 (first of 8) |" in table


@pytest.mark.parametrize("args, message", [
    (("--strategies", "metatune,xgb@x86_64-sapphirerapids-2c/v5"), TAKES_A_CHECKPOINT),
    (("--strategies", "random", "--trials-total", "4", "--replay-at", "8"), "--replay-at 8: each must be between 1"),
    (("--strategies", "random", "--trials-total", "4,100000000"), "--trials-total 100000000 is more than 10000000"),
    (("--strategies", "random", "--reference-passes", "3"), "--reference-passes 3: at least 9"),
    (("--strategies", "random", "--retime"), "--retime applies to suite benches only"),
    (("--strategies", "random", "--no-references", "--budgets", "4"), "--no-references, --budgets apply to suite"),
])
def test_model_bench_rejects_a_bad_request_before_writing_anything(tmp_path, args, message):
    proc = run_cli("bench", "--model", "tinycnn", *args, "--out", str(tmp_path / "m"))
    assert proc.returncode == 2 and message in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "m").exists()


def test_model_bench_rejects_unknown_model_before_measuring(tmp_path):
    proc = run_cli("bench", "--model", "nosuchnet", "--strategies", "random", "--out", str(tmp_path / "m"))
    assert proc.returncode == 2 and "nosuchnet" in proc.stderr and "Traceback" not in proc.stderr


def test_remeasuring_references_replaces_them_and_tabulates_the_change(tmp_path, monkeypatch):
    """PyTorch's reference measured again for real; the fp32 peak (timed for real by the quick bench, about
    40 s on 2 cores) stands in, passed the same cap on passes."""
    from metatune.bench import harness

    peaks: list[int] = []

    def peak(threads: int, device: str, max_passes: int) -> dict:
        peaks.append(max_passes)
        return {"fp32_peak_gflops": 123.4, "fp32_peak": {"passes_gflops": [123.4] * PASSES, "interval_gflops": [
            120.0, 125.0], "spread": 0.01, "unstable": False}}

    monkeypatch.setattr(harness, "fp32_peak", peak)
    suite = tmp_path / "suite.yaml"
    suite.write_text("- {name: tiny, workload: 'dense:m=64,n=64,k=64'}\n")
    out = tmp_path / "out"
    (out / "references.json").parent.mkdir()
    (out / "references.json").write_text(json.dumps({"fp32_peak_gflops": 1.0, "threads": 2,
                                                     "torch": {"tiny": {"gflops": 1.0, "latency_us": 524.288},
                                                               "other": {"gflops": 3.0}}}))
    config = BenchConfig(str(suite), [2], ["random"], out=out, reference_passes=PASSES + 1)
    table = remeasure_references(config, echo=lambda _: None)
    references = json.loads((out / "references.json").read_text())
    assert references["torch"]["other"] == {"gflops": 3.0}  # another suite's workload in --out: kept
    assert PASSES <= len(references["torch"]["tiny"]["passes_us"]) <= PASSES + 1
    assert peaks == [PASSES + 1] and references["fp32_peak_gflops"] == 123.4
    assert "| fp32 peak GFLOPS | 1.0 | 123.4 | +12240.0% |" in table
    assert f"| tiny PyTorch GFLOPS | 1.0 | {references['torch']['tiny']['gflops']:.1f} |" in table


def test_references_of_another_device_are_not_replaced(tmp_path):
    """A GPU bench's cuDNN references re-measured without its --target would become CPU numbers."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "references.json").write_text(json.dumps({"device": "cuda", "torch": {}}))
    config = BenchConfig("quick", [2], ["random"], out=out)
    with pytest.raises(MetatuneError, match="measured on cuda, these would be measured on cpu"):
        remeasure_references(config, echo=lambda _: None)
    # another CPU (or core count): its PyTorch would be compared with the kernels tuned here
    (out / "references.json").write_text(json.dumps({"device_id": "x86_64-elsewhere-64c", "torch": {}}))
    with pytest.raises(MetatuneError, match="measured on x86_64-elsewhere-64c, this is x86_64-"):
        remeasure_references(config, echo=lambda _: None)
    # a tuning bench refused for them leaves the folder's recorded budgets alone
    with pytest.raises(MetatuneError, match="measured on x86_64-elsewhere-64c, this is x86_64-"):
        run_bench(config, echo=lambda _: None)
    assert not (out / "bench.json").exists()


def test_a_bench_measures_the_references_its_finished_runs_lack(tmp_path, monkeypatch):
    """Runs tuned first with --no-references: a bench with references measures every workload's, though
    nothing is left to tune."""
    from metatune.bench import harness

    suite = tmp_path / "suite.yaml"
    suite.write_text("- {name: a, workload: 'dense:m=64,n=64,k=64'}\n- {name: b, workload: 'dense:m=32,n=64,k=64'}\n")
    out = tmp_path / "out"
    for name, text in (("a", "dense:m=64,n=64,k=64"), ("b", "dense:m=32,n=64,k=64")):
        path = RunKey(name, "random", 0).result_path(out)
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"workload": text, "trials": 2, "curve": [1.0, 2.0]}))
    monkeypatch.setattr(harness, "fp32_peak", lambda threads, device, max_passes: {"fp32_peak_gflops": 9.0,
                                                                                   "fp32_peak": {}})
    monkeypatch.setattr(harness, "torch_reference", lambda workload, threads, device, max_passes: {
        "workload": str(workload), "gflops": 5.0})
    assert harness.run_bench(BenchConfig(str(suite), [2], ["random"], out=out), echo=lambda _: None) == []
    references = json.loads((out / "references.json").read_text())
    assert set(references["torch"]) == {"a", "b"} and references["fp32_peak_gflops"] == 9.0


def test_references_measured_so_far_survive_a_stop(tmp_path, monkeypatch):
    from metatune.bench import harness

    suite = tmp_path / "suite.yaml"
    suite.write_text("- {name: a, workload: 'dense:m=64,n=64,k=64'}\n- {name: b, workload: 'dense:m=32,n=64,k=64'}\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "references.json").write_text(json.dumps({"fp32_peak_gflops": 1.0, "torch": {"a": {"gflops": 1.0},
                                                                                        "b": {"gflops": 2.0}}}))
    peak = {"fp32_peak_gflops": 9.0, "fp32_peak": {}}
    monkeypatch.setattr(harness, "fp32_peak", lambda threads, device, max_passes: peak)

    def torch_reference(workload, threads, device, max_passes):
        if workload.params["m"] == 32:
            raise KeyboardInterrupt
        return {"gflops": 5.0}

    monkeypatch.setattr(harness, "torch_reference", torch_reference)
    with pytest.raises(KeyboardInterrupt):
        remeasure_references(BenchConfig(str(suite), [2], ["random"], out=out), echo=lambda _: None)
    kept = json.loads((out / "references.json").read_text())
    assert kept["fp32_peak_gflops"] == 9.0 and kept["torch"] == {"a": {"gflops": 5.0}, "b": {"gflops": 2.0}}


def test_a_model_bench_folder_is_resumed_only_for_its_model_and_input_shapes(tmp_path):
    from types import SimpleNamespace

    from metatune.bench.model_bench import claim_folder
    from metatune.workload.model_source import InputSpec, ModelSource

    def imported(spec: str, *shape: int):
        return SimpleNamespace(model=SimpleNamespace(source=ModelSource.parse(spec), inputs=[InputSpec("x", shape)]))

    claim_folder(tmp_path / "resnet18", imported("resnet18", 1, 3, 32, 32))
    claim_folder(tmp_path / "resnet18", imported("resnet18", 1, 3, 32, 32))  # the same: resumed
    with pytest.raises(MetatuneError, match=r"holds a bench of resnet18 with inputs \[\[1, 3, 32, 32\]\]"):
        claim_folder(tmp_path / "resnet18", imported("resnet18", 1, 3, 64, 64))
    with pytest.raises(MetatuneError, match="another network of that name"):  # same name, inputs: not the same net
        claim_folder(tmp_path / "resnet18", imported("torchvision:resnet18", 1, 3, 32, 32))
    net = tmp_path / "a" / "net.onnx"
    net.parent.mkdir()
    net.write_bytes(b"first")
    claim_folder(tmp_path / "net", imported(str(net), 1, 8))
    other = tmp_path / "b" / "net.onnx"
    other.parent.mkdir()
    other.write_bytes(b"first")
    claim_folder(tmp_path / "net", imported(str(other), 1, 8))  # another path to the same bytes: resumed
    other.write_bytes(b"second")
    with pytest.raises(MetatuneError, match="another network of that name"):
        claim_folder(tmp_path / "net", imported(str(other), 1, 8))


def test_a_model_bench_total_below_what_a_run_holds_is_refused(tmp_path):
    """Tuning to 200 trials a database that holds 1000 would compile the 1000-trial model, labelled 200."""
    from metatune.bench.model_bench import check_totals_reachable, result_path

    run = tmp_path / "model" / "net" / "random-r0"
    run.mkdir(parents=True)
    (run / RECORD_FILE).write_text("{}\n" * 8)
    (tmp_path / "model" / "net" / "random-r0-t8.json").write_text(json.dumps({"trials": 8}))
    check_totals_reachable(tmp_path, "net", [("random", 0)], [8, 16], 2)  # 8 done, 16 still ahead
    with pytest.raises(MetatuneError, match="already holds 8 trials, more than --trials-total 4: .* --replay-at 4"):
        check_totals_reachable(tmp_path, "net", [("random", 0)], [4, 8], 2)
    # TVM ends a run at the batch that reaches its total: 8 records of a run to 6 by batches of 4 were one run,
    # killed before its result was written, and tuning to 6 again finishes it
    check_totals_reachable(tmp_path, "net", [("random", 0)], [6, 16], 4)
    with pytest.raises(MetatuneError, match="already holds 8 trials, more than --trials-total 4"):
        check_totals_reachable(tmp_path, "net", [("random", 0)], [4, 8], 4)
    result_path(tmp_path, "net", "random", 0, 4).write_text(json.dumps({"trials": 4}))  # tuned to 4 first: kept
    check_totals_reachable(tmp_path, "net", [("random", 0)], [4, 8], 2)


def test_a_model_bench_run_continues_with_its_settings(tmp_path):
    """The next total resumes a run's database: another --trials-per-iter or checkpoint would mix searches."""
    from metatune.bench.model_bench import check_runs_continue_alike, result_path

    (tmp_path / "model" / "net").mkdir(parents=True)
    earlier = {"trials": 4, "trials_per_iter": 4, "checkpoint": "x86_64-sapphirerapids-2c/v5"}
    result_path(tmp_path, "net", "metatune", 0, 4).write_text(json.dumps(earlier))
    continue_with = functools.partial(check_runs_continue_alike, tmp_path, "net", [("metatune", 0)], [4, 8])
    continue_with("x86_64-sapphirerapids-2c/v5", 4, None)
    with pytest.raises(MetatuneError, match="was tuned with --trials-per-iter 4, not 16"):
        continue_with("x86_64-sapphirerapids-2c/v5", 16, None)
    with pytest.raises(MetatuneError, match="tuned with checkpoint x86_64-sapphirerapids-2c/v5, and would continue "
                                            "with x86_64-sapphirerapids-2c/v6; pass --checkpoint"):
        continue_with("x86_64-sapphirerapids-2c/v6", 4, None)
    result_path(tmp_path, "net", "metatune", 0, 8).write_text(json.dumps({**earlier, "trials": 8}))
    continue_with("x86_64-sapphirerapids-2c/v6", 16, None)  # every total done: nothing continues


def test_report_budgets_default_to_those_the_runs_reached(tmp_path):
    from metatune.bench.report import budgets_reached

    assert budgets_reached(tmp_path, [16, 32, 64, 128, 256]) == [16, 32, 64, 128, 256]  # no runs yet
    run = tmp_path / "runs" / "C1" / "xgb-r0.json"
    run.parent.mkdir(parents=True)
    run.write_text(json.dumps({"trials": 64}))
    assert budgets_reached(tmp_path, [16, 32, 64, 128, 256]) == [16, 32, 64]
    run.write_text(json.dumps({"trials": 8}))
    assert budgets_reached(tmp_path, [16, 32, 64, 128, 256]) == [8]


def bench_run(name: str, strategy: str, gflops: float) -> Run:
    return Run({"name": name, "strategy": strategy, "workload": "dense:m=64,n=64,k=64", "curve": [gflops],
                "trials": 1, "search_s": 1.0, "measure_s": 1.0, "encode_s": 0.0, "update_s": 0.0})


def test_a_budgets_kernel_counts_as_verified_only_where_it_was_checked():
    run = Run({"name": "w", "strategy": "xgb", "trials": 4, "curve": [1.0, 2.0, 2.0, 3.0], "verified": True,
               "max_rel_error": 1e-7, "checked_at": {"2": 2e-7, "4": 1e-7}})
    assert (run.error_at(2), run.error_at(4), run.error_at(3)) == (2e-7, 1e-7, None)
    legacy = Run({**run.data, "checked_at": None})  # written when only the final kernel was checked
    del legacy.data["checked_at"]
    assert (legacy.error_at(2), legacy.error_at(4)) == (None, 1e-7)
    assert Run({**run.data, "verified": False}).error_at(2) is None


def test_a_run_whose_space_ran_out_keeps_its_best_at_larger_budgets():
    """No more trials could have improved it: it stays in the comparisons at budgets it did not reach."""
    data = {"name": "w", "strategy": "xgb", "trials": 3, "curve": [1.0, 2.0, 2.5], "verified": True,
            "max_rel_error": 1e-7, "checked_at": {"2": 2e-7, "3": 1e-7}}
    assert (Run(data).best_at(8), Run(data).error_at(8)) == (None, None)
    exhausted = Run({**data, "exhausted": True})
    assert (exhausted.best_at(2), exhausted.best_at(8), exhausted.error_at(8)) == (2.0, 2.5, 1e-7)


def test_trials_to_reach_counts_a_repeat_that_never_got_there():
    from metatune.bench.report import trials_to_reach

    def repeat(curve: list[float]) -> Run:
        return Run({"name": "w", "strategy": "s", "trials": len(curve), "curve": curve})

    got_there_at_2, never = repeat([1.0, 5.0, 5.0]), repeat([1.0, 1.0, 1.0])
    assert trials_to_reach([got_there_at_2, never, repeat([1, 1, 5.0])], "w", "s", 4.0) == 3
    assert trials_to_reach([got_there_at_2, never, never], "w", "s", 4.0) is None  # not 2: two of three never did


def test_summary_tells_how_batch_bo_weighed_its_priors():
    """Runs that recorded BatchBO's counters get a table of the GP's last weights (medians over runs)."""
    runs = [bench_run("a", "xgb", 100.0), bench_run("b", "xgb", 100.0)]
    for name, w, t in (("a", 0.2, 0.6), ("b", 0.4, None)):
        run = bench_run(name, "metatune-task", 150.0)
        run.data["search_stats"] = {"prior_weight": w, "task_weight": t, "batches": 4, "pool_added": 800, "mutants": 0}
        runs.append(run)
    table = markdown(runs, [1], {})
    assert "| metatune-task | 0.300 | 0.600 | 200 | 0 |" in table
    assert "| xgb | " not in table.split("BatchBO when each run ended")[1]

def test_tables_give_no_ratio_against_an_unstable_reference(tmp_path):
    references = {"fp32_peak_gflops": 400.0, "fp32_peak": {"unstable": False},
                  "torch": {"a": {"gflops": 200.0, "unstable": True}, "b": {"gflops": 200.0, "unstable": False}}}
    table = markdown([bench_run("a", "xgb", 100.0), bench_run("b", "xgb", 100.0)], [1], references)
    assert "| a | xgb | 100.0 | 1 | 200.0 | unstable | 25% |" in table
    assert "| b | xgb | 100.0 | 1 | 200.0 | 50% | 25% |" in table

    runs = tmp_path / "model" / "resnet18"
    runs.mkdir(parents=True)
    for strategy, unstable in (("metatune", True), ("xgb", False)):
        (runs / f"{strategy}-r0.json").write_text(json.dumps({
            "model": "resnet18", "strategy": strategy, "trials": 1000, "model_ms": 20.0,
            "reference_ms": 30.0, "tasks": [], "untuned": [], "tune_s": 1.0, "verified": True,
            "comparison": {"unstable": unstable}}))
    rows = model_table(tmp_path)
    assert "| resnet18 | metatune | 1000 | 1 | 20.00 | PyTorch eager | 30.00 | unstable | – | – |" in rows
    assert "| resnet18 | xgb | 1000 | 1 | 20.00 | PyTorch eager | 30.00 | 1.50× | – | – |" in rows


def test_percentages_are_taken_at_the_largest_budget_in_every_row():
    """A run that has not reached the largest budget gets none: its share at a smaller one would sit in
    the same column as the others' at the largest."""
    short = bench_run("a", "metatune", 100.0)
    full = Run({**bench_run("a", "xgb", 50.0).data, "curve": [50.0, 100.0], "trials": 2})
    table = markdown([short, full], [1, 2], {"fp32_peak_gflops": 400.0, "fp32_peak": {}, "torch": {"a": {"gflops": 200.0}}})
    assert "| a | xgb | 50.0 | 100.0 | 2 | 200.0 | 50% | 25% |" in table
    assert "| a | metatune | 100.0 | — | 1 | 200.0 | — | — |" in table


def test_a_budget_without_a_working_kernel_is_shown_and_named_not_dropped(tmp_path):
    """Every trial of metatune's first budget failed: a result (`failed`, named under the table), where a
    missing number would read as "not measured" and quietly leave the workload out of the means."""
    failing = Run({**bench_run("a", "metatune", 0.0).data, "curve": [0.0, 80.0], "trials": 2, "repeat": 0})
    xgb = Run({**bench_run("a", "xgb", 50.0).data, "curve": [50.0, 100.0], "trials": 2, "repeat": 0})
    table = markdown([failing, xgb], [1, 2], {})
    assert "| a | metatune | failed | 80.0 |" in table
    assert "**No working kernel**" in table and "metatune on a @1" in table and "xgb on a" not in table
    write_csv([failing, xgb], [1, 2], tmp_path / "results.csv")
    with (tmp_path / "results.csv").open() as f:
        rows = {(r["strategy"], r["budget"]): r for r in csv.DictReader(f)}
    assert rows[("metatune", "1")]["best_gflops"] == "0.0" and rows[("metatune", "1")]["best_latency_us"] == ""
    assert rows[("metatune", "1")]["verified"] == "False"


def test_a_repeat_without_a_working_kernel_does_not_halve_the_median():
    """Two repeats, one failed at the first budget: the median of 0 and 80 (40 GFLOPS) is a speed no kernel had."""
    repeats = [Run({**bench_run("a", "metatune", 0.0).data, "curve": [0.0, 90.0], "trials": 2, "repeat": 0}),
               Run({**bench_run("a", "metatune", 80.0).data, "curve": [80.0, 100.0], "trials": 2, "repeat": 1})]
    table = markdown(repeats, [1, 2], {})
    assert "| a | metatune | 80.0 | 95.0 |" in table
    assert "**Repeats without a working kernel**" in table and "metatune on a @1 (1 of 2 repeats)" in table
    assert "**No working kernel**" not in table


def test_table_names_the_runs_measured_beside_busy_processes():
    quiet, busy = bench_run("a", "xgb", 100.0), bench_run("b", "metatune", 150.0)
    busy.data.update(repeat=1, disturbed=[[1, 16, 1.1], [33, 48, 0.6]])
    table = markdown([quiet, busy], [1], {})
    assert "**Disturbed**" in table and "b metatune r1 (32 trials, up to 1.1 cores)" in table
    assert "**Disturbed**" not in markdown([quiet], [1], {})


def test_a_failed_run_is_recorded_and_the_bench_goes_on(tmp_path):
    """A run that raises (here: its database was damaged by hand) is named in failures.json and under the
    table, the other runs still tune, the command exits 1; once the cause is gone, the same command
    retries that run and the failure is cleared."""
    suite = tmp_path / "suite.yaml"
    suite.write_text("- {name: damaged, workload: 'dense:m=32,n=32,k=32'}\n"
                     "- {name: whole, workload: 'dense:m=32,n=64,k=32'}\n")
    out = tmp_path / "out"
    damaged_db = out / "runs" / "damaged" / "random-r0"
    damaged_db.mkdir(parents=True)
    (damaged_db / "database_workload.json").write_text("this is not JSON\n")
    (damaged_db / RECORD_FILE).write_text("")
    args = ("bench", "--suite", str(suite), "--strategies", "random", "--budgets", "2", "--trials-per-iter", "2",
            "--no-references", "--out", str(out))

    first = run_cli(*args)
    assert first.returncode == 1, first.stderr[-3000:]
    assert "damaged [random] r0 failed at ? of 2 trials" in first.stderr and "the bench goes on" in first.stderr
    assert "database_workload.json:1 is not a JSON line" in first.stderr
    assert json.loads((out / "runs" / "whole" / "random-r0.json").read_text())["verified"]
    assert not (out / "runs" / "damaged" / "random-r0.json").exists()
    failures = json.loads((out / "failures.json").read_text())
    assert list(failures) == ["damaged/random/r0"] and "Traceback" in failures["damaged/random/r0"]["traceback"]
    table = (out / "table.md").read_text()
    assert "**Failed**" in table and "damaged [random] r0 at ? of 2 trials" in table

    shutil.rmtree(damaged_db)
    second = run_cli(*args)
    assert second.returncode == 0, second.stderr[-3000:]
    assert json.loads((out / "runs" / "damaged" / "random-r0.json").read_text())["verified"]
    assert not (out / "failures.json").exists() and "**Failed**" not in (out / "table.md").read_text()


def test_an_out_folder_measured_on_another_device_ends_the_bench_at_once(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text("- {name: tiny, workload: 'dense:m=32,n=32,k=32'}\n")
    out = tmp_path / "out"
    (out / "runs" / "tiny" / "random-r0").mkdir(parents=True)
    (out / "runs" / "tiny" / "random-r0" / "device.json").write_text('{"device_id": "x86_64-elsewhere-2c"}')
    proc = run_cli("bench", "--suite", str(suite), "--strategies", "random", "--budgets", "2", "--no-references",
                   "--out", str(out))
    assert proc.returncode == 2 and "holds measurements of x86_64-elsewhere-2c" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not (out / "failures.json").exists()


def test_an_out_folder_with_another_workload_of_the_same_name_ends_the_bench_at_once(tmp_path):
    """Two suites may name different shapes alike (`dense`): resuming would take one's runs for the other's."""
    suite = tmp_path / "suite.yaml"
    suite.write_text("- {name: dense, workload: 'dense:m=32,n=32,k=32'}\n")
    out = tmp_path / "out"
    path = RunKey("dense", "random", 0).result_path(out)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"workload": "dense:m=64,n=64,k=64", "trials": 2, "curve": [1.0, 2.0]}))
    proc = run_cli("bench", "--suite", str(suite), "--strategies", "random", "--budgets", "2", "--no-references",
                   "--out", str(out))
    assert proc.returncode == 2 and "holds a run named dense of dense:m=64,n=64,k=64" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_run_is_continued_only_with_the_checkpoint_it_began_with(tmp_path):
    """A bare zoo id resolves to its newest version: once a newer one is published, resuming would switch."""
    suite, out = tmp_path / "suite.yaml", tmp_path / "out"
    suite.write_text("- {name: tiny, workload: 'dense:m=32,n=32,k=32'}\n")
    path = RunKey("tiny", "metatune@x86_64-sapphirerapids-2c", 0).result_path(out)
    path.parent.mkdir(parents=True)
    earlier = {"workload": "dense:m=32,n=32,k=32", "trials": 2, "curve": [1.0, 2.0],
               "checkpoint": "x86_64-sapphirerapids-2c/v5", "trials_per_iter": 16}
    path.write_text(json.dumps(earlier))
    config = BenchConfig(suite=str(suite), strategies=["metatune@x86_64-sapphirerapids-2c"], budgets=[4], out=out,
                         references=False)
    newest = open_checkpoint("x86_64-sapphirerapids-2c").id
    assert newest != "x86_64-sapphirerapids-2c/v5"
    with pytest.raises(MetatuneError, match=f"was tuned with checkpoint x86_64-sapphirerapids-2c/v5, and would "
                                            f"continue with {newest}; its strategy names .* use another --out"):
        check_resumed_settings(config, {"x86_64-sapphirerapids-2c": newest})
    path.write_text(json.dumps({**earlier, "checkpoint": newest}))
    check_resumed_settings(config, {"x86_64-sapphirerapids-2c": newest})
    # results written before checkpoints were recorded as resolved hold the spec: accepted
    path.write_text(json.dumps({**earlier, "checkpoint": "x86_64-sapphirerapids-2c"}))
    check_resumed_settings(config, {"x86_64-sapphirerapids-2c": newest})
    path.write_text(json.dumps({**earlier, "trials_per_iter": 8}))
    with pytest.raises(MetatuneError, match="was tuned with --trials-per-iter 8, not 16: pass 8"):
        check_resumed_settings(config, {"x86_64-sapphirerapids-2c": newest})
    path.write_text(json.dumps({**earlier, "trials": 4}))  # finished: nothing more to measure, nothing to refuse
    check_resumed_settings(config, {"x86_64-sapphirerapids-2c": newest})
    # a bare strategy takes --checkpoint: passing the earlier one continues the run
    plain = RunKey("tiny", "metatune", 0).result_path(out)
    plain.write_text(json.dumps(earlier))
    config = BenchConfig(suite=str(suite), strategies=["metatune"], budgets=[4], out=out, references=False,
                         checkpoint="x86_64-sapphirerapids-2c")
    with pytest.raises(MetatuneError, match="pass --checkpoint x86_64-sapphirerapids-2c/v5 to continue it"):
        check_resumed_settings(config, {"x86_64-sapphirerapids-2c": newest})


def test_xgb_transfer_over_rpc_needs_the_servers_target(tmp_path):
    from metatune.bench.harness import BenchConfig, check_request

    config = BenchConfig(suite="quick", strategies=["xgb-transfer"], budgets=[2], out=tmp_path / "out",
                         runner="rpc://127.0.0.1:9190/cpu", references=False)
    with pytest.raises(MetatuneError, match="pass their --target"):
        check_request(config)


@pytest.mark.parametrize("args, fragment", [
    (("--checkpoint", "{tmp}/none"), "neither a file or directory nor a zoo checkpoint"),
    (("--runner", "rpc://127.0.0.1:{port}/cpu"), "cannot reach the RPC tracker"),
])
def test_an_error_in_the_request_ends_the_bench_at_once(tmp_path, args, fragment):
    """A checkpoint that does not exist or a tracker that does not answer would fail every run alike: one line,
    exit 2, nothing written into --out (not even its logs folder)."""
    suite = tmp_path / "suite.yaml"
    suite.write_text("- {name: tiny, workload: 'dense:m=32,n=32,k=32'}\n- {name: other, workload: 'dense:m=32,n=64,k=32'}\n")
    out = tmp_path / "out"
    args = [a.format(tmp=tmp_path, port=free_port()) for a in args]
    proc = run_cli("bench", "--suite", str(suite), "--strategies", "metatune", *args, "--budgets", "2",
                   "--no-references", "--out", str(out))
    assert proc.returncode == 2 and fragment in proc.stderr, proc.stderr[-3000:]
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()
