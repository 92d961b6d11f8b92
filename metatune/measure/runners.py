"""Where candidates run: `local` (this machine) or a TVM RPC tracker (`rpc://HOST:PORT/KEY`).

With a tracker the builder stays local and compiles for the remote device; MetaSchedule's
`RPCRunner` uploads each artifact to whichever server registered under KEY is free and
times it there. Three things TVM's runner does not do are added here:
* the device fingerprint is asked from the servers, never assumed equal to this host's;
* a candidate whose server died mid-session is retried once on another server; if that
  fails too it comes back as an error result (a typed RUN_ERROR), so it is never lost;
* waits are bounded: TVM waits forever for a free server once every server is gone.
"""

from __future__ import annotations

import json
import math
import re
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlsplit

from metatune import MetatuneError
from metatune.env.device import (
    LLVM_TO_CPUINFO,
    DeviceFingerprint,
    fingerprint_for_target,
    fingerprint_from_flags,
    local_fingerprint,
    require_runnable,
)
from metatune.env.plugin import RUNNER, RUNNER_FUTURE, plugin_class
from metatune.env.target import parse_target
from metatune.measure import check as kernel_check
from metatune.measure.arguments import alloc_rpc

if TYPE_CHECKING:
    import tvm
    from tvm.rpc import RPCSession, TrackerSession
    from tvm.s_tir import Schedule

    from metatune.env.device import DeviceFingerprint
    from metatune.measure.measurer import MeasureSettings
    from metatune.workload.operators import Workload

RPC_URL_FORM = "rpc://HOST:PORT/KEY"
FINGERPRINT_FUNC = "metatune.device_fingerprint"  # registered by `python -m metatune.measure.rpc_server`
KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # the tracker splits "server:KEY" on ':'
CONNECT_TIMEOUT_S = 5.0  # TVM's own client retries a refused connection for 60 s
QUEUE_WAIT_S = 60.0  # longest wait for a server before a candidate counts as lost
UPLOAD_ALLOWANCE_S = 5  # session time beyond the run timeout: connect, upload, load, allocate
RETRIES = 1  # a candidate whose server was lost is tried once more
_TRACKER_MAGIC = 0x2F271  # tvm.rpc.base.RPC_TRACKER_MAGIC, without importing TVM
# Messages of an RPCRunner result whose server went away (connection closed mid-session,
# refused, or no server left to hand out), as opposed to a candidate that failed on its own.
_LOST_MARKERS = (
    "RPCCode::kReturn", "kShutdown", "Connection refused", "Connection reset", "Broken pipe",
    "Cannot request", "Socket closed", "connection closed",
)


class RunnerSpecError(MetatuneError):
    """A `--runner` value that cannot be used."""


@dataclass(frozen=True)
class TrackerAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class RpcSpec:
    """A parsed `rpc://HOST:PORT/KEY`."""

    tracker: TrackerAddress
    key: str

    def __str__(self) -> str:
        return f"rpc://{self.tracker}/{self.key}"


@dataclass
class KeyStatus:
    """The servers the tracker knows under one key."""

    key: str
    servers: list[str] = field(default_factory=list)
    free: int = 0
    pending: int = 0


# -- parsing -----------------------------------------------------------------------------------


def _host_port(netloc: str, what: str) -> TrackerAddress:
    parts = urlsplit(f"//{netloc}")
    try:
        port = parts.port
    except ValueError:
        raise RunnerSpecError(f"{what}: the port must be a number in 1-65535") from None
    if parts.username is not None or parts.password is not None:
        raise RunnerSpecError(f"{what}: no user or password is allowed before the host")
    if not parts.hostname:
        raise RunnerSpecError(f"{what}: missing tracker host (e.g. 127.0.0.1:9190)")
    if port is None:
        raise RunnerSpecError(f"{what}: missing tracker port (TVM's tracker listens on 9190 by default)")
    if not 1 <= port <= 65535:
        raise RunnerSpecError(f"{what}: the port must be a number in 1-65535")
    return TrackerAddress(parts.hostname, port)


def parse_tracker(text: str) -> TrackerAddress:
    """`HOST:PORT` of a tracker (IPv6 as `[::1]:9190`)."""
    if not text or "/" in text:
        raise RunnerSpecError(f"tracker {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9190")
    return _host_port(text, f"tracker {text!r}")


