"""`metatune measure` under Ctrl-C: a real process, real measurements."""

from __future__ import annotations

import signal

from tests.processes import group_members, start, stop, wait_for_output


def test_ctrl_c_ends_measure_and_its_workers():
    args = ["measure", "dense:m=16,n=32,k=24", "--random", "400", "--batch", "4"]
    proc = start(*args)
    wait_for_output(proc, "measure dense: 4/", timeout_s=240)  # the first batch is done
    stopped = stop(proc, signal.SIGINT, group=True)
    assert stopped.returncode == 130 and stopped.seconds < 90, stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert "to start over (nothing was saved), run the same command again: metatune " + " ".join(args) in stopped.stderr
    assert group_members(proc.pid) == [], "a worker process outlived the command"
