"""CPU time of other processes: what shows a load that slows every pass alike."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from metatune.measure.cpu_load import OtherLoad, process_cpu_s


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
