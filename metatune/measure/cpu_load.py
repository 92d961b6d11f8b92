"""CPU time taken by other processes while something is timed, read from Linux's /proc.

A load that lasts through every pass of a timing slows all passes alike, so no spread between
passes shows it. What does show it is the busy CPU time of the CPUs we run on (including time the
hypervisor gave to other guests: steal) beyond what the timed processes used themselves.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
DISTURBING_CORES = 0.5  # other processes' average busy cores over a timed batch that make it disturbed
BUSY_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
NOT_BUSY = ("idle", "iowait")


def our_cpus_busy_s() -> float:
    """Seconds of CPU time the CPUs this process may run on (its affinity, which the processes it
    starts inherit) spent busy since boot, steal included (lost to other guests). A load on other
    CPUs of a large machine (`taskset`, a container's cpuset) does not slow what we time. Where
    /proc/stat does not list our CPUs by their numbers (LXCFS renumbers them from 0), all its CPUs."""
    lines = PROC.joinpath("stat").read_text().splitlines()
    per_cpu = {}
    for line in lines[1:]:
        name, *values = line.split()
        if not name.startswith("cpu"):
            break  # the per-CPU lines come first
        per_cpu[name] = _busy_ticks(values)
    ours = {f"cpu{n}" for n in os.sched_getaffinity(0)}
    busy = sum(per_cpu[name] for name in ours) if ours <= per_cpu.keys() else _busy_ticks(lines[0].split()[1:])
    return busy / os.sysconf("SC_CLK_TCK")


def _busy_ticks(values: list[str]) -> int:
    return sum(int(v) for field, v in zip(BUSY_FIELDS, values) if field not in NOT_BUSY)


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after "pid (comm) " (comm may hold spaces): state, ppid, ..."""
    text = PROC.joinpath(str(pid), "stat").read_text()
    return text[text.rindex(")") + 2:].split()


def process_cpu_s(pid: int, *, reaped_children: bool = False) -> float:
    """User + system seconds of every thread of process `pid` so far; with `reaped_children`, also
    those of its children that have ended and been waited for (the kernel adds them to the parent)."""
    fields = _stat_fields(pid)
    ticks = int(fields[11]) + int(fields[12])
    if reaped_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def process_tree(root: int) -> list[int]:
    """`root` and its live descendants, from the parent links in /proc."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                children.setdefault(int(_stat_fields(int(entry.name))[1]), []).append(int(entry.name))
            except (OSError, ValueError, IndexError):  # ended while listed
                continue
    tree = [root]
    for pid in tree:  # grows while walked: breadth first
        tree.extend(children.get(pid, ()))
    return tree


def tree_cpu_s(root: int) -> float:
    """CPU seconds of `root` and everything it started: live descendants, and the ended ones their
    parents have reaped. A worker pool that starts and ends processes between two readings is
    counted whole, so the difference of two readings is the tree's CPU time in between."""
    total = 0.0
    for pid in process_tree(root):
        try:
            total += process_cpu_s(pid, reaped_children=True)
        except (OSError, ValueError, IndexError):  # ended since listed: its parent reaps it later
            continue
    return total


@dataclass
class OtherLoad:
    """Cores that processes other than `pids` (with `descendants`: nor what they started) kept busy
    between `start()` and `cores()`."""

    pids: tuple[int, ...]
    descendants: bool = False

    def start(self) -> "OtherLoad":
        self._wall, self._busy, self._own = time.perf_counter(), our_cpus_busy_s(), self._own_s()
        return self

    def cores(self) -> float:
        wall = time.perf_counter() - self._wall
        other = (our_cpus_busy_s() - self._busy) - (self._own_s() - self._own)
        return max(other, 0.0) / max(wall, 1e-9)

    def _own_s(self) -> float:
        if self.descendants:
            return sum(tree_cpu_s(pid) for pid in self.pids)
        return sum(process_cpu_s(pid) for pid in self.pids)