def parse_rpc_url(url: str) -> RpcSpec:
    """`rpc://HOST:PORT/KEY`, validated; every error is one line naming what is wrong."""
    what = f"runner {url!r}"
    parts = urlsplit(url)
    if parts.scheme != "rpc" or not url.startswith("rpc://"):
        raise RunnerSpecError(f"{what}: expected 'local' or {RPC_URL_FORM}")
    if parts.query or parts.fragment or url.rstrip("/").endswith(("?", "#")):
        raise RunnerSpecError(f"{what}: unexpected '?' or '#' part; expected {RPC_URL_FORM}")
    tracker = _host_port(parts.netloc, what)
    key = parts.path[1:] if parts.path.startswith("/") else parts.path
    key = key[:-1] if key.endswith("/") else key  # one trailing slash is harmless
    if not key:
        raise RunnerSpecError(f"{what}: missing device key; expected {RPC_URL_FORM}")
    if not KEY_RE.fullmatch(key):
        raise RunnerSpecError(f"{what}: device key {key!r} may only hold letters, digits, '.', '_' and '-'")
    return RpcSpec(tracker, key)


# -- tracker -----------------------------------------------------------------------------------


def probe_tracker(addr: TrackerAddress) -> None:
    """Fail in seconds, with a clear message, if nothing answers like a tracker at `addr` (`tune` and
    `bench` ask it while checking their request, before anything is measured)."""
    try:
        with socket.create_connection((addr.host, addr.port), timeout=CONNECT_TIMEOUT_S) as sock:
            sock.sendall(struct.pack("<i", _TRACKER_MAGIC))
            reply = sock.recv(4)
    except OSError as err:
        raise MetatuneError(
            f"cannot reach the RPC tracker at {addr}: {err.strerror or err}; start one with "
            f"'python -m tvm.exec.rpc_tracker --host {addr.host} --port {addr.port}'"
        ) from None
    if len(reply) != 4 or struct.unpack("<i", reply)[0] != _TRACKER_MAGIC:
        raise MetatuneError(f"{addr} answers, but not as a TVM RPC tracker")


def connect_tracker(addr: TrackerAddress) -> "TrackerSession":
    from tvm import rpc

    probe_tracker(addr)
    try:
        return rpc.connect_tracker(addr.host, addr.port)
    except (OSError, RuntimeError) as err:
        raise MetatuneError(f"RPC tracker at {addr}: {_last_line(str(err))}") from None


def tracker_status(addr: TrackerAddress) -> dict[str, KeyStatus]:
    """Servers per key, from the tracker's summary; keys with neither servers nor waiting requests are left out."""
    tracker = connect_tracker(addr)
    try:
        summary = tracker.summary()
    finally:
        tracker.close()
    keys: dict[str, KeyStatus] = {}
    for server in summary.get("server_info", []):
        kind, _, key = str(server.get("key", "")).partition(":")
        if kind == "server" and key:
            host, port = server.get("addr", ["?", "?"])
            keys.setdefault(key, KeyStatus(key)).servers.append(str(TrackerAddress(str(host), port)))
    for key, queue in summary.get("queue_info", {}).items():
        if key in keys or queue.get("pending", 0):
            status = keys.setdefault(key, KeyStatus(key))
            status.free, status.pending = int(queue.get("free", 0)), int(queue.get("pending", 0))
    for status in keys.values():
        status.servers.sort()
    return dict(sorted(keys.items()))


def request_session(spec: RpcSpec, session_timeout_s: int, wait_s: float = QUEUE_WAIT_S) -> "RPCSession":
    """A session on a free server under the key; waits at most `wait_s` (TVM alone waits forever)."""
    last = ""
    for _ in range(3):  # a server that died after the tracker handed it out: ask again
        tracker = connect_tracker(spec.tracker)
        # Closing our tracker connection withdraws the request, so a timeout leaves nothing behind.
        tracker._sock.settimeout(wait_s)  # pylint: disable=protected-access
        try:
            return tracker.request(spec.key, session_timeout=session_timeout_s, max_retry=1)
        except RuntimeError as err:
            last = _last_line(str(err))
            if "timed out" in last:
                break
        finally:
            tracker.close()
    raise MetatuneError(f"no server under key {spec.key!r} at {spec.tracker} answered within {wait_s:.0f} s ({last})")


