"""`metatune tune` end to end on this CPU: strategies, resume, verification, bad input."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from metatune.fileio import RECORD_FILE, REPO_ROOT
from metatune.tune.tuner import measured_latencies, warm_start
from metatune.workload.operators import Workload
from tests.processes import (CPU_ONLY_INTRINSICS, SLOW_IMPORT_TRIPWIRE, run_metatune, run_metatune_fresh,
                             tvm_workers)

SMALL = "dense:m=64,n=64,k=64"
ZOO = REPO_ROOT / "zoo"


def tune(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_metatune(["tune", *args], env=env, timeout=900)


def trial_keys(db: Path) -> list[str]:
    """The configuration of every trial in the database (printed trace up to the postprocessors)."""
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from metatune.dataset.store import config_key

    db_obj = JSONDatabase(work_dir=str(db))
    return [config_key(r.trace) for r in db_obj.get_all_tuning_records()]


def test_metatune_resumes_to_the_requested_total_without_remeasuring(tmp_path):
    db = tmp_path / "db"
    first = tune("--workload", SMALL, "--trials", "8", "--trials-per-iter", "4", "--db", str(db))
    assert first.returncode == 0, first.stderr
    before = trial_keys(db)
    assert len(before) == 8
    second = tune("--workload", SMALL, "--trials", "12", "--trials-per-iter", "4", "--db", str(db),
                  "--json", str(tmp_path / "r.json"))
    assert second.returncode == 0, second.stderr
    after = trial_keys(db)
    assert len(after) == 12 and len(set(after)) == 12, "a configuration was measured twice"
    assert set(before) <= set(after)
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["trials"] == 12 and len(result["curve"]) == 12 and result["verified"]
    assert result["curve"] == sorted(result["curve"]), "best-so-far must not decrease"
    assert result["checkpoint"].startswith("x86_64-")
    stats = result["search_stats"]  # this invocation's BatchBO counters: one batch of 4
    assert stats["batches"] == 1 and stats["proposed"] == 4 and stats["resumed"] == 8
    # asked for fewer than the database holds: nothing measured, its 12 reported, the progress at 12 of 12
    third = tune("--workload", SMALL, "--trials", "4", "--db", str(db))
    assert third.returncode == 0 and len(trial_keys(db)) == 12, third.stderr
    assert "12/12 elapsed" in third.stderr and "12/4" not in third.stderr, third.stderr


@pytest.mark.parametrize("strategy", ["xgb", "random"])
def test_baseline_strategies_tune_and_verify(tmp_path, strategy, target):
    out = tmp_path / "r.json"
    res = tune("--workload", SMALL, "--trials", "8", "--trials-per-iter", "8", "--strategy", strategy,
               "--db", str(tmp_path / "db"), "--json", str(out))
    assert res.returncode == 0, res.stderr
    result = json.loads(out.read_text())
    assert result["strategy"] == strategy and result["trials"] == 8
    assert result["verified"] and result["max_rel_error"] < 1e-3 and result["best_gflops"] > 0
    assert len(measured_latencies(tmp_path / "db", Workload.parse(SMALL).irmodule())) == 8
    # a run resumed from this database starts with a cost model that has seen its 8 trials
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    database = JSONDatabase(work_dir=str(tmp_path / "db"))
    model = warm_start(strategy, database, target, [(Workload.parse(SMALL).irmodule(), "main")])
    if strategy == "xgb":
        assert sum(len(group.costs) for group in model.data.values()) == 8
        assert_metatune_reads(database, target)
    else:
        assert model == "random"
    # resumed, it measures configurations it has not measured (ReplayTrace, reseeded, draws anew)
    first = set(trial_keys(tmp_path / "db"))
    resumed = tune("--workload", SMALL, "--trials", "16", "--trials-per-iter", "8", "--strategy", strategy,
                   "--db", str(tmp_path / "db"))
    assert resumed.returncode == 0, resumed.stderr
    keys = trial_keys(tmp_path / "db")
    assert len(keys) == 16 and len(set(keys) - first) >= 6, "the resumed run measured the first run's trials again"
    if strategy == "random":
        assert_database_keeps_to_its_device(tmp_path / "db")


WARM_START_SCRIPT = SLOW_IMPORT_TRIPWIRE + """
import tvm
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms

