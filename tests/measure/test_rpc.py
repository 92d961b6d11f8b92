"""Measurement through TVM's RPC tracker: URL parsing, `rpc status`, remote fingerprints, and a
dataset build over two loopback servers that survives one of them being killed mid-run."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from metatune import MetatuneError
from metatune.measure.runners import (
    RpcSpec,
    RunnerSpecError,
    TrackerAddress,
    make_runner,
    parse_rpc_url,
    parse_tracker,
    server_lost,
)
from tests.processes import free_port, run_metatune

SPEC = """
name: rpc-tiny
seed: 3
samples_per_workload: 12
max_gflop: 0.01
families:
  dense:
    workloads: 2
    params: {m: {choices: [16, 32]}, n: {choices: [32, 64]}, k: {choices: [16, 32]}}
"""

# Runs the real CLI, logging the configuration key of every candidate handed to the Measurer,
# so that the test can check that each one ended up measured or recorded as failed.
DRIVER = """
import json, sys
from metatune.measure import measurer
from metatune.dataset.store import config_key
log = open(sys.argv[1], "a")
measure_batch = measurer.Measurer.measure
def logged(self, workload, candidates):
    for c in candidates:
        log.write(json.dumps({"workload": workload.key, "key": config_key(c.sch.trace)}) + "\\n")
    log.flush()
    return measure_batch(self, workload, candidates)
