"""`weights: auto`: the most accurate weight format in which one stream speaks in real time on
this CPU, measured at the first start and recorded in the data dir (docs/WEIGHTS.md).

INT8, then `mixed`, then INT4 (most accurate first) are loaded and measured in turn until one
makes real time with a margin; the first that does is kept, or, when none does, the fastest,
with a warning. The rejected engines are closed before the next one loads (one model's memory
at a time) and the conversions auto made for them are deleted (HA boxes have little disk).
The choice is recorded per checkpoint size (0.6B and 1.7B differ; the variants of one size run
the same talker and code predictor) with the CPU's signature: a later start loads the chosen
format at once, and a changed signature, or the measured checkpoint's chosen conversion gone,
measures again.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from ..engine.contention import Contention
from ..engine.sampling import SamplingParams
from ..engine.scheduler import Scheduler
from ..engine.stream import AudioStream
from ..model.prompt import VoiceRequest

log = logging.getLogger("wyoming-qwen3tts")

AUTO = "auto"
CANDIDATES = ("int8", "mixed", "int4")  # most accurate first (docs/BENCHMARKS.md, "Accuracy")
REAL_TIME_FPS = 12.5  # frames/s: 80 ms of audio per frame
MARGIN = 1.2  # docs/WEIGHTS.md, "The bar": start-up on a quiet box, serving beside Home Assistant
NEEDS_ENV = "QWEN3TTS_AUTO_NEEDS_FPS"  # another bar in frames/s (the tests force auto past INT8 with it)
RECORD = "weights-auto.json"  # in <data dir>/converted, next to the conversions
MEASURE_FRAMES = 100  # 8 s of audio: several steady codec chunks after the first
MEASURE_BOUND_S = 20.0  # a box so slow that 100 frames take longer is measured on what it made by then
MEASURE_TEXT = ("The weather today is mild, with a light breeze from the west and a few clouds in the "
                "afternoon; tonight it will be clear and cool, so close the windows before you go to bed.")
FRAME_SAMPLES = 1920  # 80 ms at 24 kHz
BUSY = 0.25  # others' share of the CPU during a measurement above which its figure is flagged
_FLAGS = ("avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile",
          "amx_int8", "amx_bf16")  # what the kernels and OpenVINO's CPU plugin choose their code paths by

T = TypeVar("T")


def formats(weights: str) -> tuple[str, ...]:
    """The conversions a model with this weights setting may have on disk: auto's candidates
    (whichever it kept), or the one format set."""
    return CANDIDATES if weights == AUTO else (weights,)


def needed_fps() -> float:
    """The bar one stream must make: real time with the margin, or NEEDS_ENV's value."""
    value = os.environ.get(NEEDS_ENV)
    return float(value) if value else REAL_TIME_FPS * MARGIN


