"""The stop-on-signal rules of metatune/env/interrupt.py, in a fresh Python process (signal handlers
belong to its main thread) that signals itself."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from metatune.fileio import REPO_ROOT


def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          cwd=REPO_ROOT)


def test_a_signal_during_a_batch_stops_after_it_and_ends_the_children():
    out = python("""
        import os, signal, subprocess, sys, time
        from metatune.env.interrupt import Interrupted, stop_on_signals, uninterrupted
        try:
            with stop_on_signals():
                with uninterrupted():
                    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
                    blocked = int(open(f"/proc/{child.pid}/status").read().split("SigBlk:")[1].split()[0], 16)
                    print("child blocks SIGINT:", bool(blocked & (1 << (signal.SIGINT - 1))))
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(0.5)
                    os.kill(os.getpid(), signal.SIGTERM)  # a second signal changes nothing
                    time.sleep(0.5)
                    print("the batch went on")
                print("not reached")
        except Interrupted as stop:
            print("stopped after the batch:", stop)
            print("child ended:", child.poll() is not None)
        os.kill(os.getpid(), signal.SIGTERM)  # the handlers are gone: the default kills the process
        time.sleep(5)
        """)
    assert out.stdout.splitlines() == ["child blocks SIGINT: True", "the batch went on",
                                       "stopped after the batch: SIGINT", "child ended: True"], out.stderr
    assert out.stderr.count("SIGINT: stopping; the batch in flight ends first") == 1
    assert out.returncode == -15


def test_a_signal_between_batches_stops_at_once():
    out = python("""
        import os, signal, time
        from metatune.env.interrupt import Interrupted, stop_on_signals
        start = time.monotonic()
        try:
            with stop_on_signals():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(30)
        except Interrupted as stop:
            print(stop, round(time.monotonic() - start) < 5)
        """)
    assert out.stdout.split() == ["SIGINT", "True"], out.stderr