# -- remote fingerprint --------------------------------------------------------------------------


def remote_fingerprint(sess: "RPCSession") -> tuple["DeviceFingerprint | None", str]:
    """The fingerprint of the device behind a session, and how it was obtained.

    A `metatune.measure.rpc_server` answers with the same fingerprint `metatune device` shows there.
    A plain `tvm.exec.rpc_server` (full TVM with LLVM) still answers LLVM's host queries:
    CPU features, name, triple and core count; only the marketing model name is missing.
    A runtime-only server answers neither: (None, "unknown").
    """

    try:
        text = str(sess.get_function(FINGERPRINT_FUNC)())
        return DeviceFingerprint.from_json(json.loads(text)), "metatune.measure.rpc_server"
    except Exception:  # pylint: disable=broad-except  # no such function on a plain TVM server
        pass
    try:
        return _fingerprint_from_llvm(sess), "TVM's LLVM host queries"
    except Exception:  # pylint: disable=broad-except  # a runtime-only server
        return None, "unknown"


def _fingerprint_from_llvm(sess: "RPCSession") -> "DeviceFingerprint":
    import tvm

    get = sess.get_function
    # The feature map is a remote object: serialise it there, rebuild it here.
    graph = str(get("ffi.ToJSONGraphString")(get("tvm.codegen.llvm.GetHostCPUFeatures")(), None))
    features = {str(k) for k, v in tvm.get_global_func("ffi.FromJSONGraphString")(graph).items() if bool(v)}
    arch = str(get("tvm.codegen.llvm.GetProcessTriple")()).split("-")[0]
    flags = {LLVM_TO_CPUINFO.get(f, f) for f in features}
    if arch == "aarch64" and "neon" in features:
        flags.add("asimd")
    vendor = "unknown"
    if arch in ("x86_64", "amd64"):
        vendor = {"intel": "GenuineIntel", "amd": "AuthenticAMD"}.get(
            str(get("target.llvm_get_system_x86_vendor")()), "unknown"
        )
    cores = int(get("s_tir.meta_schedule.cpu_count")(True))
    threads = int(get("runtime.NumThreads")())
    if threads != cores:
        _warn(f"a plain TVM RPC server times kernels on {threads} threads of its {cores} cores (TVM's own guess): "
              f"start it with TVM_NUM_THREADS={cores}, or use python -m metatune.measure.rpc_server, which does")
    return fingerprint_from_flags(
        arch=arch,
        vendor=vendor,
        cpu_model="unknown (plain TVM RPC server)",
        flags=flags,
        num_cores=cores,
        llvm_host_cpu=str(get("tvm.codegen.llvm.GetHostCPUName")()),
    )


def query_fingerprints(spec: RpcSpec, count: int) -> list[tuple["DeviceFingerprint | None", str]]:
    """Fingerprints of up to `count` distinct servers: sessions are held until all were asked."""
    sessions, found = [], []
    try:
        for i in range(count):
            try:
                sess = request_session(spec, session_timeout_s=60, wait_s=QUEUE_WAIT_S if i == 0 else 10.0)
            except MetatuneError:
                if i == 0:
                    raise
                break  # the others are busy (another client) or gone: go with the answers we have
            sessions.append(sess)
            found.append(remote_fingerprint(sess))
    finally:
        sessions.clear()  # dropping a session ends it; the server registers as free again
    return found


def agreed_fingerprint(spec: RpcSpec, count: int) -> "DeviceFingerprint":
    """The one device class behind a key; a warned assumption only when no server can say."""

    answers = query_fingerprints(spec, count)
    known = [fp for fp, _ in answers if fp is not None]
    ids = sorted({fp.device_id for fp in known})
    if len(ids) > 1:
        raise MetatuneError(
            f"servers under key {spec.key!r} are different devices ({', '.join(ids)}); "
            "register each kind of device under its own key"
        )
    if known:
        # Prefer the most complete answer (metatune.measure.rpc_server knows the CPU model).
        return next((fp for fp, how in answers if fp is not None and how == "metatune.measure.rpc_server"), known[0])
    host = local_fingerprint()
    _warn(
        f"the remote fingerprint is unknown: servers under {spec} answer neither {FINGERPRINT_FUNC} "
        f"nor TVM's LLVM queries; assuming they equal this host ({host.device_id}, target {host.target})"
    )
    return host


