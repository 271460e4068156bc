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
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from wyoming.info import Info

from ..client import describe
from .process import status_kb

log = logging.getLogger(__name__)

IDLE_RE = re.compile(r"engine idle: (\d+)/(\d+) KV blocks free")
QUEUED_RE = re.compile(r"engine\.scheduler: request (\d+) queued")
ENDED_RE = re.compile(r"engine\.scheduler: request (\d+): ([a-z]+)")
TRACEBACK = "Traceback (most recent call last)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


class ServerProcess:
    """`wyoming-qwen3tts` on tcp://127.0.0.1:PORT, its stderr and stdout in `log_path`."""

    def __init__(self, argv: list[str], log_path: Path, port: int) -> None:
        self.argv, self.log_path, self.port = argv, log_path, port
        self.proc: subprocess.Popen | None = None
        self.engine_log = EngineLog(log_path)

    @staticmethod
    def command(model: Path, port: int, config: Path, data_dir: Path, extra: list[str]) -> list[str]:
        return [sys.executable, "-m", "wyoming_qwen3tts", "--model", str(model), "--uri", f"tcp://127.0.0.1:{port}",
                "--config", str(config), "--data-dir", str(data_dir), "--debug", *extra]

    def start(self) -> None:
        log.info("starting: %s", " ".join(self.argv))
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def describe(self, timeout: float = 5.0) -> Info | None:
        """The server's info, or None if it does not answer (yet)."""
        return await describe(self.port, timeout=timeout)

    async def wait_ready(self, timeout: float) -> list[str]:
        """The voice names, once the model is loaded and warmed up ("ready on" in the log)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"the server exited ({self.proc.returncode}); see {self.log_path}")
            if "ready on" in self.log_path.read_text("utf-8", "replace"):
                info = await self.describe()
                voices = [v.name for p in (info.tts if info else []) for v in p.voices]
                if voices:
                    return voices
            await asyncio.sleep(0.5)
        raise TimeoutError(f"the server was not ready within {timeout:.0f} s; see {self.log_path}")

    async def wait_idle(self, timeout: float, quiet_s: float = 1.0) -> bool:
        """Wait until the engine is idle and the log has been quiet for `quiet_s`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.engine_log.read()
            if self.engine_log.idle_now and time.monotonic() - self.engine_log.last_change >= quiet_s:
                return True
            await asyncio.sleep(0.2)
        return False

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout`; the exit code (None if killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.error("the server did not stop within %.0f s of SIGTERM; killing it", timeout)
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode
