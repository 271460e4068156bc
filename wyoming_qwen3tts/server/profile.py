"""Where a request's first audio comes from: the time of each step from the request's arrival
to its first audio-chunk written, so that the server path can be compared with the engine's
own first audio (docs/BENCHMARKS.md). One debug line per request; with `server.profile`
(`--profile`) the line is logged at info and the server logs the medians when it stops.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

# The steps in the order they happen: the text normalised and split (first sentence queued),
# the model ready and the voice resolved, the first sentence submitted (prompt built), the
# engine's admission (prompt embedded, KV blocks reserved) and first PCM, the event loop
# receiving that PCM, and the first audio-chunk written to the client.
STEPS = ("text", "ready", "submitted", "admitted", "first_pcm", "received", "written")


@dataclass
class FirstAudio:
    """time.monotonic() of each step of one request, from its arrival."""

    arrival: float = field(default_factory=time.monotonic)
    times: dict[str, float] = field(default_factory=dict)

    def mark(self, step: str, when: float | None = None) -> None:
        """The step's time (now unless given); only the first mark of a step counts."""
        if step not in STEPS:
            raise ValueError(f"unknown step {step!r}")
        self.times.setdefault(step, time.monotonic() if when is None else when)

    def since_arrival_ms(self) -> dict[str, float]:
        return {step: (self.times[step] - self.arrival) * 1e3 for step in STEPS if step in self.times}

    def line(self) -> str:
        """'first audio after 183.2 ms: text 0.2, ready 0.3, ..., written 183.2 (ms from arrival)'."""
        ms = self.since_arrival_ms()
        total = ms.get("written")
        head = "no audio" if total is None else f"first audio after {total:.1f} ms"
        return f"{head}: " + ", ".join(f"{step} {t:.1f}" for step, t in ms.items()) + " (ms from arrival)"


@dataclass
class Profile:
    """Every request's FirstAudio, for the summary at shutdown (server.profile)."""

    enabled: bool = False
    requests: list[FirstAudio] = field(default_factory=list)
    limit: int = 100_000  # kept records; a server that runs for months keeps the newest ones

    def add(self, first: FirstAudio) -> None:
        if self.enabled and "written" in first.times:
            self.requests.append(first)
            del self.requests[:-self.limit]

    def summary(self) -> str:
        """Median and 95th percentile of each step, in ms from arrival, over the requests."""
        if not self.requests:
            return "profile: no request got audio"
        rows = [r.since_arrival_ms() for r in self.requests]
        parts = []
        for step in STEPS:
            values = [row[step] for row in rows if step in row]
            if values:
                parts.append(f"{step} {np.median(values):.1f}/{np.percentile(values, 95):.1f}")
        return (f"profile of {len(rows)} requests, ms from arrival to each step (median/p95): "
                + ", ".join(parts))
