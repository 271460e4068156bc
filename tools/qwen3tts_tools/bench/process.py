"""Each benchmarked implementation runs in a fresh child process: its peak RSS is its own,
and torch's and OpenVINO's thread pools never share (or warm) one process. Servers under test
(ours, piper) run as child processes too (`ServerChild`), and timed runs take the machine's
CPU lock (`cpu_lock`)."""
from __future__ import annotations

import asyncio
import fcntl
import logging
import multiprocessing
import os
import resource
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from wyoming.info import Info

from wyoming_qwen3tts.client import describe

T = TypeVar("T")

log = logging.getLogger(__name__)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


OUR_LOGGERS = ("wyoming_qwen3tts", "qwen3tts_tools", "qwen3tts-bench")


def setup_logging(level: int) -> None:
    """Our loggers at `level`; the libraries' (transformers, qwen_tts, nncf) at warnings only."""
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    for name in OUR_LOGGERS:
        logging.getLogger(name).setLevel(level)


def run_isolated(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """fn(*args, **kwargs) in a new (spawned) process; its exceptions re-raise here."""
    context = multiprocessing.get_context("spawn")
    level = logging.getLogger(OUR_LOGGERS[0]).getEffectiveLevel()
    with ProcessPoolExecutor(1, mp_context=context, initializer=setup_logging, initargs=(level,)) as pool:
        return pool.submit(fn, *args, **kwargs).result()


def rss_mb() -> float:
    """Resident set size of this process now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def status_kb(pid: int | str = "self") -> dict[str, int]:
    """The fields of /proc/PID/status counted in kB (VmRSS, RssAnon, RssFile, ...)."""
    fields = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            if value.strip().endswith(" kB"):
                fields[key] = int(value.split()[0])
    return fields


# --- servers under test -------------------------------------------------------------------

# shared by every benchmark on a machine: one timed run at a time (QWEN3TTS_CPU_LOCK names another file)
CPU_LOCK = Path(os.environ.get("QWEN3TTS_CPU_LOCK", "/tmp/cpu.lock"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def exit_on_sigterm() -> None:
    """SIGTERM raises SystemExit in the main thread, so the `finally` blocks that stop our
    servers run: they are in sessions of their own (a Ctrl-C does not reach them), and
    Python's default SIGTERM ends the process without unwinding, which left them running
    after `kill <bench>`. Leaves a handler someone else installed alone."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and \
            threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_exit)


def _raise_exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


class ServerChild:
    """A Wyoming server as a child process of ours, in its own process group (a Ctrl-C at the
    bench's terminal does not reach it; stop() does), stdin closed, stdout and stderr in
    `log_path`."""

    def __init__(self, name: str, argv: list[str], port: int, log_path: Path) -> None:
        self.name, self.argv, self.port, self.log_path = name, argv, port, log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        exit_on_sigterm()
        log.info("starting %s: %s", self.name, " ".join(self.argv))
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def describe(self, timeout: float = 5.0) -> Info | None:
        """The server's info, or None if it does not answer (yet)."""
        return await describe(self.port, timeout=timeout)

    async def wait_ready(self, timeout: float, log_marker: str | None = None) -> Info:
        """Its info, once it answers describe with a TTS program and, with `log_marker`, its
        log holds that text (ours answers describe while its model still loads: "ready on")."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode if self.proc else None}); "
                                   f"see {self.log_path}")
            if log_marker is None or log_marker in self.log_path.read_text("utf-8", "replace"):
                info = await self.describe()
                if info is not None and info.tts:
                    return info
            await asyncio.sleep(0.5)
        raise TimeoutError(f"{self.name} was not ready within {timeout:.0f} s; see {self.log_path}")

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM to its process group, SIGKILL after `timeout`; its exit code (None if killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            log.info("stopping %s", self.name)
            self._signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.error("%s did not stop within %.0f s of SIGTERM; killing it", self.name, timeout)
                self._signal(signal.SIGKILL)
                self.proc.wait(timeout)
                return None
        return self.proc.returncode

    def _signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass


@contextmanager
def cpu_lock(path: Path = CPU_LOCK, timeout: float = 3600.0) -> Iterator[bool]:
    """An exclusive flock on `path` for the block: timed runs of the benchmarks sharing this
    machine take turns. Yields whether it is held (no lock file: runs unlocked). Start no
    child process inside the block: one that kept the descriptor would hold the lock."""
    if not path.exists():
        log.info("no %s: measuring without the CPU lock", path)
        yield False
        return
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        deadline, waiting = time.monotonic() + timeout, False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{path} stayed locked for {timeout:.0f} s") from None
                if not waiting:
                    log.info("waiting for %s (another timed run holds it)", path)
                    waiting = True
                time.sleep(1.0)
        yield True
    finally:
        os.close(fd)  # releases the lock