from metatune.env.device import local_fingerprint
from metatune.tune.tuner import warm_start
from metatune.workload.operators import Workload

target = local_fingerprint().tvm_target()
mod = Workload.parse("dense:m=16,n=16,k=16").irmodule()
database = ms.database.MemoryDatabase()
workload = database.commit_workload(mod)
database.commit_tuning_record(ms.database.TuningRecord(Schedule(mod).trace, workload, [1e-5], target))
model = warm_start("xgb", database, target, [(mod, "main")])
print(sum(len(group.costs) for group in model.data.values()))
"""


def test_warm_starting_a_cost_model_imports_tvms_tensor_intrinsics_the_quick_way():
    """`warm_start` makes a TuneContext, whose first construction imports TVM's tensor intrinsics: 20-100 s
    through `inspect.stack`, unless `import_tensor_intrinsics` came first (seen: 72 s in a test process)."""
    proc = subprocess.run([sys.executable, "-c", WARM_START_SCRIPT], capture_output=True, text=True, timeout=300,
                          cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["1"]


def test_tuning_from_the_cli_imports_tvms_tensor_intrinsics_the_quick_way(tmp_path):
    """The suite's other CLI runs are forked from a process that has imported them already
    (tests.preloaded_cli): only a fresh interpreter shows a command that would take the slow way, or
    that would register CUDA's intrinsics (~3.5 s) for a CPU. (`tune --model`: the metatune run of
    tests/tune/test_tune_model.py.)"""
    proc = run_metatune_fresh(["tune", "--workload", SMALL, "--trials", "2", "--trials-per-iter", "2",
                               "--db", str(tmp_path / "db")])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert CPU_ONLY_INTRINSICS in proc.stderr


def test_a_database_without_a_device_file_is_judged_by_its_records_target(tmp_path):
    """Older databases, and TVM's own (plain `llvm`: this machine's CPU), resume; records compiled for
    another CPU class do not."""
    from metatune import MetatuneError
    from metatune.env.device import local_fingerprint
    from metatune.fileio import RECORD_FILE
    from metatune.tune.tuner import check_database_device

    here = local_fingerprint()

    def database_of(target: dict) -> Path:
        db = tmp_path / str(len(list(tmp_path.iterdir())))
        db.mkdir()
        (db / RECORD_FILE).write_text(json.dumps([0, [[], [1e-3], target, []]]) + "\n")
        return db

    check_database_device(database_of({"kind": "llvm"}), here)
    check_database_device(database_of({"kind": "llvm", "keys": ["cpu"], **here.target}), here)
    other = "nehalem" if here.isa_class == "haswell" else "haswell"
    with pytest.raises(MetatuneError, match=f"holds records compiled for .*'mcpu': '{other}'"):
        check_database_device(database_of({"kind": "llvm", "mcpu": other, "num-cores": here.num_cores}), here)


def assert_database_keeps_to_its_device(db: Path) -> None:
    """The database names the device it was measured on; a run measuring on another device (this CPU
    compiled as another class) is refused before it measures, and the records stay as they were."""
    from metatune.env.device import local_fingerprint
    from metatune.tune.tuner import DEVICE_FILE

    here = local_fingerprint()
    assert json.loads((db / DEVICE_FILE).read_text())["device_id"] == here.device_id
    other = "llvm -mcpu=nehalem" if here.isa_class == "haswell" else "llvm -mcpu=haswell"
    before = trial_keys(db)
    refused = tune("--workload", SMALL, "--trials", "24", "--strategy", "random", "--target", other, "--db", str(db))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert f"holds measurements of {here.device_id}" in refused.stderr and "another --db" in refused.stderr
    assert trial_keys(db) == before
    (db / DEVICE_FILE).unlink()  # a database from before device files: its records' target decides
    refused = tune("--workload", SMALL, "--trials", "24", "--strategy", "random", "--target", other, "--db", str(db))
    assert refused.returncode == 2 and "holds records compiled for" in refused.stderr, refused.stderr
    # a run whose setup fails (xgb-transfer without a dataset) claims nothing: the database stays open to any device
    fresh = db.parent / "fresh"
    failed = tune("--workload", SMALL, "--trials", "8", "--strategy", "xgb-transfer", "--db", str(fresh),
                  env={"METATUNE_DATASET": str(db.parent / "no-dataset")})
    assert failed.returncode == 2 and "xgb-transfer needs" in failed.stderr, failed.stderr
    assert not (fresh / DEVICE_FILE).exists()


def assert_metatune_reads(database, target) -> None:
    """TVM's EvolutionarySearch stores simplified traces (dead instructions dropped): metatune's
    knob spaces read them as their configurations, so BatchBO resumes from a database TVM's
    default tuner filled instead of calling its records foreign."""
    import tvm

    from metatune.space.knob_space import DesignSpaces, SearchSpace, SpaceError

    space = SearchSpace(DesignSpaces(Workload.parse(SMALL), target))
    read = []
    for record in database.get_all_tuning_records():
        try:
            read.append((record, space.config_of(record)))
        except SpaceError:  # MutateParallel may change an annotation no knob of the space holds
            pass
    assert len(read) >= 6, f"metatune read {len(read)} of TVM's 8 records"
    for record, config in read:
        replayed = space.schedule(config, strict=True)
        assert replayed is not None
        sch = tvm.s_tir.Schedule(Workload.parse(SMALL).irmodule())
        record.trace.apply_to_schedule(sch, remove_postproc=False)
        tvm.ir.assert_structural_equal(replayed.sch.mod, sch.mod)


def test_missing_zoo_suggests_train_zoo(tmp_path):
    res = tune("--workload", SMALL, "--trials", "4", "--db", str(tmp_path / "db"),
               env={"METATUNE_ZOO": str(tmp_path / "nozoo")})
    assert res.returncode == 2
    assert "make train-zoo" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("refused", ["no zoo", "uncovered workload"])
def test_a_refused_run_leaves_no_worker_processes(tmp_path, monkeypatch, refused):
    """A run refused while it is set up (no checkpoint to load) or before it measures (a workload the
    checkpoint cannot encode) ends with no TVM worker alive: left to garbage collection, TVM's pool
    could be collected on one of its own threads, whose join of itself printed a traceback under the
    one-line error."""
    from metatune import MetatuneError
    from metatune.tune.tuner import tune_workload

    workload = SMALL
    if refused == "no zoo":
        monkeypatch.setenv("METATUNE_ZOO", str(tmp_path / "nozoo"))
    else:
        workload = "dense:m=1,n=1,k=1"
    before = tvm_workers()
    with pytest.raises(MetatuneError, match="make train-zoo" if refused == "no zoo" else "cannot encode"):
        tune_workload(Workload.parse(workload), 4, "metatune", tmp_path / "db")
    assert tvm_workers() - before == set()


def test_a_finished_run_is_checked_and_reported_without_starting_workers(tmp_path, monkeypatch):
    """Builder and runner workers (each imports TVM: seconds) start only for a run with trials left to
    measure; one whose database holds them all (a re-run, a bench's replay) only checks its best kernel."""
    from metatune.tune import tuner

    db = tmp_path / "db"
    first = tuner.tune_workload(Workload.parse(SMALL), 4, "random", db, trials_per_iter=4)
    assert first.timed_trials == 4 and first.verified

    def no_measurer(*args, **kwargs):
        raise AssertionError("a finished run started a Measurer")

    monkeypatch.setattr(tuner, "Measurer", no_measurer)
    again = tuner.tune_workload(Workload.parse(SMALL), 4, "random", db)
    assert again.timed_trials == 0 and again.verified and again.best_latency_us == first.best_latency_us


def test_bad_strategy_and_workload_are_one_line_errors(tmp_path):
    res = tune("--workload", SMALL, "--strategy", "magic", "--db", str(tmp_path / "db"))
    assert res.returncode == 2 and "unknown strategy" in res.stderr
    assert not (tmp_path / "db").exists()  # refused before the run folder and its logs are made
    res = tune("--workload", "conv2d:n=1,c=3,h=2,w=2,k=4,r=7,s=7,stride=1,pad=1")
    assert res.returncode == 2 and "larger than the padded input" in res.stderr


@pytest.mark.parametrize("strategy", ["metatune", "gradient"])
def test_a_workload_the_cost_model_cannot_encode_is_one_line_before_measuring(tmp_path, strategy):
    """A 1x1x1 dense has extent-1 loops the super-graph template has no slot for: every prediction would
    fail inside TVM's search (a traceback); TVM's default tunes it."""
    res = tune("--workload", "dense:m=1,n=1,k=1", "--strategy", strategy, "--trials", "4", "--db", str(tmp_path / "db"))
    assert res.returncode == 2 and "cost model cannot encode its programs" in res.stderr, res.stderr[-2000:]
    assert "--strategy xgb" in res.stderr and "Traceback" not in res.stderr
    records = tmp_path / "db" / RECORD_FILE
    assert not records.exists() or not records.read_text().strip()  # refused before anything was measured


def test_task_without_design_space_is_a_clear_error(target):
    from tvm.s_tir import meta_schedule as ms

    from metatune.env.tvm_setup import import_tensor_intrinsics
    from metatune.space.knob_space import DesignSpaces, SpaceError

    import_tensor_intrinsics()
    context = ms.TuneContext(mod=Workload.parse(SMALL).irmodule(), target=target, space_generator="post-order-apply",
                             task_name="empty")
    with pytest.raises(SpaceError, match="no design space"):
        DesignSpaces.from_context(context, [])


def test_checkpoint_of_another_device_warns_what_happens(tmp_path):
    import shutil
    import warnings

    from metatune.env.device import local_fingerprint
    from metatune.tune.tuner import resolve_checkpoint
    from metatune.zoo import read_index

    entry = read_index(ZOO)[-1]
    run = tmp_path / "other"
    shutil.copytree(entry.directory, run)
    card = json.loads((run / "card.json").read_text())
    card["device"]["device_id"] = "x86_64-haswell-4c"
    (run / "card.json").write_text(json.dumps(card))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trained, checkpoint, notes = resolve_checkpoint(str(run), local_fingerprint())
    assert trained is not None and checkpoint == str(run)
    assert any("x86_64-haswell-4c" in str(w.message) and "adaptation" in str(w.message) for w in caught)
    assert notes


def test_a_checkpoint_of_another_kind_of_device_is_refused():
    """A GPU checkpoint cannot encode CPU programs: every prediction would fail, each task silently on TVM's model."""
    from metatune import MetatuneError
    from metatune.env.device import local_fingerprint
    from metatune.tune.tuner import resolve_checkpoint

    with pytest.raises(MetatuneError, match="encodes programs with super-graph template .* need cpu's"):
        resolve_checkpoint("cuda-sm90-h100/v1", local_fingerprint())


def test_checkpoint_takes_a_zoo_id(monkeypatch, tmp_path):
    """`--checkpoint DEVICE_ID/vN` (or a bare DEVICE_ID) loads through the zoo, which checks its sha256."""
    import shutil
    import warnings

    import torch

    from metatune.env.device import local_fingerprint
    from metatune.tune.tuner import resolve_checkpoint
    from metatune.zoo import ChecksumError, read_index

    entry = read_index(ZOO)[-1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        direct = resolve_checkpoint(str(entry.weights_path), local_fingerprint())[0]
        for name in (entry.id, entry.device_id):
            trained, checkpoint, notes = resolve_checkpoint(name, local_fingerprint())
            assert checkpoint == entry.id  # a bare device id is recorded as the version it named
            assert all(torch.equal(a, b) for a, b in zip(trained.model.state_dict().values(),
                                                          direct.model.state_dict().values()))
            assert bool(notes) == (entry.device_id != local_fingerprint().device_id)
    zoo = tmp_path / "zoo"
    shutil.copytree(ZOO, zoo)
    weights = zoo / entry.path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    monkeypatch.setenv("METATUNE_ZOO", str(zoo))
    with pytest.raises(ChecksumError):
        resolve_checkpoint(entry.id, local_fingerprint())


def test_meta_schedule_loggers_survive_unnamed_handlers(tmp_path):
    """TVM rebuilds its logger config from handler names; an unnamed handler (pytest's log capture
    attaches one to every non-propagating logger) made the second tuning run in a process crash."""
    import logging

    from tvm.s_tir.meta_schedule.logging import get_loggers_from_work_dir

    from metatune.env.tvm_setup import detach_unnamed_meta_schedule_log_handlers

    tvm_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    unnamed = logging.NullHandler()
    tvm_logger.addHandler(unnamed)
    try:
        detach_unnamed_meta_schedule_log_handlers()
        get_loggers_from_work_dir(str(tmp_path), ["task"])
    finally:
        tvm_logger.removeHandler(unnamed)
    assert unnamed not in tvm_logger.handlers
    assert (tmp_path / "logs").is_dir()


TASK_TABLE = "| Weighted Latency (us) |"  # the header of MetaSchedule's task table


def test_tune_keeps_meta_schedule_logs_off_the_console_unless_verbose(tmp_path):
    """MetaSchedule prints its task table after every batch: by default it goes only to the log
    folder the command names once; -v prints it on the console too."""
    db = tmp_path / "db"
    quiet = tune("--workload", SMALL, "--trials", "4", "--strategy", "random", "--db", str(db))
    assert quiet.returncode == 0, quiet.stderr
    console = quiet.stdout + quiet.stderr
    assert TASK_TABLE not in console and "[INFO]" not in console, console
    named = [line.split()[1] for line in console.splitlines() if line.startswith("logs: ")]
    assert named == [str(db / "logs")], console
    table_log = db / "logs" / "tvm.s_tir.meta_schedule.logging.task_scheduler.log"
    assert TASK_TABLE in table_log.read_text()
    verbose = tune("--workload", SMALL, "--trials", "8", "--strategy", "random", "--db", str(db), "-v")
    assert verbose.returncode == 0, verbose.stderr
    assert TASK_TABLE in verbose.stdout + verbose.stderr
    assert table_log.read_text().count("Logging directory") == 2, "the verbose run logs to the file as well"


def test_warnings_to_file_keeps_warnings_off_stderr(tmp_path, capsys):
    import warnings

    from metatune.tune.logs import warnings_to_file

    path = tmp_path / "logs" / "python-warnings.log"
    with warnings_to_file(path):
        warnings.simplefilter("always")
        warnings.warn("an old API", DeprecationWarning)
    assert "DeprecationWarning: an old API" in path.read_text()
    assert "an old API" not in capsys.readouterr().err


NATIVE_WARNING = "is not valid in"  # TVM's C++ warning (LLVM) for an -mcpu LLVM does not know

NATIVE_SCRIPT = """
import sys
from pathlib import Path

import tvm
from tvm import te

from metatune.tune.logs import native_output_to

a = te.placeholder((4,), name="a")
func = te.create_prim_func([a, te.compute((4,), lambda i: a[i] * 2, name="b")])
with native_output_to(Path(sys.argv[1])):
    tvm.compile(func, target=tvm.target.Target({"kind": "llvm", "mcpu": "notacpu"}))
    print("progress line", file=sys.stderr)
tvm.compile(func, target=tvm.target.Target({"kind": "llvm", "mcpu": "notacpu2"}))
"""


def test_native_output_goes_to_the_log_while_python_stderr_stays_on_the_console(tmp_path):
    """TVM's C++ writes its warnings to file descriptor 2, past Python: inside `native_output_to` they
    land in the log, Python's own stderr lines still on the console, and after it fd 2 is the console."""
    log = tmp_path / "logs" / "tvm-native.log"
    proc = subprocess.run([sys.executable, "-c", NATIVE_SCRIPT, str(log)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "`-mcpu=notacpu` " + NATIVE_WARNING in log.read_text()
    assert "progress line" in proc.stderr and "`-mcpu=notacpu` " not in proc.stderr, proc.stderr
    assert "`-mcpu=notacpu2` " + NATIVE_WARNING in proc.stderr and "notacpu2" not in log.read_text()


def test_tvm_search_runs_on_every_core_like_metatunes_own(tmp_path, monkeypatch):
    """TVM's EvolutionarySearch gets the cores metatune's pool building gets: on one thread its
    postprocessors made a CUDA batch of 16 take minutes, and wall times compared unlike with like."""
    from tvm.s_tir import meta_schedule as ms

    from metatune.env.device import usable_cores
    from metatune.tune.tuner import tune_workload

    asked: dict = {}

    class Asked(Exception):
        """Raised once TVM's loop is called: what it was asked is all this test needs (the xgb
        case of test_baseline_strategies_tune_and_verify tunes through the same call)."""

    def recording_tune_tir(*args, **kwargs):
        asked.update(kwargs)
        raise Asked

    monkeypatch.setattr(ms, "tune_tir", recording_tune_tir)
    with pytest.raises(Asked):
        tune_workload(Workload.parse(SMALL), 8, "xgb", tmp_path / "db", trials_per_iter=8)
    assert asked["num_tuning_cores"] == usable_cores()


def test_the_reported_best_is_the_kernel_tvm_deploys_and_checks(tmp_path):
    """TVM deploys the lowest mean time; the curve follows medians. On a near-tie they part, and the
    best reported (and verified) must be the deployed one, not a kernel nobody checked."""
    from metatune.fileio import RECORD_FILE

    db = tmp_path / "db"
    first = tune("--workload", SMALL, "--trials", "4", "--trials-per-iter", "4", "--strategy", "random", "--db", str(db))
    assert first.returncode == 0, first.stderr[-2000:]
    lines = [json.loads(line) for line in (db / RECORD_FILE).read_text().splitlines()]
    assert len(lines) == 4
    times = [[1e-6, 1e-6, 1e-5], [2e-6, 2e-6, 2e-6], [1e-3] * 3, [1e-3] * 3]  # medians 1 and 2 us, means 4 and 2 us
    for line, secs in zip(lines, times):
        line[1][1] = secs
    (db / RECORD_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
    again = tune("--workload", SMALL, "--trials", "4", "--strategy", "random", "--db", str(db),
                 "--json", str(tmp_path / "out.json"))
    assert again.returncode == 0, again.stderr[-2000:]
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["best_latency_us"] == 2.0 and result["verified"]
    assert result["curve"][-1] == pytest.approx(Workload.parse(SMALL).flops / 1e-6 / 1e9, rel=1e-3)


def test_a_deployed_kernel_with_wrong_results_is_set_aside_for_the_next_best(tmp_path, monkeypatch):
    """Tuning does not check each candidate: when the kernel a run would deploy fails its NumPy
    check, it becomes a failed trial in the database and the next best is deployed and checked."""
    from metatune.fileio import RECORD_FILE
    from metatune.measure.check import WrongResultError
    from metatune.measure.database import best_so_far, trial_lines
    from metatune.tune import tuner

    calls = []
    checked = tuner.check_schedule

    def wrong_first(workload, sch, target):
        calls.append(sch)
        if len(calls) == 1:
            raise WrongResultError("max relative error 1.0e+00 > 1e-04")
        return checked(workload, sch, target)

    monkeypatch.setattr(tuner, "check_schedule", wrong_first)
    db = tmp_path / "db"
    mod = Workload.parse(SMALL).irmodule()
    result = tuner.tune_workload(Workload.parse(SMALL), 8, "random", db, trials_per_iter=8)
    records = [json.loads(line)[1] for line in (db / RECORD_FILE).read_text().splitlines()]
    set_aside = [i for i, record in enumerate(records) if record[1] == [1e10]]
    assert len(set_aside) == 1 and result.failures == 1 and len(calls) == 2
    assert any(f"trial {set_aside[0] + 1}'s kernel computes wrong results" in note for note in result.notes)
    deployed = best_so_far(trial_lines(db, mod), [8])[0]
    assert result.verified and deployed.trial != set_aside[0]
    assert result.best_latency_us == round(deployed.latency_s * 1e6, 3)
