"""The soaked server as a child process: start, wait until ready, sample its RSS and open
file descriptors from /proc, read what its log says about the engine, stop.

The KV pool is observed through the scheduler's debug line at idle
("engine idle: F/T KV blocks free"): the server runs with --debug and its stderr goes to a
file the soak reads.
"""
from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .process import ServerChild, status_kb
from .process import free_port as free_port  # soak.py takes it from here

log = logging.getLogger(__name__)

IDLE_RE = re.compile(r"engine idle: (\d+)/(\d+) KV blocks free")
QUEUED_RE = re.compile(r"engine\.scheduler: request (\d+) queued")
ENDED_RE = re.compile(r"engine\.scheduler: request (\d+): ([a-z]+)")
TRACEBACK = "Traceback (most recent call last)"
READY_MARK = "ready on"  # the server's log line once the model is loaded and warmed up


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the soak started
    phase: str
    rss_mb: float
    fds: int
    anon_mb: float = 0.0  # of rss_mb: anonymous memory (allocations, not mapped files)


def sample_process(pid: int, t: float, phase: str) -> Sample:
    """VmRSS (and its anonymous part) and the number of open file descriptors of `pid` now."""
    kb = status_kb(pid)
    return Sample(round(t, 2), phase, round(kb.get("VmRSS", 0) / 1024, 1), len(os.listdir(f"/proc/{pid}/fd")),
                  round(kb.get("RssAnon", 0) / 1024, 1))


@dataclass
class EngineLog:
    """What the server's log says about the engine, read incrementally from its file."""

    path: Path
    idle: list[tuple[int, int]] = field(default_factory=list)  # (free, total) at each idle moment
    queued: set[int] = field(default_factory=set)
    ended: dict[int, str] = field(default_factory=dict)  # request id -> reason
    tracebacks: int = 0
    errors: list[str] = field(default_factory=list)  # ERROR lines (first few)
    warnings: int = 0
    last_change: float = field(default_factory=time.monotonic)
    _offset: int = 0
    _idle_last: bool = False  # the last engine line read was an idle line

    def read(self) -> None:
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        cut = data.rfind(b"\n") + 1
        self._offset += cut
        lines = data[:cut].decode("utf-8", "replace").splitlines()
        if lines:
            self.last_change = time.monotonic()
        for line in lines:
            self._line(line)

    def _line(self, line: str) -> None:
        if m := IDLE_RE.search(line):
            self.idle.append((int(m[1]), int(m[2])))
            self._idle_last = True
        elif m := QUEUED_RE.search(line):
            self.queued.add(int(m[1]))
            self._idle_last = False
        elif m := ENDED_RE.search(line):
            self.ended[int(m[1])] = m[2]
            self._idle_last = False
        if TRACEBACK in line:
            self.tracebacks += 1
        if " ERROR " in line and len(self.errors) < 20:
            self.errors.append(line[:300])
        elif " WARNING " in line:
            self.warnings += 1

    @property
    def idle_now(self) -> bool:
        """Every queued request ended, and the engine said it is idle since."""
        return self._idle_last and self.queued <= set(self.ended)

    @property
    def leaks(self) -> list[tuple[int, int]]:
        """Idle moments with blocks missing."""
        return [(f, t) for f, t in self.idle if f != t]


class ServerProcess(ServerChild):
    """`wyoming-qwen3tts` on tcp://127.0.0.1:PORT, its stderr and stdout in `log_path`."""

    def __init__(self, argv: list[str], log_path: Path, port: int) -> None:
        super().__init__("wyoming-qwen3tts", argv, port, log_path)
        self.engine_log = EngineLog(log_path)

    @staticmethod
    def command(model: Path, port: int, config: Path, data_dir: Path, extra: list[str]) -> list[str]:
        return [sys.executable, "-m", "wyoming_qwen3tts", "--model", str(model), "--uri", f"tcp://127.0.0.1:{port}",
                "--config", str(config), "--data-dir", str(data_dir), "--debug", *extra]

    async def wait_ready(self, timeout: float) -> list[str]:  # type: ignore[override]
        """The voice names, once the model is loaded and warmed up ("ready on" in the log)."""
        info = await super().wait_ready(timeout, log_marker=READY_MARK)
        return [v.name for p in info.tts for v in p.voices]

    async def wait_idle(self, timeout: float, quiet_s: float = 1.0) -> bool:
        """Wait until the engine is idle and the log has been quiet for `quiet_s`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.engine_log.read()
            if self.engine_log.idle_now and time.monotonic() - self.engine_log.last_change >= quiet_s:
                return True
            await asyncio.sleep(0.2)
        return False