# -- the runner ----------------------------------------------------------------------------------


def make_runner(spec: str, settings: "MeasureSettings", target: str | None = None) -> tuple[Any, "DeviceFingerprint"]:
    """The runner for `spec` (None means the Measurer's local runner) and its device's fingerprint.

    `target` (a `--target` text) compiles for that target instead of the device's own; measuring
    locally on a target this machine cannot run is refused here, before anything is built."""

    if spec == "local":
        device = fingerprint_for_target(target)
        require_runnable(device)
        return None, device
    if spec.startswith("rpc:"):
        kind = parse_target(target).kind.name if target is not None else "llvm"
        if kind != "llvm":
            where = ": run metatune on the GPU's own machine with this --target" if kind == "cuda" else ""
            raise MetatuneError(f"target {target!r} runs on {kind}; over RPC metatune times CPU (llvm) kernels "
                                f"only{where}")
        runner, device = make_rpc_runner(parse_rpc_url(spec), settings)
        if target is not None:
            remote = device
            device = fingerprint_for_target(target, host=remote)
            require_runnable(device, host=remote)
        return runner, device
    raise RunnerSpecError(f"unknown runner {spec!r}: expected 'local' or {RPC_URL_FORM}")


def make_rpc_runner(spec: RpcSpec, settings: "MeasureSettings") -> tuple[Any, "DeviceFingerprint"]:
    """MetaSchedule's RPCRunner on the servers under the key, one connection per server."""
    from tvm.s_tir.meta_schedule.runner import RPCConfig, RPCRunner
    from tvm.support.popen_pool import PopenPoolExecutor

    status = tracker_status(spec.tracker)
    servers = status[spec.key].servers if spec.key in status else []
    if not servers:
        others = ", ".join(k for k, s in status.items() if s.servers) or "none"
        raise MetatuneError(
            f"no RPC server is registered under key {spec.key!r} at {spec.tracker} (keys with servers: {others}); "
            f"start one with 'python -m metatune.measure.rpc_server --tracker {spec.tracker} --key {spec.key}'"
        )
    # Ask every free server (at least one, waiting for it if all are busy).
    fingerprint = agreed_fingerprint(spec, max(1, min(len(servers), status[spec.key].free)))
    host = local_fingerprint()
    if fingerprint.arch != host.arch:
        raise MetatuneError(
            f"servers under {spec} are {fingerprint.arch}, this host is {host.arch}: "
            "cross-compiling for another architecture is not supported"
        )
    missing = sorted(set(fingerprint.flags) - set(host.flags))
    if missing and settings.verify:
        _warn(
            f"the remote device has ISA features this host lacks ({', '.join(missing)}): "
            "candidates are timed without checking them against NumPy here first"
        )
    session_timeout = math.ceil(settings.run_timeout_s) + UPLOAD_ALLOWANCE_S
    workers = len(servers)
    rpc_runner = RPCRunner(
        RPCConfig(spec.tracker.host, spec.tracker.port, spec.key, session_timeout_sec=session_timeout),
        evaluator_config=settings.evaluator_config(),
        max_workers=workers,
        f_alloc_argument=alloc_rpc,
    )
    # RPCRunner's pool has no time limit: once every server is gone its workers wait forever. Its
    # own pool (started by its sanity check) is ended here, not left to a garbage collection.
    rpc_runner.pool.shutdown()
    rpc_runner.pool = PopenPoolExecutor(max_workers=workers, timeout=session_timeout + QUEUE_WAIT_S)
    return retrying_rpc_runner(rpc_runner, spec, RETRIES, verify_locally=not missing), fingerprint


def retrying_rpc_runner(inner: Any, spec: RpcSpec, retries: int, verify_locally: bool) -> Any:
    """A MetaSchedule runner that retries the candidates of a lost server on `inner` (an RPCRunner)."""
    import tvm_ffi

    # run() and result() are called through TVM's C++ side: keep our errors' type across it,
    # so that the CLI still prints them as one line.
    tvm_ffi.register_error("MetatuneError", MetatuneError)
    return plugin_class(RUNNER, _RetryingRPCRunnerLogic, "RetryingRPCRunner")(inner, spec, retries, verify_locally)


