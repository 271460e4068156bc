"""Engine metrics: what the scheduler exposes to logs, the server and the benchmark."""
from __future__ import annotations

import collections
import time
from dataclasses import dataclass

import numpy as np

from .step import StepTimes
from .stream import StreamResult

WINDOW_S = 10.0  # frames/s is measured over this much recent time
RECENT = 100  # time-to-first-audio statistics over this many recent requests


@dataclass(frozen=True)
class EngineMetrics:
    queue_depth: int  # requests waiting for admission
    active: int  # sequences being generated
    blocks_used: int
    blocks_free: int
    blocks_total: int
    frames_per_s: float  # frames of every sequence per second of step time (busy time), last WINDOW_S
    step_ms: float  # median step time, last WINDOW_S (0 when idle that long)
    frames_total: int
    requests_done: int
    ttfa_p50_s: float | None  # time to first audio, recent requests
    ttfa_p90_s: float | None
    ends: dict[str, int]  # how requests ended: eos, length, timeout, aborted, error
    times: StepTimes  # inference per graph and host time, summed over every step so far


class MetricsWindow:
    """Rolling counters, fed by the engine thread."""

    def __init__(self) -> None:
        self._steps: collections.deque[tuple[float, int, float]] = collections.deque()  # (time, frames, seconds)
        self._ttfa: collections.deque[float] = collections.deque(maxlen=RECENT)
        self.frames_total = 0
        self.requests_done = 0
        self.ends: collections.Counter[str] = collections.Counter()

    def add(self, now: float, frames: int, seconds: float) -> None:
        self._steps.append((now, frames, seconds))
        self.frames_total += frames
        self._evict(now)

    def _evict(self, now: float) -> None:
        while self._steps and self._steps[0][0] < now - WINDOW_S:
            self._steps.popleft()

    def finished(self, result: StreamResult) -> None:
        self.requests_done += 1
        self.ends[result.reason.split(":")[0]] += 1
        if result.ttfa_s is not None:
            self._ttfa.append(result.ttfa_s)

    def snapshot(self, times: StepTimes, **state: int) -> EngineMetrics:
        self._evict(time.monotonic())
        busy = sum(s for _, _, s in self._steps)
        frames = sum(f for _, f, _ in self._steps)
        ttfa = np.array(self._ttfa) if self._ttfa else None
        return EngineMetrics(
            frames_per_s=frames / busy if busy > 0 else 0.0,
            step_ms=float(np.median([s for _, _, s in self._steps]) * 1e3) if self._steps else 0.0,
            frames_total=self.frames_total, requests_done=self.requests_done,
            ttfa_p50_s=None if ttfa is None else float(np.percentile(ttfa, 50)),
            ttfa_p90_s=None if ttfa is None else float(np.percentile(ttfa, 90)),
            ends=dict(self.ends), times=times, **state)
