"""`python -m metatune.measure.rpc_server`: TVM's RPC server that can also say which device it runs on.

Same as `python -m tvm.exec.rpc_server`, except that:
* sessions answer `metatune.device_fingerprint` (this machine's fingerprint as JSON, exactly
  what `metatune device --json` prints here), so a tuner on another host compiles for this
  CPU and records it in the dataset card (a plain TVM server is read through LLVM's host
  queries instead, which lack the CPU model name);
* it binds 127.0.0.1 unless --host says otherwise (TVM's server executes whatever it is sent);
* kernels run on every core the fingerprint reports (TVM_NUM_THREADS, as a local Measurer sets
  it), not on TVM's own guess of the core count, which is 1 on some 2-vCPU VMs;
* stopping this process (SIGTERM, SIGINT, SIGHUP) also stops TVM's listener child process,
  which otherwise keeps the port and its tracker registration.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from typing import Any, Sequence

from metatune import MetatuneError
from metatune.env.device import local_fingerprint, usable_cores
from metatune.env.tvm_setup import use_threads
from metatune.measure.runners import KEY_RE, parse_tracker

FINGERPRINT_FUNC = "metatune.device_fingerprint"  # same name as metatune.measure.runners.FINGERPRINT_FUNC


def register_fingerprint() -> None:
    """Runs in TVM's listener process; the session processes it forks inherit the function."""
    import tvm_ffi

    text = json.dumps(local_fingerprint().to_json(), sort_keys=True)
    tvm_ffi.register_global_func(FINGERPRINT_FUNC, lambda: text, override=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m metatune.measure.rpc_server", description=__doc__.splitlines()[0])
    parser.add_argument("--tracker", required=True, help="HOST:PORT of the RPC tracker to register with")
    parser.add_argument("--key", required=True, help="device key: servers of one kind of device share a key")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=9090, help="first port to try")
    parser.add_argument("--port-end", type=int, default=9199, help="end of the port range to try (exclusive)")
    parser.add_argument("--custom-addr", default=None, help="address to report to the tracker, if not the one it sees")
    parser.add_argument("--silent", action="store_true", help="log errors only")
    return parser.parse_args(argv)


def _is_loopback(host: str) -> bool:
    import ipaddress
    import socket

    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    from tvm import rpc

    try:
        tracker = parse_tracker(args.tracker)
    except MetatuneError as err:
        sys.exit(f"error: {err}")
    if not KEY_RE.fullmatch(args.key):
        sys.exit(f"error: key {args.key!r} may only hold letters, digits, '.', '_' and '-'")
    logging.basicConfig(level=logging.ERROR if args.silent else logging.INFO)
    if args.host == "127.0.0.1" and not _is_loopback(tracker.host):
        print(f"warning: serving on 127.0.0.1, which a tuner on another host than this one cannot reach, while the "
              f"tracker is at {tracker.host}; pass --host with this machine's address if tuners elsewhere use it",
              file=sys.stderr)
    use_threads(usable_cores())  # inherited by TVM's listener process and the sessions it starts
    # Imported under its package name (not __main__) so the callback is pickled by reference, not by value.
    from metatune.measure.rpc_server import register_fingerprint as init

    server = rpc.Server(
        args.host, args.port, args.port_end, key=args.key, tracker_addr=(tracker.host, tracker.port),
        custom_addr=args.custom_addr, silent=args.silent, server_init_callback=init,
    )

    def stop(signum: int, _frame: Any) -> None:
        server.terminate()  # kills the listener and its session processes
        sys.exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    logging.getLogger("metatune.measure.rpc_server").info("serving key %s on %s:%d", args.key, args.host, server.port)
    server.proc.join()


if __name__ == "__main__":
    main()