def server_lost(error_msg: str | None) -> bool:
    """Did this RPCRunner result fail because its server went away (not because of the candidate)?"""
    if not error_msg or "RPCSessionTimeoutError" in error_msg:
        return False  # the server itself stopped a slow candidate
    if error_msg.startswith("RPCRunner: Timeout"):
        return True  # our client-side limit, beyond the session timeout: the server hung or vanished
    return error_msg.startswith("RPCRunner: An exception occurred") and any(m in error_msg for m in _LOST_MARKERS)


class _RetryingRPCRunnerLogic:
    """RPCRunner whose candidates survive a server that dies: retried, else an error result.

    A MetaSchedule `Runner`, so `ms.tune_*` accept it as well as `Measurer`.
    """

    def __init__(self, inner: Any, spec: RpcSpec, retries: int, verify_locally: bool) -> None:
        self.inner, self.spec, self.retries = inner, spec, retries
        self.verify_locally = verify_locally  # read by Measurer: False if the host cannot run remote code
        self.retried = 0
        self.lost = 0

    @property
    def pool(self) -> Any:
        """The RPCRunner's worker pool, which `Measurer.close` shuts down."""
        return self.inner.pool

    def run(self, runner_inputs: list) -> list:
        self.wait_for_server()
        futures = self.inner.run(runner_inputs)
        future = plugin_class(RUNNER_FUTURE, _RetryFutureLogic, "RetryFuture")
        return [future(self, inp, fut) for inp, fut in zip(runner_inputs, futures)]

    def wait_for_server(self) -> None:
        """Return once a server is registered under the key; give up after QUEUE_WAIT_S."""
        deadline = time.monotonic() + QUEUE_WAIT_S
        while True:
            status = tracker_status(self.spec.tracker).get(self.spec.key)
            if status is not None and status.servers:
                return
            if time.monotonic() > deadline:
                raise MetatuneError(
                    f"no RPC server left under {self.spec} for {QUEUE_WAIT_S:.0f} s; start servers and "
                    "run the same command again (a dataset build resumes where it stopped)"
                )
            time.sleep(2.0)

    def settle(self, runner_input: Any, result: Any) -> Any:
        from tvm.s_tir.meta_schedule.runner import RunnerResult

        tries = 0
        while server_lost(result.error_msg) and tries < self.retries:
            if not self.retried:
                _warn(f"an RPC server under {self.spec} was lost mid-session; retrying its candidates once")
            tries += 1
            self.retried += 1
            self.wait_for_server()
            result = self.inner.run([runner_input])[0].result()
        if not server_lost(result.error_msg):
            return result
        self.lost += 1
        # No "Timeout" in the message: Measurer types this as RUN_ERROR, the server's fault.
        tail = _last_line(result.error_msg).replace("Timeout", "time limit")
        return RunnerResult(None, f"RPCRunner: RPC server lost (tried {tries + 1}x): {tail}")

class _RetryFutureLogic:
    """A candidate's result, settled once: a lost server's candidate is retried before it is final."""

    def __init__(self, owner: Any, runner_input: Any, first: Any) -> None:
        self.owner, self.runner_input, self.first = owner, runner_input, first
        self.settled = None

    def done(self) -> bool:
        return self.settled is not None or self.first.done()

    def result(self) -> Any:
        if self.settled is None:
            self.settled = self.owner.settle(self.runner_input, self.first.result())
        return self.settled



def _last_line(message: str | None) -> str:
    lines = [line.strip() for line in (message or "").strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


# -- checking kernels on the remote device ---------------------------------------------------------

CHECK_SESSION_S = 60  # a check: upload one kernel, run it once on random inputs


def remote_check(spec: RpcSpec) -> Callable[["Workload", "Schedule", "tvm.target.Target"], float]:
    """`check_schedule` that runs each kernel on a server under the key (a session per check): where the
    servers' CPU has instructions this machine lacks (`verify_locally` False), so a kernel tuned there
    is still checked against NumPy on the device it was timed on."""
    def check_on_a_server(workload: "Workload", sch: "Schedule", target: "tvm.target.Target") -> float:
        return kernel_check.check_schedule_remotely(workload, sch, target, request_session(spec, CHECK_SESSION_S))

    return check_on_a_server
