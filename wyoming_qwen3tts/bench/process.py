"""Each benchmarked implementation runs in a fresh child process: its peak RSS is its own,
and torch's and OpenVINO's thread pools never share (or warm) one process."""
from __future__ import annotations

import logging
import multiprocessing
import resource
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


OUR_LOGGERS = ("wyoming_qwen3tts", "qwen3tts-bench")


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


def resident_kb() -> tuple[int, int]:
    """(anonymous, file-backed) resident kB of this process now: what the plugins allocated,
    and the pages of mapped files (weights) still in memory."""
    kb = status_kb()
    return kb.get("RssAnon", 0), kb.get("RssFile", 0)


def peak_rss_mb() -> float:
    """Largest resident set size this process has had (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
