"""CPU time taken by other processes while something is timed, read from Linux's /proc.

A load that lasts through every pass of a timing slows all passes alike, so no spread between
passes shows it. What does show it is the machine's busy CPU time (including time the hypervisor
gave to other guests: steal) beyond what the timed processes used themselves.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
BUSY_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
NOT_BUSY = ("idle", "iowait")


def machine_busy_s() -> float:
    """Seconds of CPU time all CPUs spent busy since boot (steal included: lost to other guests)."""
    values = PROC.joinpath("stat").read_text().split("\n", 1)[0].split()[1:1 + len(BUSY_FIELDS)]
    busy = sum(int(v) for name, v in zip(BUSY_FIELDS, values) if name not in NOT_BUSY)
    return busy / os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system seconds of every thread of process `pid` so far."""
    text = PROC.joinpath(str(pid), "stat").read_text()
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "; comm may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class OtherLoad:
    """Cores that processes other than `pids` kept busy between `start()` and `cores()`."""

    pids: tuple[int, ...]

    def start(self) -> "OtherLoad":
        self._wall, self._busy, self._own = time.perf_counter(), machine_busy_s(), self._own_s()
        return self

    def cores(self) -> float:
        wall = time.perf_counter() - self._wall
        other = (machine_busy_s() - self._busy) - (self._own_s() - self._own)
        return max(other, 0.0) / max(wall, 1e-9)

    def _own_s(self) -> float:
        return sum(process_cpu_s(pid) for pid in self.pids)
