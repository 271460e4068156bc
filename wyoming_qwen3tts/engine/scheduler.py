"""The scheduler: admits requests between steps, so every satellite speaking at once shares
each weight read, and ends them on EOS, frame cap, abort or timeout.

It runs on its own thread, or on the thread of a group of schedulers (engine/group.py: several
models in one process, stepped in turn), and owns the batch (engine/batch.py: the sequences, the
KV pool and the runner that executes each step); other threads only `submit`, `open`, `feed`,
`abort` and read `metrics()`, all under one short lock that is never held across inference.
Admission is FIFO: the oldest waiting request goes first, and while it waits for KV blocks
nobody overtakes it. A request reserves its worst case (prompt + frame cap) at admission, so
a running request never runs out of blocks, and its blocks return at once when it ends.

A request opened with `open` has a text that grows (docs/ARCHITECTURE.md, "Text that is
still being written"): it is admitted once its prompt can be laid out (the streaming layout
needs only the first text token), and each later token joins its trailing text. Its frame
cap, and so its reservation, grows with the text; while the pool cannot grow it, the new
tokens wait, as does a sequence whose next text token has not arrived.

The batch keeps the KV of recent voices' prompt prefixes (engine.prefix_cache, engine/batch.py)
in pool blocks that count as free: a request that needs them evicts them, so admission never
waits for the cache, and an idle pool has every block free.
"""
from __future__ import annotations

import collections
import ctypes
import dataclasses
import logging
import threading
import time
from dataclasses import dataclass

import numpy as np

from ..model.manifest import LEAD_GRAPH
from ..model.prompt import Prompt, VoiceRequest, build_open_prompt
from ..model.token_stream import TextTokenStream
from .audio import SAMPLE_RATE
from .batch import Batch
from .codec_lead import CodecLead
from .config import EngineConfig
from .decoders import Decoders
from .group import EngineGroup
from .loaded_model import LoadedModel
from .memory import LoadMemory
from .metrics import EngineMetrics, MetricsWindow
from .native import NativeRunner
from .runner import PythonRunner
from .sampling import SamplingParams
from .sequence import Sequence
from .step import ChunkSchedule, Runner, paces
from .stream import AudioChunk, AudioStream, EngineBusy, EngineError, RequestAborted, RequestTimeout, StreamResult
from .utterance import Utterance

log = logging.getLogger(__name__)


@dataclass
class _Request:
    id: int
    prompt: Prompt | None  # None while an open text is too short to lay out
    params: SamplingParams
    max_frames: int | None  # the caller's limit (None: the config's cap for the text)
    deadline: float | None
    stream: AudioStream  # its marks hold the request's times (queued, admitted, first_audio)
    voice: VoiceRequest | None = None  # an open request's voice, to lay out its prompt
    text: list[int] = dataclasses.field(default_factory=list)  # an open request's text ids so far
    closed: bool = True  # the text is complete
    paced: bool = False  # its audio is played as it arrives (engine/pacing.py)
    fed: int = 0  # text ids (and with fed_closed, the end) the sequence has
    fed_closed: bool = True
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
    def sequence(self) -> Sequence:
        """The running request's sequence."""
        if self.seq is None:
            raise RuntimeError(f"request {self.id} is not running")
        return self.seq

    @property
    def first_audio(self) -> float | None:
        return self.stream.marks.get("first_audio")

    @property
    def starved(self) -> bool:
        """Running, waiting for text it has been given but could not take (the pool is full)."""
        return self.seq is not None and self.seq.pending is None and (self.fed < len(self.text) or
                                                                       self.closed > self.fed_closed)


