"""How much of the CPU other processes took over an interval: a speed measured on a shared
machine (the bench's, `weights: auto`'s at a first start) is only as good as that share is
small. Linux's /proc/stat; elsewhere the shares read 0."""
from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path


def _machine_cpu_s() -> tuple[float, float]:
    """(CPU seconds every process on the machine has used, CPU seconds the hypervisor gave
    to other guests) since boot (0, 0 where /proc/stat is not)."""
    try:
        ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks[:8]
    hz = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / hz, steal / hz


def _own_busy_s() -> float:
    """CPU seconds of this process and its finished children."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


@dataclass
class Contention:
    """Others' use of the CPU since start(): other processes, and other virtual machines (steal)."""

    wall: float
    machine: tuple[float, float]  # _machine_cpu_s() at start
    own: float

    @classmethod
    def start(cls) -> Contention:
        return cls(time.monotonic(), _machine_cpu_s(), _own_busy_s())

    def shares(self) -> tuple[float, float]:
        """(other processes, stolen) as fractions of all cores' time since start()."""
        capacity = max(1e-9, (time.monotonic() - self.wall) * (os.cpu_count() or 1))
        busy, steal = _machine_cpu_s()
        other = (busy - self.machine[0]) - (_own_busy_s() - self.own)
        return max(0.0, other / capacity), (steal - self.machine[1]) / capacity
