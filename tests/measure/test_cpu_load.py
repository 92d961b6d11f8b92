"""CPU time of other processes: what shows a load that slows every pass alike."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from metatune.measure.cpu_load import OtherLoad, process_cpu_s, process_tree


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_busy_loop_in_another_process_counts_as_other_load():
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        load = OtherLoad((os.getpid(),)).start()
        time.sleep(1.0)
        cores = load.cores()
    finally:
        hog.kill()
        hog.wait()
    assert cores > 0.5  # the loop had a core to itself for most of the second


def test_the_timed_processes_own_threads_do_not():
    load = OtherLoad((os.getpid(),)).start()
    worker = threading.Thread(target=spin, args=(1.0,))
    worker.start()
    spin(1.0)
    worker.join()
    assert load.cores() < 0.3  # two busy threads of this process, nothing else: kernel noise at most


def test_process_cpu_time_grows_with_work():
    before = process_cpu_s(os.getpid())
    spin(0.3)
    assert process_cpu_s(os.getpid()) - before > 0.2


def test_with_descendants_a_child_process_is_not_other_load_even_once_it_has_ended():
    """A tuner's builder and runner workers are its children: their CPU time is its own, also when
    a worker ends and is reaped between two readings."""
    load = OtherLoad((os.getpid(),), descendants=True).start()
    without = OtherLoad((os.getpid(),)).start()
    child = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 1.0\nwhile time.time() < end: pass"])
    child.wait()  # ended and reaped: its time moves to this process's children's time
    assert load.cores() < 0.3
    assert without.cores() > 0.5  # the same child, counted as another process without `descendants`


def test_process_tree_lists_children_of_children():
    child = subprocess.Popen([sys.executable, "-c",
                              "import subprocess, sys, time\n"
                              "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
                              "print(g.pid, flush=True)\ntime.sleep(30)"], stdout=subprocess.PIPE, text=True)
    grandchild = int(child.stdout.readline())
    try:
        tree = process_tree(os.getpid())
        assert tree[0] == os.getpid() and child.pid in tree and grandchild in tree
    finally:
        os.kill(grandchild, 9)
        child.kill()
        child.wait()


AFFINITY_SCRIPT = """
import os, subprocess, sys, time
from metatune.measure.cpu_load import OtherLoad

os.sched_setaffinity(0, {int(sys.argv[1])})
hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
os.sched_setaffinity(hog.pid, {int(sys.argv[2])})
try:
    load = OtherLoad((os.getpid(),)).start()
    time.sleep(1.0)
    print(load.cores())
finally:
    hog.kill()
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to run on")
def test_only_a_load_on_the_cpus_we_run_on_counts():
    """On a large machine shared with `taskset` or a cpuset, a busy CPU we do not run on slows nothing we time."""
    ours, other = sorted(os.sched_getaffinity(0))[:2]

    def cores_busy(hog_cpu: int) -> float:
        proc = subprocess.run([sys.executable, "-c", AFFINITY_SCRIPT, str(ours), str(hog_cpu)], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return float(proc.stdout)

    assert cores_busy(ours) > 0.6 and cores_busy(other) < 0.4


def test_busy_time_is_read_for_our_cpus_or_else_all(tmp_path, monkeypatch):
    """Our CPUs' lines of /proc/stat; where it does not list them by their numbers (LXCFS renumbers a
    container's CPUs from 0), the machine's line rather than nothing."""
    from metatune.measure import cpu_load

    stat = tmp_path / "stat"
    monkeypatch.setattr(cpu_load, "PROC", tmp_path)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {4, 5})
    tick = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal: busy = all but idle and iowait
    stat.write_text("cpu  60 0 30 900 9 0 0 6\ncpu4 10 0 5 100 1 0 0 1\ncpu5 20 0 5 100 1 0 0 2\n"
                    "cpu6 30 0 20 700 7 0 0 3\nintr 1 2 3\n")
    assert cpu_load.our_cpus_busy_s() == (16 + 27) / tick
    stat.write_text("cpu  60 0 30 900 9 0 0 6\ncpu0 10 0 5 100 1 0 0 1\ncpu1 50 0 25 800 8 0 0 5\nintr 1 2 3\n")
    assert cpu_load.our_cpus_busy_s() == 96 / tick