def open_batch(model: LoadedModel, config: EngineConfig, schedule: ChunkSchedule,
               decoders: Decoders | None = None) -> Batch:
    """The runner the config asks for (the native executor, or the Python reference) under a
    batch with the config's KV pool. decoders: compiled codec decoders shared with other
    models (engine/decoders.py); None: compiled for this batch alone."""
    decoders = decoders or Decoders()
    lead = None
    if config.codec_lead and paces(model, schedule):
        if CodecLead.available(model):
            # before the runner: compiling reads every page of the lead's mapped weights, and
            # peak RSS is lowest while nothing else is resident yet
            lead = decoders.lead(model)
        else:
            log.info("engine.codec_lead: %s has no %s graph (a conversion before format 5): first audio waits for "
                     "the whole first frame's decoding", model.dir, LEAD_GRAPH)
    runner: Runner
    if config.native_runner:
        codec = None if schedule.offline else decoders.codec(model, schedule)
        runner = NativeRunner(model, schedule, config.own_stacks(model.precision), config.kernels, codec)
    else:
        runner = PythonRunner(model, schedule)  # its own codec graphs (engine/decoders.py)
    if config.kernels != "auto" and not config.native_runner:
        log.warning("engine.kernels is the native runner's: the python backend runs OpenVINO's graphs")
    num_blocks = config.kv_blocks or max(1, config.kv_cache_mb * 2**20 // runner.kv_block_bytes)
    batch = Batch(model, runner, num_blocks, schedule, config.prefill_chunk, config.prefix_cache, lead)
    return_freed_memory()
    return batch


def return_freed_memory() -> None:
    """Give the memory compiling freed back to the system: glibc keeps freed blocks of its heap
    that are not at its top (0.6B fast preset: ~40 MB after loading). Elsewhere than glibc, nothing."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


class Scheduler:
    """Continuous batching over one LoadedModel. `start()` runs the loop on a thread;
    tests may instead call `tick()` themselves for a deterministic interleaving."""

    def __init__(self, model: LoadedModel, config: EngineConfig | None = None,
                 defaults: SamplingParams | None = None, schedule: ChunkSchedule | None = None, *,
                 decoders: Decoders | None = None, group: EngineGroup | None = None) -> None:
        """defaults: sampling of requests that bring none. schedule: the codec chunk
        schedule (default: the config's first/steady chunks; offline = no audio while
        generating, the caller decodes the codes). decoders: compiled codec decoders shared
        with the process's other models (engine/decoders.py). group: the thread that steps
        it with other models' schedulers (engine/group.py): `start()` joins it, `close()`
        leaves it; None: a thread of its own."""
        config = config or EngineConfig()
        config.validate()
        self.model, self.config = model, config
        self.defaults = defaults or SamplingParams.from_defaults(model.spec.generation)
        schedule = schedule or ChunkSchedule(config.first_chunk, config.steady_chunk)
        self.batch = open_batch(model, config, schedule, decoders)
        self.batch.on_audio = self._deliver_early
        self.runner = self.batch.runner
        self.group = group
        self.load_memory: LoadMemory | None = None  # what opening it added (open_engine)
        self._joined = False  # stepped by the group's thread
        self._lock = group.lock if group is not None else threading.Lock()
        self._wake = group.wake if group is not None else threading.Condition(self._lock)
        self._waiting: collections.deque[_Request] = collections.deque()
        self._aborts: dict[int, EngineError] = {}
        self._feeds: dict[int, tuple[list[int], bool]] = {}  # text of open requests, not yet taken
        self._pool_full = False  # the last admission or text growth found no blocks; none returned since
        self._running: dict[int, _Request] = {}  # admitted, by request id
        self._next_id = 0
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._window = MetricsWindow()
        self._idle = True  # no request running or waiting, as of the last tick
        self._metrics = self._snapshot()
        log.info("engine (%s backend): %d KV blocks of %d tokens (%.0f MB), batch %d, queue %d, prefix cache %s",
                 config.backend, self.batch.pool.num_blocks, self.runner.block_size,
                 self.batch.pool.num_blocks * self.runner.kv_block_bytes / 2**20, config.max_batch, config.max_queue,
                 "on" if self.batch.prefix_cache else "off")

    # --- any thread ---
    def submit(self, voice: VoiceRequest, params: SamplingParams | None = None, *, max_frames: int | None = None,
               timeout: float | None = None, paced: bool = False) -> AudioStream:
        """Queue a request and return its audio stream. Raises at once on bad input
        (PromptError, ValueError) and EngineBusy when the queue is full. paced: its audio is
        played as it arrives, so it comes in short chunks until it is ahead (engine/pacing.py)."""
        if voice.non_streaming is None and self.config.text_layout != "auto":
            voice = dataclasses.replace(voice, non_streaming=self.config.text_layout == "non_streaming")
        prompt = self.model.prompt(voice)
        params = params or self.defaults
        params.validate()
        # a prompt the cache can never hold fails here
        self.batch.frame_budget(len(prompt), self._cap(prompt.text_tokens, params, max_frames))
        req = self._queue(prompt, params, max_frames, timeout, paced=paced)
        log.debug("request %d queued: %d prompt tokens", req.id, len(prompt))
        return req.stream

    def open(self, voice: VoiceRequest, params: SamplingParams | None = None, *, max_frames: int | None = None,
             timeout: float | None = None, paced: bool = False) -> Utterance:
        """Queue a request whose text arrives later, in pieces (`Utterance.append`, `finish`);
        voice.text is ignored. Its prompt takes the streaming layout unless the voice asks
        otherwise (a non-streaming layout waits for the whole text). Raises at once on a bad
        voice (PromptError) and EngineBusy when the queue is full."""
        voice = dataclasses.replace(voice, text="",
                                    non_streaming=False if voice.non_streaming is None else voice.non_streaming)
        build_open_prompt(self.model.spec, self.model.tokenizer, voice, [], closed=False)  # checks the voice
        params = params or self.defaults
        params.validate()
        req = self._queue(None, params, max_frames, timeout, voice, paced)
        log.debug("request %d queued: its text is to come", req.id)
        return Utterance(req.id, req.stream, TextTokenStream(self.model.tokenizer), self.feed)

    def feed(self, request_id: int, ids: list[int], closed: bool) -> None:
        """More text ids of an opened request, and whether its text is now complete."""
        with self._lock:
            got, was_closed = self._feeds.get(request_id, ([], False))
            self._feeds[request_id] = (got + list(ids), was_closed or closed)
            self._wake.notify()

    def _queue(self, prompt: Prompt | None, params: SamplingParams, max_frames: int | None, timeout: float | None,
               voice: VoiceRequest | None = None, paced: bool = False) -> _Request:
        """A request with its prompt, or (voice given) an open one whose text is to come."""
        timeout = self.config.request_timeout if timeout is None else timeout
        with self._lock:
            if self._stopping:
                raise EngineError("the engine is shutting down")
            if self._thread_died():
                raise EngineError("the engine thread has stopped")
            if len(self._waiting) >= self.config.max_queue:
                raise EngineBusy(f"busy: {len(self._waiting)} requests are already waiting, try again later")
            rid = self._next_id
            self._next_id += 1
            deadline = time.monotonic() + timeout if timeout > 0 else None
            stream = AudioStream(rid, self.abort)
            stream.chunk_frames = self.batch.schedule.steady
            req = _Request(rid, prompt, params, max_frames, deadline, stream, voice=voice,
                           closed=voice is None, fed_closed=voice is None, paced=paced)
            self._waiting.append(req)
            self._wake.notify()
        return req

    def _thread_died(self) -> bool:
        """The thread that steps it (its own, or its group's) was started and is gone."""
        if self._joined and self.group is not None:
            return not self.group.running
        return self._thread is not None and not self._thread.is_alive()

    def _cap(self, text_tokens: int, params: SamplingParams, max_frames: int | None) -> int:
        """A request's frame cap: the runaway guard for its text, the caller's limit, the sampling limit."""
        cap = self.config.frame_cap(text_tokens)
        return params.frame_limit(cap if max_frames is None else min(cap, max_frames))

    def abort(self, request_id: int, error: EngineError | None = None) -> None:
        """End a request wherever it is; its stream raises `error` (RequestAborted)."""
        with self._lock:
            self._aborts.setdefault(request_id, error or RequestAborted(f"request {request_id} aborted"))
            self._wake.notify()

    def metrics(self) -> EngineMetrics:
        with self._lock:
            return self._metrics

    def start(self) -> Scheduler:
        """Run the loop on its own thread, or join the group's (once: two loops would share one runner)."""
        if self._thread is not None or self._joined:
            raise RuntimeError("the engine is already started")
        if self.group is not None:
            self.group.join(self)
            self._joined = True
            return self
        self._thread = threading.Thread(target=self._loop, name="qwen3tts-engine", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout: float = 30.0) -> None:
        """Stop the loop (leave the group, after a tick of this scheduler in progress); every
        unfinished request ends with RequestAborted; the runner's graphs go (idempotent)."""
        with self._lock:
            if self._stopping and self._thread is None and not self._joined:
                return
            self._stopping = True
            self._wake.notify()
        if self._joined and self.group is not None:
            self.group.leave(self, timeout)
            self._joined = False
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError(f"the engine thread did not stop within {timeout} s")
            self._thread = None
        self._drain_all(RequestAborted("the engine shut down"), waiting=True)
        self.batch.close()  # the native runner's graphs go now, not at a collector's pass

    def __enter__(self) -> Scheduler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the engine thread ---
    def _loop(self) -> None:
        while True:
            with self._wake:
                self._wake.wait_for(self._has_work, self.until_deadline())
                if self._stopping:
                    return
            self.tick_guarded()

    def tick_guarded(self) -> None:
        """A tick whose failure ends the running requests, never the thread that ticks."""
        try:
            self.tick()
        except Exception as e:  # never let one failure take the engine down
            log.exception("engine step failed")
            try:
                self._drain_all(EngineError(f"synthesis failed: {e}"), waiting=False)
            except Exception:
                log.exception("failed to end the requests of a failed step")

    def due(self) -> bool:
        """(Under the lock; for the group's thread.) Whether a tick is due: there is work, or a
        request's deadline has passed. Never once closing."""
        return not self._stopping and (self._has_work() or self.until_deadline() == 0)

    def _has_work(self) -> bool:
        """(Under the lock.) Whether a tick would do anything: sequences waiting for text, and
        requests waiting for blocks that have not come back, are no work."""
        if self._stopping or self._aborts or self._feeds:
            return True
        if any(r.seq is not None and r.seq.pending is not None for r in self._running.values()):
            return True
        admissible = len(self._running) < self.config.max_batch and any(r.prompt is not None for r in self._waiting)
        return not self._pool_full and (admissible or any(r.starved for r in self._running.values()))

    def until_deadline(self) -> float | None:
        """(Under the lock.) Seconds to the nearest request deadline, for an idle wait."""
        deadlines = [r.deadline for r in (*self._waiting, *self._running.values()) if r.deadline is not None]
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def tick(self) -> None:
        """One round: aborts and timeouts, new text, admissions, one runner step, audio delivery."""
        now = time.monotonic()
        with self._lock:
            aborts, self._aborts = self._aborts, {}
            feeds, self._feeds = self._feeds, {}
            waiting = {r.id: r for r in self._waiting}
            for req in waiting.values():
                if req.deadline is not None and now > req.deadline:
                    aborts.setdefault(req.id, self._timeout_error(req))
        for req in self._running.values():
            if req.deadline is not None and now > req.deadline:
                aborts.setdefault(req.id, self._timeout_error(req))
        for rid, error in aborts.items():
            self._end(rid, error)
        for rid, (ids, closed) in feeds.items():
            fed = self._running.get(rid) or waiting.get(rid)
            if fed is not None and rid not in aborts:
                self._take_text(fed, ids, closed)
        for req in list(self._running.values()):
            if req.fed < len(req.text) or req.closed > req.fed_closed:
                self._extend(req)
        self._admit()
        if any(r.sequence.pending is not None for r in self._running.values()):
            self._step()
        elif self._running and all(r.starved for r in self._running.values()):
            newest = max(self._running)  # every sequence waits for blocks only another could return
            self._end(newest, EngineBusy("the KV cache is full (engine.kv_cache_mb): this request's text "
                                         "outgrew it while others held the rest"))
        with self._lock:
            self._metrics = m = self._snapshot()
        if not self._idle and not m.active and not m.queue_depth:  # every block should be back (the soak reads it)
            log.debug("engine idle: %d/%d KV blocks free (%d of them pinned by the prefix cache)", m.blocks_free,
                      m.blocks_total, self.batch.pool.pinned)
        self._idle = not m.active and not m.queue_depth

    def _take_text(self, req: _Request, ids: list[int], closed: bool) -> None:
        """New text of an open request. A waiting one is laid out again (it may be able to
        start now); a running one takes it in `_extend`."""
        if req.closed or req.voice is None:
            return  # fed after finish(): nothing more belongs to it
        req.text += ids
        req.closed = closed
        if req.seq is not None:
            return
        try:
            req.prompt = build_open_prompt(self.model.spec, self.model.tokenizer, req.voice, req.text, req.closed)
            if req.prompt is not None:  # a prompt the cache can never hold fails here
                self.batch.frame_budget(len(req.prompt), self._cap(req.prompt.text_tokens, req.params,
                                                                     req.max_frames))
        except ValueError as e:  # PromptError too
            self._end(req.id, EngineError(str(e)))

    def _extend(self, req: _Request) -> None:
        """Hand a running open request's new text (and its end) to its sequence, with the frame
        cap of the longer text; while the pool cannot reserve that, the text waits."""
        ids = req.text[req.fed:] + ([self.model.spec.text_ids.tts_eos] if req.closed else [])
        rows = self.model.embed_text(ids)
        if self.batch.extend(req.sequence, rows, req.closed, self._cap(len(req.text), req.params, req.max_frames)):
            req.fed, req.fed_closed = len(req.text), req.closed
        else:
            self._pool_full = True

    def _timeout_error(self, req: _Request) -> RequestTimeout:
        return RequestTimeout(f"request {req.id} timed out after {time.monotonic() - req.submitted:.1f} s")

    def _admit(self) -> None:
        """Start waiting requests whose prompt is laid out, oldest first; the oldest of them
        waits for blocks and nobody overtakes it (an open text too short to start does not
        hold the others up)."""
        while len(self._running) < self.config.max_batch:
            with self._lock:
                req = next((r for r in self._waiting if r.prompt is not None), None)
                if req is None:
                    return
                assert req.prompt is not None
                cap = self._cap(req.prompt.text_tokens, req.params, req.max_frames)
                if not self.batch.can_admit(len(req.prompt), cap):
                    self._pool_full = True
                    return
                self._waiting.remove(req)
            try:
                req.seq = self.batch.add(self.model.embed_prompt(req.prompt), req.params, cap,
                                          text_open=not req.closed, prefix_len=req.prompt.prefix_len, paced=req.paced)
            except Exception as e:
                log.warning("request %d rejected: %s", req.id, e)
                self._finish(req, f"error: {e}", EngineError(str(e)))
                continue
            req.fed, req.fed_closed = req.prompt.text_tokens, req.closed
            req.stream.marks["admitted"] = time.monotonic()
            self._running[req.id] = req
            if req.seq.finished:  # a frame budget of zero
                self._deliver(req)

    def _step(self) -> None:
        start = time.monotonic()
        frames_before = sum(r.sequence.num_frames for r in self._running.values())
        self.batch.step()
        frames = sum(r.sequence.num_frames for r in self._running.values()) - frames_before
        self._window.add(time.monotonic(), frames, time.monotonic() - start)
        for req in list(self._running.values()):
            self._deliver(req)

    def _deliver_early(self, seq: Sequence) -> None:
        """A sequence's audio that is ready before its step ends (the codec lead)."""
        for req in self._running.values():
            if req.seq is seq:
                self._deliver(req)

    def _deliver(self, req: _Request) -> None:
        """Hand the request's new PCM to its stream; end the stream when the sequence ended."""
        seq = req.sequence
        req.stream.frames, req.stream.text_tokens = seq.num_frames, req.fed
        req.stream.chunk_frames, req.stream.rate_hint = self.batch.chunk_frames(seq), self.batch.frame_rate(seq)
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
        if req is not None:  # else already finished
            self._stop(req, error)

    def _stop(self, req: _Request, error: EngineError) -> None:
        """End a request before its sequence finished: its blocks go back, its stream gets the error."""
        reason = ("timeout" if isinstance(error, RequestTimeout) else "aborted" if isinstance(error, RequestAborted)
                  else f"error: {error}")
        if req.seq is not None:
            self.batch.abort(req.seq, reason)
        self._finish(req, reason, error)

    def _finish(self, req: _Request, reason: str, error: EngineError | None = None) -> None:
        self._running.pop(req.id, None)
        self._pool_full = False  # blocks came back (or may have): retry what waits for them
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
        for req in queued + list(self._running.values()):
            self._stop(req, error)
        with self._lock:
            self._metrics = self._snapshot()

    def _snapshot(self) -> EngineMetrics:
        pool = self.batch.pool
        return self._window.snapshot(self.batch.times, queue_depth=len(self._waiting),
                                     active=len(self._running),
                                     blocks_used=pool.used, blocks_free=pool.free, blocks_total=pool.num_blocks)