measurer.Measurer.measure = logged
sys.argv = ["metatune", *sys.argv[2:]]
from metatune.cli import main
main()
"""


# -- parsing (no TVM, no network) ---------------------------------------------------------------


def test_parse_rpc_url():
    assert parse_rpc_url("rpc://127.0.0.1:9190/sapphire-2c") == RpcSpec(TrackerAddress("127.0.0.1", 9190), "sapphire-2c")
    assert parse_rpc_url("rpc://[::1]:9190/x86.v1_a").tracker == TrackerAddress("::1", 9190)
    assert str(parse_rpc_url("rpc://tracker.lan:9190/k/")) == "rpc://tracker.lan:9190/k"
    assert parse_tracker("10.0.0.2:9191") == TrackerAddress("10.0.0.2", 9191)


@pytest.mark.parametrize(
    "url, fragment",
    [
        ("rpc://127.0.0.1/cpu", "missing tracker port"),
        ("rpc://:9190/cpu", "missing tracker host"),
        ("rpc://127.0.0.1:99999/cpu", "port must be a number in 1-65535"),
        ("rpc://127.0.0.1:abc/cpu", "port must be a number in 1-65535"),
        ("rpc://127.0.0.1:9190", "missing device key"),
        ("rpc://127.0.0.1:9190/", "missing device key"),
        ("rpc://127.0.0.1:9190/a/b", "may only hold letters"),
        ("rpc://127.0.0.1:9190/a:b", "may only hold letters"),
        ("rpc://127.0.0.1:9190/cpu?timeout=3", "unexpected '?' or '#'"),
        ("rpc://me@127.0.0.1:9190/cpu", "no user or password"),
        ("rpc:127.0.0.1:9190/cpu", "expected 'local' or rpc://HOST:PORT/KEY"),
    ],
)
def test_bad_rpc_urls_are_one_line_errors(url, fragment):
    with pytest.raises(RunnerSpecError) as err:
        parse_rpc_url(url)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_unknown_runner_and_bad_tracker():
    with pytest.raises(RunnerSpecError, match="expected 'local' or rpc://HOST:PORT/KEY"):
        make_runner("http://127.0.0.1:9190/cpu", None)
    for text in ("127.0.0.1", "rpc://127.0.0.1:9190/cpu", ""):
        with pytest.raises(RunnerSpecError):
            parse_tracker(text)


def test_a_gpu_target_over_rpc_is_refused_before_any_server_is_asked():
    """Servers report their CPU, and a GPU's kernels would be checked on this machine's GPU, if any."""
    with pytest.raises(MetatuneError, match=r"over RPC metatune times CPU \(llvm\) kernels only: run metatune on"):
        make_runner(f"rpc://127.0.0.1:{free_port()}/gpu", None, target="nvidia/nvidia-h100")


def test_lost_server_is_told_apart_from_a_failing_candidate():
    lost = "RPCRunner: An exception occurred\nTraceback ...\ntvm.error.InternalError: Check failed: (code == RPCCode::kReturn) is false: code=kShutdown"
    assert server_lost(lost)
    assert server_lost("RPCRunner: Timeout, killed after 15 seconds")  # client-side limit beyond the session
    assert server_lost("RPCRunner: An exception occurred\nRuntimeError: Cannot request cpu after 5 retry, last_error:x")
    assert not server_lost("RPCRunner: An exception occurred\nRPCSessionTimeoutError: Your 15s session has expired")
    assert not server_lost("RPCRunner: An exception occurred\nInternalError: division by zero")
    assert not server_lost(None) and not server_lost("")


def test_unreachable_tracker_fails_fast():
    port = free_port()
    start = time.monotonic()
    with pytest.raises(MetatuneError, match=f"cannot reach the RPC tracker at 127.0.0.1:{port}"):
        make_runner(f"rpc://127.0.0.1:{port}/cpu", None)
    assert time.monotonic() - start < 10


def test_tune_with_an_unreachable_tracker_stops_before_its_run_folder(tmp_path):
    """One line, exit 2: no database folder made, no logs line printed before the error."""
    db = tmp_path / "db"
    out = run_metatune(["tune", "--workload", "dense:m=16,n=16,k=16", "--runner",
                        f"rpc://127.0.0.1:{free_port()}/cpu", "--db", str(db)], timeout=120)
    assert out.returncode == 2 and "cannot reach the RPC tracker" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not db.exists()


def test_bad_runner_on_the_cli_is_one_line_exit_2(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    out = run_metatune(["dataset", "build", "--spec", str(spec), "--out", str(tmp_path / "ds"),
                        "--runner", "rpc://127.0.0.1/cpu"], timeout=120)
    assert out.returncode == 2 and "missing tracker port" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


# -- fingerprints and the retrying runner (no servers needed) -------------------------------------


def test_unknown_remote_fingerprint_is_a_warned_assumption(monkeypatch, capsys):
    from metatune.env.device import local_fingerprint
    from metatune.measure import runners

    monkeypatch.setattr(runners, "query_fingerprints", lambda spec, count: [(None, "unknown")] * count)
    fp = runners.agreed_fingerprint(parse_rpc_url("rpc://127.0.0.1:9190/cpu"), 2)
    assert fp == local_fingerprint()
    err = capsys.readouterr().err
    assert "remote fingerprint is unknown" in err and f"assuming they equal this host ({fp.device_id}" in err


def test_servers_of_different_devices_under_one_key_are_refused(monkeypatch):
    from dataclasses import replace

    from metatune.env.device import local_fingerprint
    from metatune.measure import runners

    here = local_fingerprint()
    other = replace(here, num_cores=here.num_cores + 6)
    monkeypatch.setattr(runners, "query_fingerprints", lambda spec, count: [(here, "a"), (other, "b")])
    with pytest.raises(MetatuneError, match="are different devices"):
        runners.agreed_fingerprint(parse_rpc_url("rpc://127.0.0.1:9190/cpu"), 2)


class _Done:
    def __init__(self, result):
        self._result = result

    def done(self):
        return True

    def result(self):
        return self._result


class _FlakyRunner:
    """Stands in for RPCRunner: the first `lose` results come from a server that died."""

    def __init__(self, lose: int):
        self.lose, self.calls = lose, 0

    def run(self, inputs):
        from tvm.s_tir.meta_schedule.runner import RunnerResult

        out = []
        for _ in inputs:
            self.calls += 1
            if self.calls <= self.lose:
                msg = "RPCRunner: An exception occurred\nInternalError: Check failed: (code == RPCCode::kReturn) is false: code=1"
                out.append(_Done(RunnerResult(None, msg)))
            else:
                out.append(_Done(RunnerResult([1e-5, 2e-5], None)))
        return out


def _retrying(monkeypatch, inner):
    from metatune.measure import runners

    up = {"cpu": runners.KeyStatus("cpu", ["127.0.0.1:9091"], 1, 0)}
    monkeypatch.setattr(runners, "tracker_status", lambda addr: up)
    return runners.retrying_rpc_runner(inner, parse_rpc_url("rpc://127.0.0.1:9190/cpu"), 1, verify_locally=True)


def test_lost_candidates_are_retried_once_then_typed_run_error(monkeypatch, target):
    from metatune.measure.measurer import FailureKind, Measurer, MeasureSettings
    from metatune.space.knob_space import DesignSpaces
    from metatune.workload.operators import Workload
    from tests.conftest import SMALL_SHAPES

    workload = Workload.parse(SMALL_SHAPES["dense"])
    cands = [c.measure_candidate() for c in DesignSpaces(workload, target).random_candidates(3, seed=0)]
    settings = MeasureSettings(repeat=1, min_repeat_ms=1)

    once = _retrying(monkeypatch, _FlakyRunner(lose=2))  # two lost, both fine on the retry
    with Measurer(target, settings, runner=once) as measurer:
        results = measurer.measure(workload, cands)
    assert all(r.ok for r in results) and once.retried == 2 and once.lost == 0

    never = _retrying(monkeypatch, _FlakyRunner(lose=10**6))  # every server keeps dying
    with Measurer(target, settings, runner=never) as measurer:
        results = measurer.measure(workload, cands)
    assert [r.failure for r in results] == [FailureKind.RUN_ERROR] * 3
    assert all("RPC server lost (tried 2x)" in r.message for r in results)


def test_closing_the_measurer_ends_the_rpc_runners_workers(monkeypatch, target):
    from metatune.measure.measurer import Measurer

    class Pool:
        stopped = False

        def shutdown(self):
            self.stopped = True

    inner = _FlakyRunner(lose=0)
    inner.pool = Pool()
    with Measurer(target, runner=_retrying(monkeypatch, inner)):
        pass
    assert inner.pool.stopped


def test_no_server_left_stops_the_run_with_a_clear_error(monkeypatch):
    from metatune.measure import runners

    monkeypatch.setattr(runners, "tracker_status", lambda addr: {})
    monkeypatch.setattr(runners, "QUEUE_WAIT_S", 0.1)
    runner = runners.retrying_rpc_runner(_FlakyRunner(0), parse_rpc_url("rpc://127.0.0.1:9190/cpu"), 1, True)
    with pytest.raises(MetatuneError, match="no RPC server left under rpc://127.0.0.1:9190/cpu"):
        runner.run([])


# -- a real tracker and servers on loopback -----------------------------------------------------


def start(args: list[str], log: Path) -> subprocess.Popen:
    """In a new process group: TVM's listener is a child process that must die with it. Without the
    TVM_NUM_THREADS an earlier Measurer of this process set: a server chooses its threads itself."""
    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    with open(log, "ab") as f:
        return subprocess.Popen([sys.executable, "-m", *args], stdout=f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def start_server(kind: str, tracker: TrackerAddress, key: str, log: Path) -> subprocess.Popen:
    port = free_port()
    module = "metatune.measure.rpc_server" if kind == "metatune" else "tvm.exec.rpc_server"
    return start([module, "--tracker", str(tracker), "--key", key, "--host", "127.0.0.1",
                  "--port", str(port), "--port-end", str(port + 1)], log)


def wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def servers_under(tracker: TrackerAddress, key: str) -> int:
    from metatune.measure.runners import tracker_status

    status = tracker_status(tracker).get(key)
    return len(status.servers) if status else 0


def free_under(tracker: TrackerAddress, key: str) -> int:
    """Servers that can be handed out: a server registers (UPDATE_INFO) before it offers itself (PUT)."""
    from metatune.measure.runners import tracker_status

    status = tracker_status(tracker).get(key)
    return status.free if status else 0


@pytest.fixture
def cluster(tmp_path):
    """A tracker and two servers under one key: a metatune.measure.rpc_server and a plain TVM one."""
    port = free_port()
    tracker = TrackerAddress("127.0.0.1", port)
    procs = [start(["tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port), "--port-end", str(port + 1)],
                   tmp_path / "tracker.log")]
    wait_for(lambda: _reachable(tracker), 30, "the tracker")
    logs = {"metatune": tmp_path / "server-metatune.log", "tvm": tmp_path / "server-tvm.log"}
    servers = {kind: start_server(kind, tracker, "loop", log) for kind, log in logs.items()}
    procs += servers.values()
    try:
        wait_for(lambda: free_under(tracker, "loop") == 2, 60, "both servers to register and be free")
        yield {"tracker": tracker, "key": "loop", "servers": servers, "logs": logs}
    finally:
        for proc in procs:
            stop(proc)


def _reachable(tracker: TrackerAddress) -> bool:
    from metatune.measure.runners import probe_tracker

    try:
        probe_tracker(tracker)
        return True
    except MetatuneError:
        return False


def test_rpc_status_and_remote_fingerprints(cluster, capsys):
    from metatune.cli.rpc import run_status, status_data
    from metatune.env.device import local_fingerprint

    data = status_data(str(cluster["tracker"]), probe=True)
    probe_warnings = capsys.readouterr().err
    key = data["keys"]["loop"]
    assert len(key["servers"]) == 2 and key["runner"] == f"rpc://{cluster['tracker']}/loop"
    sources = sorted(d["source"] for d in key["devices"])
    assert sources == ["TVM's LLVM host queries", "metatune.measure.rpc_server"]
    here = local_fingerprint()
    for d in key["devices"]:  # both ways of asking agree with what this (same) machine says
        fp = d["fingerprint"]
        assert fp["device_id"] == here.device_id and fp["target"] == here.target and fp["flags"] == list(here.flags)
    # the metatune server's kernels run on the cores its fingerprint reports, not on TVM's guess
    from metatune.env.device import usable_cores
    from metatune.measure.runners import parse_rpc_url, request_session, remote_fingerprint

    spec = parse_rpc_url(f"rpc://{cluster['tracker']}/loop")
    sessions = [request_session(spec, session_timeout_s=60, wait_s=30) for _ in range(2)]
    threads = {remote_fingerprint(sess)[1]: int(sess.get_function("runtime.NumThreads")()) for sess in sessions}
    sessions.clear()
    assert threads["metatune.measure.rpc_server"] == usable_cores(), threads
    plain_cores = next(d["fingerprint"]["num_cores"] for d in key["devices"] if d["source"] == "TVM's LLVM host queries")
    plain_guessed_wrong = threads["TVM's LLVM host queries"] != plain_cores  # 1 of 2 cores on some VMs
    assert ("a plain TVM RPC server times kernels on" in probe_warnings) == plain_guessed_wrong, probe_warnings
    wait_for(lambda: free_under(cluster["tracker"], "loop") == 2, 30, "both servers to be free again")
    run_status(str(cluster["tracker"]), as_json=False)
    text = capsys.readouterr().out
    assert "2 servers under 1 key" in text and "loop" in text
    run_status(str(cluster["tracker"]), as_json=True)
    assert json.loads(capsys.readouterr().out)["keys"]["loop"]["free"] == 2
    with pytest.raises(MetatuneError, match="no RPC server is registered under key 'nokey'.*keys with servers: loop"):
        make_runner(f"rpc://{cluster['tracker']}/nokey", None)
    # SIGTERM to the parent only (as a service manager sends it) also stops TVM's listener child.
    server = cluster["servers"]["metatune"]
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=10)
    wait_for(lambda: servers_under(cluster["tracker"], "loop") == 1, 20, "the listener child to go too")


def test_dataset_build_survives_a_server_killed_mid_run(cluster, tmp_path):
    spec, out, log = tmp_path / "spec.yaml", tmp_path / "ds", tmp_path / "sampled.jsonl"
    spec.write_text(SPEC)
    (tmp_path / "driver.py").write_text(DRIVER)
    url = f"rpc://{cluster['tracker']}/{cluster['key']}"
    start_s = time.monotonic()
    build = subprocess.Popen(
        [sys.executable, str(tmp_path / "driver.py"), str(log), "dataset", "build", "--spec", str(spec),
         "--out", str(out), "--runner", url, "--batch", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        # Once some records exist, kill the plain TVM server while it holds a measurement session.
        wait_for(lambda: _records_on_disk(out) >= 4, 150, "the first records")
        victim_log = cluster["logs"]["tvm"]
        base = victim_log.read_text().count("load_module")

        def in_session() -> bool:
            text = victim_log.read_text()
            return text.count("load_module") > base and text.count("connected from") > text.count("finish serving")

        try:
            wait_for(in_session, 30, "a measurement session on the victim")
            mid_session = True
        except AssertionError:
            mid_session = False  # kill it anyway: the run must go on either way
        stop(cluster["servers"]["tvm"])
        stdout, stderr = build.communicate(timeout=240)
    finally:
        if build.poll() is None:
            build.kill()
    wall = time.monotonic() - start_s
    assert build.returncode == 0, stderr[-2000:]
    assert servers_under(cluster["tracker"], cluster["key"]) == 1

    from metatune.dataset.card import read_card
    from metatune.dataset.store import DatasetStore
    from metatune.env.device import local_fingerprint

    sampled = collections.defaultdict(list)
    for line in log.read_text().splitlines():
        item = json.loads(line)
        sampled[item["workload"]].append(item["key"])
    stores = {s.workload.key: s for s in DatasetStore(out)}
    assert set(stores) == set(sampled) and len(stores) == 2
    for wkey, store in stores.items():
        recorded = store.num_records + len(store.failures)
        # Every candidate handed to the Measurer ended measured or recorded as failed, exactly once.
        assert len(sampled[wkey]) == recorded == len(set(sampled[wkey])), (wkey, len(sampled[wkey]), recorded)
        assert set(sampled[wkey]) == store.keys()
        assert store.num_records == 12 and store.sealed
        assert {f.kind for f in store.failures} <= {"run_error", "run_timeout", "build_error", "build_timeout", "wrong_result"}
    card = read_card(out)
    assert card["device"]["device_id"] == local_fingerprint().device_id
    # Queried from the servers: the metatune one knows the CPU model, so its answer was recorded.
    assert card["device"]["cpu_model"] == local_fingerprint().cpu_model
    lost = [f.message for s in stores.values() for f in s.failures if "RPC server lost" in f.message]
    print(f"\nbuild {wall:.0f} s; killed mid-session: {mid_session}; retry warning: "
          f"{'lost mid-session' in stderr}; failures after retry: {len(lost)}; {card['totals']}")


def _records_on_disk(out: Path) -> int:
    return sum(p.read_text().count("\n") for p in out.glob("workloads/*/*/database_tuning_record.json"))


def test_a_kernel_tuned_on_a_device_this_machine_cannot_run_is_checked_on_that_device(cluster, tmp_path, monkeypatch):
    """Where the servers' CPU has instructions this machine lacks (`verify_locally` False), the deployed
    kernel is checked against NumPy on a server, not here (where it would die on an illegal instruction)."""
    from metatune.measure import check, runners
    from metatune.tune import tuner
    from metatune.workload.operators import Workload

    real_runner, real_remote = runners.retrying_rpc_runner, check.check_schedule_remotely
    monkeypatch.setattr(runners, "retrying_rpc_runner",
                        lambda inner, spec, retries, verify_locally: real_runner(inner, spec, retries, False))

    def not_here(*args, **kwargs):
        raise AssertionError("checked on this machine")

    remote_checks = []

    def on_a_server(workload, sch, target, session, **kwargs):
        remote_checks.append(session)
        return real_remote(workload, sch, target, session, **kwargs)

    monkeypatch.setattr(tuner, "check_schedule", not_here)
    monkeypatch.setattr(check, "check_schedule_remotely", on_a_server)
    url = f"rpc://{cluster['tracker']}/{cluster['key']}"
    result = tuner.tune_workload(Workload.parse("dense:m=16,n=16,k=16"), 4, "random", tmp_path / "db", runner=url,
                                 trials_per_iter=4)
    assert result.verified and remote_checks and result.max_rel_error < 1e-4
