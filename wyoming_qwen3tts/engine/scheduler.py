"""The scheduler: admits requests between steps, so every satellite speaking at once shares
each weight read, and ends them on EOS, frame cap, abort or timeout.

It runs on its own thread and owns the Runner; other threads only `submit`, `abort` and
read `metrics()`, all under one short lock that is never held across inference. Admission
is FIFO: the oldest waiting request goes first, and while it waits for KV blocks nobody
overtakes it. A request reserves its worst case (prompt + frame cap) at admission, so a
running request never runs out of blocks, and its blocks return at once when it ends.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from dataclasses import dataclass

import numpy as np

from ..model.prompt import Prompt, VoiceRequest
from .audio import SAMPLE_RATE
from .config import EngineConfig
from .metrics import EngineMetrics, MetricsWindow
from .model import LoadedModel
from .native import NativeRunner
from .runner import ChunkSchedule, Runner, Sequence
from .sampling import SamplingParams
from .stream import AudioChunk, AudioStream, EngineBusy, EngineError, RequestAborted, RequestTimeout, StreamResult

log = logging.getLogger(__name__)


@dataclass
class _Request:
    id: int
    prompt: Prompt
    params: SamplingParams
    max_frames: int
    deadline: float | None
    stream: AudioStream  # its marks hold the request's times (queued, admitted, first_audio)
    seq: Sequence | None = None
    samples: int = 0  # PCM samples delivered

    def __post_init__(self) -> None:
        self.stream.marks["queued"] = time.monotonic()

    @property
    def submitted(self) -> float:
        return self.stream.marks["queued"]

    @property
    def admitted(self) -> float | None:
        return self.stream.marks.get("admitted")

    @property
    def first_audio(self) -> float | None:
        return self.stream.marks.get("first_audio")


def make_runner(model: LoadedModel, config: EngineConfig, schedule: ChunkSchedule) -> Runner | NativeRunner:
    """The step loop the config asks for: the native runner, or the Python reference."""
    if config.runner == "native":
        return NativeRunner(model, config, schedule)
    if model.talker is None:
        raise ValueError("engine.runner is python, but the model was loaded for the native runner")
    blocks = config.kv_blocks or max(1, int(config.kv_cache_mb * 2**20 // model.kv_block_bytes))
    return Runner(model, blocks, schedule, config.prefill_chunk)


class Scheduler:
    """Continuous batching over one LoadedModel. `start()` runs the loop on a thread;
    tests may instead call `tick()` themselves for a deterministic interleaving."""

    def __init__(self, model: LoadedModel, config: EngineConfig | None = None,
                 defaults: SamplingParams | None = None, schedule: ChunkSchedule | None = None) -> None:
        """defaults: sampling of requests that bring none. schedule: the codec chunk
        schedule (default: the config's first/steady chunks; offline = no audio while
        generating, the caller decodes the codes)."""
        config = config or EngineConfig()
        config.validate()
        self.model, self.config = model, config
        self.defaults = defaults or SamplingParams.from_defaults(model.spec.generation)
        schedule = schedule or ChunkSchedule(config.first_chunk, config.steady_chunk)
        self.runner = make_runner(model, config, schedule)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._waiting: collections.deque[_Request] = collections.deque()
        self._aborts: dict[int, EngineError] = {}
        self._running: dict[int, _Request] = {}  # admitted, by request id
        self._next_id = 0
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._window = MetricsWindow()
        self._idle = True  # no request running or waiting, as of the last tick
        self._metrics = self._snapshot()
        log.info("engine (%s runner): %d KV blocks of %d tokens (%.0f MB), batch %d, queue %d", config.runner,
                 self.runner.pool.num_blocks, self.runner.block_size,
                 self.runner.pool.num_blocks * self.runner.kv_block_bytes / 2**20, config.max_batch, config.max_queue)

    # --- any thread ---
    def submit(self, voice: VoiceRequest, params: SamplingParams | None = None, *, max_frames: int | None = None,
               timeout: float | None = None) -> AudioStream:
        """Queue a request and return its audio stream. Raises at once on bad input
        (PromptError, ValueError) and EngineBusy when the queue is full."""
        prompt = self.model.prompt(voice)
        params = params or self.defaults
        params.validate()
        cap = self.config.frame_cap(len(self.model.tokenizer.encode(voice.text)))
        cap = params.frame_limit(cap if max_frames is None else min(cap, max_frames))
        self.runner.frame_budget(len(prompt), cap)  # a prompt the cache can never hold fails here
        timeout = self.config.request_timeout if timeout is None else timeout
        with self._lock:
            if self._stopping:
                raise EngineError("the engine is shutting down")
            if self._thread is not None and not self._thread.is_alive():
                raise EngineError("the engine thread has stopped")
            if len(self._waiting) >= self.config.max_queue:
                raise EngineBusy(f"busy: {len(self._waiting)} requests are already waiting, try again later")
            rid = self._next_id
            self._next_id += 1
            stream = AudioStream(rid, self.abort)
            deadline = time.monotonic() + timeout if timeout > 0 else None
            self._waiting.append(_Request(rid, prompt, params, cap, deadline, stream))
            self._wake.notify()
        log.debug("request %d queued: %d prompt tokens, frame cap %d", rid, len(prompt), cap)
        return stream

    def abort(self, request_id: int, error: EngineError | None = None) -> None:
        """End a request wherever it is; its stream raises `error` (RequestAborted)."""
        with self._lock:
            self._aborts.setdefault(request_id, error or RequestAborted(f"request {request_id} aborted"))
            self._wake.notify()

    def metrics(self) -> EngineMetrics:
        with self._lock:
            return self._metrics

    def start(self) -> Scheduler:
        """Run the loop on its own thread (once: two loops would share one runner)."""
        if self._thread is not None:
            raise RuntimeError("the engine is already started")
        self._thread = threading.Thread(target=self._loop, name="qwen3tts-engine", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout: float = 30.0) -> None:
        """Stop the loop; every unfinished request ends with RequestAborted (idempotent)."""
        with self._lock:
            if self._stopping and self._thread is None:
                return
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError(f"the engine thread did not stop within {timeout} s")
            self._thread = None
        self._drain_all(RequestAborted("the engine shut down"), waiting=True)

    def __enter__(self) -> Scheduler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the engine thread ---
    def _loop(self) -> None:
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._stopping or self._aborts or self._waiting or self._running)
                if self._stopping:
                    return
            try:
                self.tick()
            except Exception as e:  # never let one failure take the engine down
                log.exception("engine step failed")
                try:
                    self._drain_all(EngineError(f"synthesis failed: {e}"), waiting=False)
                except Exception:
                    log.exception("failed to end the requests of a failed step")

    def tick(self) -> None:
        """One round: aborts and timeouts, admissions, one runner step, audio delivery."""
        now = time.monotonic()
        with self._lock:
            aborts, self._aborts = self._aborts, {}
            for req in list(self._waiting):
                if req.deadline is not None and now > req.deadline:
                    aborts.setdefault(req.id, self._timeout_error(req))
        for req in self._running.values():
            if req.deadline is not None and now > req.deadline:
                aborts.setdefault(req.id, self._timeout_error(req))
        for rid, error in aborts.items():
            self._end(rid, error)
        self._admit()
        if self.runner.active:
            self._step()
        with self._lock:
            self._metrics = m = self._snapshot()
        if not self._idle and not m.active and not m.queue_depth:  # every block should be back (the soak reads it)
            log.debug("engine idle: %d/%d KV blocks free", m.blocks_free, m.blocks_total)
        self._idle = not m.active and not m.queue_depth

    def _timeout_error(self, req: _Request) -> RequestTimeout:
        return RequestTimeout(f"request {req.id} timed out after {time.monotonic() - req.submitted:.1f} s")

    def _admit(self) -> None:
        while len(self._running) < self.config.max_batch:
            with self._lock:
                if not self._waiting:
                    return
                req = self._waiting[0]
                if not self.runner.can_admit(len(req.prompt), req.max_frames):
                    return  # the oldest waits for blocks; nobody overtakes it
                self._waiting.popleft()
            try:
                req.seq = self.runner.add(self.model.embed_prompt(req.prompt), req.params, req.max_frames)
            except Exception as e:
                log.warning("request %d rejected: %s", req.id, e)
                self._finish(req, f"error: {e}", EngineError(str(e)))
                continue
            req.stream.marks["admitted"] = time.monotonic()
            self._running[req.id] = req
            if req.seq.finished:  # a frame budget of zero
                self._deliver(req)

    def _step(self) -> None:
        start = time.monotonic()
        frames_before = sum(r.seq.num_frames for r in self._running.values())
        self.runner.step()
        frames = sum(r.seq.num_frames for r in self._running.values()) - frames_before
        self._window.add(time.monotonic(), frames, time.monotonic() - start)
        for req in list(self._running.values()):
            self._deliver(req)

    def _deliver(self, req: _Request) -> None:
        """Hand the request's new PCM to its stream; end the stream when the sequence ended."""
        seq = req.seq
        chunks = seq.take_audio()
        if chunks and req.first_audio is None:
            req.stream.marks["first_audio"] = time.monotonic()
        req.samples += sum(c.size for c in chunks)
        for i, pcm in enumerate(chunks):
            req.stream.put(AudioChunk(pcm, final=seq.finished and i == len(chunks) - 1))
        if seq.finished:
            if not chunks:
                req.stream.put(AudioChunk(np.zeros(0, np.float32), final=True))
            self._finish(req, seq.reason)

    def _end(self, rid: int, error: EngineError) -> None:
        """Abort or time out a request, waiting or running."""
        with self._lock:
            waiting = next((r for r in self._waiting if r.id == rid), None)
            if waiting is not None:
                self._waiting.remove(waiting)
        req = waiting or self._running.get(rid)
        if req is None:
            return  # already finished
        if req.seq is not None:
            self.runner.abort(req.seq, "timeout" if isinstance(error, RequestTimeout) else "aborted")
        self._finish(req, "timeout" if isinstance(error, RequestTimeout) else "aborted", error)

    def _finish(self, req: _Request, reason: str, error: EngineError | None = None) -> None:
        self._running.pop(req.id, None)
        now = time.monotonic()
        frames = req.seq.num_frames if req.seq is not None else 0
        samples = req.samples
        ttfa = None if req.first_audio is None else req.first_audio - req.submitted
        queued = (req.admitted or now) - req.submitted
        result = StreamResult(reason, frames, samples, queued, ttfa, now - req.submitted,
                              None if req.seq is None else req.seq.codes)
        self._window.finished(result)
        req.stream.finish(result, error)
        log.info("request %d: %s after %d frames (%.2f s audio) in %.2f s, queued %.2f s, first audio %s", req.id,
                 reason, frames, samples / SAMPLE_RATE, result.total_s, queued,
                 "-" if ttfa is None else f"{ttfa:.3f} s")

    def _drain_all(self, error: EngineError, waiting: bool) -> None:
        """End every running request (a step failed for all of them), and on shutdown
        the waiting ones too."""
        with self._lock:
            queued = list(self._waiting) if waiting else []
            if waiting:
                self._waiting.clear()
        reason = "aborted" if isinstance(error, RequestAborted) else f"error: {error}"
        for req in queued + list(self._running.values()):
            if req.seq is not None:
                self.runner.abort(req.seq, reason)
            self._finish(req, reason, error)
        with self._lock:
            self._metrics = self._snapshot()

    def _snapshot(self) -> EngineMetrics:
        pool = self.runner.pool
        return self._window.snapshot(dataclasses.replace(self.runner.times), queue_depth=len(self._waiting),
                                     active=len(self._running),
                                     blocks_used=pool.used, blocks_free=pool.free, blocks_total=pool.num_blocks)