def load_average() -> float:
    """The 1-minute load average (0 where /proc is not): other work on the CPU lowers a measurement."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def cpu_signature(threads: int | None, openvino: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """What decides a format's speed besides the model: the CPU's model name and the flags the
    code paths are chosen by, the threads, OpenVINO's version, and the settings that change
    which kernels run (precision, backend, devices). Equal signatures: the recorded choice holds."""
    model, flags = "", set[str]()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    return {"cpu": model, "flags": [f for f in _FLAGS if f in flags],
            "threads": threads or len(os.sched_getaffinity(0)), "openvino": openvino, "settings": dict(settings)}


@dataclass(frozen=True)
class Choice:
    """One recorded decision (the JSON's entry for a checkpoint size)."""

    format: str
    frames_per_s: dict[str, float]  # of each format tried, in the order tried
    needed_frames_per_s: float
    signature: dict[str, Any]
    measured_with: str  # the model source measured (its conversion's removal measures again)
    version: str  # wyoming-qwen3tts
    date: str  # ISO 8601, UTC

    @property
    def real_time(self) -> bool:
        return self.frames_per_s.get(self.format, 0.0) >= self.needed_frames_per_s

    def reason(self) -> str:
        """Why this format, for the log line of every start."""
        fps = self.frames_per_s[self.format]
        bar = f"real time needs {REAL_TIME_FPS} × {MARGIN}" if self.needed_frames_per_s == REAL_TIME_FPS * MARGIN \
            else f"the bar is {self.needed_frames_per_s:g}"
        tried = ", ".join(f"{f} {r:.1f}" for f, r in self.frames_per_s.items())
        if self.real_time:
            return f"{fps:.1f} frames/s here ({bar}; tried {tried})"
        return f"the fastest, {fps:.1f} frames/s here: this CPU does not speak in real time ({bar}; tried {tried})"


class Records:
    """The choices of one data dir, by checkpoint size, in one small JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, Choice]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return {key: Choice(**value) for key, value in data["choices"].items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("auto: %s is unreadable (%s); measuring again", self.path, e)
            return {}

    def get(self, key: str) -> Choice | None:
        return self.read().get(key)

    def put(self, key: str, choice: Choice) -> None:
        """Written whole to a temporary file and renamed: never half a file."""
        choices = {**self.read(), key: choice}
        data = {"choices": {k: dataclasses.asdict(c) for k, c in choices.items()}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".weights-auto-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=2)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


class Trial(Protocol[T]):
    """What auto does with one format (server/loading.py: conversions and services)."""

    def present(self, weights: str) -> bool:
        """A complete, current conversion in this format is on disk."""

    def load(self, weights: str) -> T:
        """Convert if needed, load, warm up."""

    def measure(self, loaded: T) -> float | None:
        """One stream's frames/s (None: no voice to measure with, or its request failed)."""

    def close(self, loaded: T) -> None:
        """Its memory goes."""

    def delete(self, weights: str) -> None:
        """Its conversion goes."""


@dataclass
class _Best(Generic[T]):
    weights: str
    fps: float
    loaded: T | None  # None: closed


def choose(key: str, source: str, signature: dict[str, Any], records: Records, trial: Trial[T],
           version: str, now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc),
           ) -> tuple[T, str]:
    """The loaded model in auto's format for checkpoint size `key`, and that format."""
    recorded, needed = records.get(key), needed_fps()
    if recorded is not None and recorded.signature == signature and recorded.needed_frames_per_s == needed and (
            recorded.measured_with != source or trial.present(recorded.format)):
        log.info("auto: %s, recorded on %s (%s)", recorded.format, recorded.date, recorded.reason())
        return trial.load(recorded.format), recorded.format
    if recorded is None:
        log.info("auto: no choice recorded for %s on this machine; measuring INT8 first", key)
    elif recorded.signature != signature:
        log.info("auto: the choice recorded for %s was made on another CPU or settings (%s, now %s); measuring "
                 "again", key, recorded.signature, signature)
    elif recorded.needed_frames_per_s != needed:
        log.info("auto: the choice recorded for %s was held to %g frames/s, now %g; measuring again", key,
                 recorded.needed_frames_per_s, needed)
    else:
        log.info("auto: the %s conversion chosen for %s is gone; measuring again", recorded.format, key)
    fps: dict[str, float] = {}
    made: set[str] = set()  # conversions auto made: the rejected ones are deleted
    best: _Best[T] | None = None
    for weights in CANDIDATES:
        if best is not None and best.loaded is not None:
            trial.close(best.loaded)  # one model's memory at a time
            best.loaded = None
        try:
            if not trial.present(weights):
                made.add(weights)
            loaded = trial.load(weights)
        except Exception as e:
            if best is None:
                raise
            log.error("auto: loading %s failed (%s); staying with %s, not recorded (the next start tries "
                      "again)", weights, e, best.weights)
            _discard(trial, weights, made)
            break
        try:
            rate = trial.measure(loaded)
            if rate is not None and rate < needed:  # once more before rejecting: a start shares the CPU
                again = trial.measure(loaded)
                rate = max(rate, again if again is not None else rate)
        except Exception:
            trial.close(loaded)
            raise
        if rate is None:
            log.warning("auto: %s could not be measured (no voice, or its request failed); using %s, not "
                        "recorded", source, weights)
            return loaded, weights
        fps[weights] = rate
        log.info("auto: %s makes %.1f frames/s (one stream; the bar is %.1f; load average %.2f)", weights, rate,
                 needed, load_average())
        if best is None or rate > best.fps:
            if best is not None:
                _discard(trial, best.weights, made)
            best = _Best(weights, rate, loaded)
        else:
            trial.close(loaded)
            _discard(trial, weights, made)
        del loaded  # a closed model's Python side goes before the next loads (Trial.load collects it)
        if best.fps >= needed:
            break
    assert best is not None
    choice = Choice(best.weights, fps, needed, signature, source, version, now().isoformat(timespec="seconds"))
    if len(fps) == len(CANDIDATES) or best.fps >= needed:
        records.put(key, choice)
    if best.loaded is None:
        best.loaded = trial.load(best.weights)
    (log.info if choice.real_time else log.warning)("auto: %s, %s", best.weights, choice.reason())
    return best.loaded, best.weights


def _discard(trial: Trial[Any], weights: str, made: set[str]) -> None:
    """A rejected format's conversion goes if auto made it (one the user had is kept)."""
    if weights in made:
        trial.delete(weights)
        made.discard(weights)


def measure_stream(engine: Scheduler, request: VoiceRequest, params: SamplingParams,
                   frames: int = MEASURE_FRAMES, bound_s: float = MEASURE_BOUND_S) -> float:
    """One stream's frames/s with decoding, once it plays: the frames of the chunks after the
    first over the time from the first chunk to the last (so the prompt and the first chunk's
    latency do not count). EOS is held off for `frames`; at `bound_s` the request is cancelled
    and measured on what it made by then."""
    stream = engine.submit(request, dataclasses.replace(params, min_frames=frames), max_frames=frames)
    start, contention = time.monotonic(), Contention.start()
    first: float | None = None
    last, samples, total = start, 0, 0
    try:
        while (left := start + bound_s - time.monotonic()) > 0:
            try:
                chunk = stream.get(timeout=left)
            except (StopIteration, TimeoutError):
                break
            now, size = time.monotonic(), chunk.pcm.size
            total += size
            if first is None and size:
                first = now
            elif size:
                last, samples = now, samples + size
            if chunk.final:
                break
    finally:
        _cancel(stream)
    _report_others(contention)
    if first is None or samples == 0:  # not even two chunks in the bound: all of it, a lower bound
        return total / FRAME_SAMPLES / max(time.monotonic() - start, 1e-9)
    return samples / FRAME_SAMPLES / max(last - first, 1e-9)


def _cancel(stream: AudioStream) -> None:
    stream.cancel()
    with contextlib.suppress(Exception):  # its end (RequestAborted) is not an error here
        stream.read_all(5.0)


def _report_others(contention: Contention) -> None:
    """Other processes slow a measurement down, and a format rejected for that is not tried
    again: say when they took more than BUSY of the CPU."""
    share, _ = contention.shares()
    if share > BUSY:
        log.warning("auto: other processes took %.0f %% of the CPU while measuring: the figure is low; delete "
                    "weights-auto.json in the data dir's converted/ to measure again on a quiet machine", 100 * share)
    else:
        log.info("auto: other processes took %.0f %% of the CPU while measuring", 100 * share)
