"""The Python reference runner: one step = one paged talker call for every active sequence
(prefills and decode steps mixed), sampling, one subcode call for the batch.

It is the oracle of the native runner and the debugging path; the scheduler (admission,
timeouts, aborts) sits above it.

The prefix cache: a prompt's first positions (instruct, role, codec prefix: Prompt.prefix_len)
depend only on the voice, so their keys and values are the same in every request of that
voice. A sequence whose prefix is cached starts with copies of the pinned blocks
(`BlockPool.pin`) in its own first blocks and feeds only the rest of its prompt; one whose
prefix is not cached feeds the prefix alone first and then pins a copy. Either way the rest
is computed over a cached prefix, so a request's numbers do not depend on whether its prefix
was cached. One prefix position is always left to the rest: the CPU's paged attention
computes two or more rows over cached positions with the same bits as one call over all of
them, but a single row goes through its decode kernel (last-bit differences) — so with an
f32 KV cache the codes are exactly those without the cache (docs/OPENVINO.md §3). For the
same reason no prefill chunk leaves a single prompt row to a call of its own.
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import openvino as ov

from ..model.embed import PromptEmbeds
from .blocks import BlockPool
from .codec_stream import CodecStream, StreamingCodec
from .graphs import fix_batch, to_paged
from .loaded_model import LoadedModel
from .sampling import SamplingParams, process_talker_logits, sample_row

if TYPE_CHECKING:
    from .native import NativeRunner

log = logging.getLogger(__name__)

SUBCODE_STEPS = 15
PRIMED_STATES = 32  # decoder states primed with reference codes (in-context clones), ≈5 MB each at full size


def frame_budget(runner: Runner | NativeRunner, prompt_tokens: int, max_frames: int) -> int:
    """Frames a sequence may generate, for either runner: its cap, cut to what the cache can
    ever hold. Raises ValueError when the prompt alone can never fit."""
    limit = min(runner.capacity_tokens, runner.model.spec.talker.stack.max_position_embeddings)
    if prompt_tokens + 1 > limit:
        raise ValueError(f"prompt of {prompt_tokens} tokens does not fit the KV cache ({limit} tokens)")
    return max(0, min(max_frames, limit - prompt_tokens))


def can_admit(runner: Runner | NativeRunner, prompt_tokens: int, max_frames: int) -> bool:
    """Whether the runner's pool can reserve this sequence's worst case now."""
    return runner.pool.can_reserve(prompt_tokens + frame_budget(runner, prompt_tokens, max_frames))


@dataclass(frozen=True)
class ChunkSchedule:
    """Frames per codec call: `first` for a stream's first chunk (latency), `steady` after
    (throughput). `offline` decodes nothing while generating (decode the codes at the end)."""

    first: int = 1
    steady: int = 8
    offline: bool = False


@dataclass
class StepTimes:
    """Where step time goes, summed since the runner started: inference of each graph, and
    the host's share (sampling, embeddings, bookkeeping), which the native runner targets."""

    steps: int = 0
    talker_s: float = 0.0
    subcode_s: float = 0.0
    codec_s: float = 0.0
    host_s: float = 0.0


@dataclass
class Sequence:
    """One utterance being generated."""

    id: int
    embeds: PromptEmbeds
    params: SamplingParams
    max_frames: int
    uniforms: np.ndarray  # [max_frames, 16] the request's draws: group 0, then the 15 subcode steps
    draws: Draws  # the request's generator: more uniforms when the frame cap grows
    cached: int = 0  # tokens already in the KV cache
    pending: np.ndarray | None = None  # embeddings the next talker call feeds
    text_open: bool = False  # more trailing text will come (Runner.extend); until then no pad is fed
    held: np.ndarray | None = None  # [H] the last frame's embedding, waiting for its trailing-text row
    prefix_tokens: int = 0  # leading prompt positions whose KV the prefix cache shares (0: none)
    prefix_key: bytes | None = None  # set until this sequence has pinned its prefix (it was not cached)
    trailing: np.ndarray = field(init=False)  # [M, H] text rows fed with the frames; grows while text_open
    frames: list[np.ndarray] = field(default_factory=list)  # [16] codes per frame
    finished: bool = False
    reason: str = ""  # "eos", "length" or an error
    codec: CodecStream = field(default_factory=CodecStream)
    audio: list[np.ndarray] = field(default_factory=list)  # PCM chunks, in order

    def __post_init__(self) -> None:
        self.pending = self.embeds.prefill
        self.trailing = self.embeds.trailing

    @property
    def rows(self) -> np.ndarray:
        """The pending input, for a sequence the next talker call feeds (it has some)."""
        if self.pending is None:
            raise RuntimeError(f"sequence {self.id} has no pending input")
        return self.pending

    @property
    def num_frames(self) -> int:
        return len(self.frames)

    def take_audio(self) -> list[np.ndarray]:
        """PCM chunks decoded since the last call, in order."""
        chunks, self.audio = self.audio, []
        return chunks

    @property
    def codes(self) -> np.ndarray:
        return np.stack(self.frames) if self.frames else np.zeros((0, SUBCODE_STEPS + 1), np.int64)

    @property
    def pcm(self) -> np.ndarray:
        return np.concatenate(self.audio) if self.audio else np.zeros(0, np.float32)


class Draws:
    """A request's uniform draws, [frames, 16]: per frame one for group 0 and 15 for the
    subcode, in the order a per-request generator yields them (so a seed reproduces a request
    in any batch, the native runner makes the same draws, and a frame cap that grows with an
    open text continues the same sequence)."""

    def __init__(self, seed: int | None) -> None:
        self._rng = np.random.default_rng(seed)
        self._back = np.zeros((0, SUBCODE_STEPS + 1))  # drawn, given back unused

    def next(self, frames: int) -> np.ndarray:
        frames = max(0, frames)
        back, self._back = self._back[:frames], self._back[frames:]
        return np.concatenate([back, self._rng.random((frames - back.shape[0], SUBCODE_STEPS + 1))])

    def unread(self, rows: np.ndarray) -> None:
        """Give back the last draws taken (a cap that could not grow yet): `next` returns them again."""
        self._back = np.concatenate([rows, self._back])


@dataclass
class RunnerGraphs:
    """The graphs the Python runner steps through, compiled for one chunk schedule."""

    talker: ov.CompiledModel  # paged (engine/graphs.py to_paged)
    subcode: ov.CompiledModel
    codec: StreamingCodec | None  # None: offline (no codec chunk graphs)
    block_size: int  # tokens per KV block, as compiled
    kv_block_bytes: int  # one block of every layer's key and value cache, as compiled

    @classmethod
    def compile(cls, model: LoadedModel, schedule: ChunkSchedule) -> RunnerGraphs:
        core = model.core
        subcode = core.compile_model(core.read_model(model.dir / "subcode.xml"), model.devices["subcode"],
                                     model.properties("subcode"))
        paged = to_paged(core.read_model(model.dir / "talker.xml"), model.spec.talker.stack.num_layers)
        talker = core.compile_model(paged, model.devices["talker"], model.properties("talker", model.kv_precision))
        block_size = int(talker.input("value_cache.0").get_partial_shape()[2].get_length())
        block_bytes = sum(port.get_element_type().size * int(np.prod([d.get_length() for d in list(
            port.get_partial_shape())[1:]])) for port in talker.inputs if _is_cache(port.get_any_name()))
        codec = None if schedule.offline else compile_codec(model, (schedule.first, schedule.steady))
        return cls(talker, subcode, codec, block_size, block_bytes)


def compile_codec(model: LoadedModel, chunks: tuple[int, int]) -> StreamingCodec:
    """The codec chunk graphs a (first, steady) schedule needs (LoadedModel.codec_graphs), compiled."""

    def compile_chunk(path: Path) -> ov.CompiledModel:
        graph = model.core.read_model(path)
        if model.decoder_batch:
            fix_batch(graph, model.decoder_batch)
        return model.core.compile_model(graph, model.devices["decoder"], model.properties("decoder"))

    paths = model.codec_graphs(chunks)
    return StreamingCodec({n: compile_chunk(p) for n, p in paths["first"].items()},
                          {n: compile_chunk(p) for n, p in paths["steady"].items()}, chunks)


def _is_cache(name: str) -> bool:
    return name.startswith(("key_cache.", "value_cache."))


class Runner:
    """Owns the paged KV cache of one LoadedModel and steps sequences through it."""

    def __init__(self, model: LoadedModel, num_blocks: int | None = 256, schedule: ChunkSchedule = ChunkSchedule(),
                 prefill_chunk: int = 256, prefix_cache: bool = True, kv_cache_bytes: int = 0,
                 graphs: RunnerGraphs | None = None) -> None:
        """num_blocks: the KV pool's size (None: as many blocks as fit kv_cache_bytes).
        graphs: compiled already for this schedule (default: compiled here).
        prefill_chunk: prompt tokens a sequence feeds per step. Fixed per sequence (not
        shared out by batch) so that a request computes the same numbers in any batch.
        prefix_cache: keep the KV of voice prefixes (module docstring; only for a talker
        on the CPU, whose cache tensors are host memory the runner can copy)."""
        if prefill_chunk < 1:
            raise ValueError("prefill_chunk must be >= 1")
        self.model = model
        self.schedule = schedule
        self.prefill_chunk = prefill_chunk
        self.graphs = graphs = graphs or RunnerGraphs.compile(model, schedule)
        codec = graphs.codec
        first, steady = (sorted(codec.first), sorted(codec.steady)) if codec else ([], [])
        if not schedule.offline and (schedule.first not in first + steady or schedule.steady not in steady):
            raise ValueError(f"no codec graphs for chunks first={schedule.first} steady={schedule.steady} "
                             f"(compiled: first {first}, steady {steady})")
        num_blocks = num_blocks or max(1, kv_cache_bytes // graphs.kv_block_bytes)
        self.pool = BlockPool(num_blocks, graphs.block_size)
        self.prefix_cache = prefix_cache and prefix_cache_supported(model.devices["talker"])
        self._talker = graphs.talker.create_infer_request()
        self._subcode = graphs.subcode.create_infer_request()
        self._cache_rows: list[np.ndarray] = []  # each cache tensor's bytes, one row per block
        for port in graphs.talker.inputs:
            name = port.get_any_name()
            if _is_cache(name):
                shape = [num_blocks] + [d.get_length() for d in list(port.get_partial_shape())[1:]]
                tensor = ov.Tensor(port.get_element_type(), shape)
                self._talker.set_tensor(name, tensor)
                self._cache_rows.append(tensor.data.view(np.uint8).reshape(num_blocks, -1))  # shares its memory
        self.active: list[Sequence] = []
        self._next_id = 0
        self._primed: OrderedDict[bytes, dict[str, np.ndarray]] = OrderedDict()
        self.times = StepTimes()

    @property
    def block_size(self) -> int:
        return self.graphs.block_size

    @property
    def kv_block_bytes(self) -> int:
        return self.graphs.kv_block_bytes

    @property
    def _codec(self) -> StreamingCodec:
        if self.graphs.codec is None:
            raise RuntimeError("the runner was built for an offline schedule: no codec chunk graphs")
        return self.graphs.codec

    @property
    def capacity_tokens(self) -> int:
        return self.pool.num_blocks * self.pool.block_size

    def frame_budget(self, prompt_tokens: int, max_frames: int) -> int:
        return frame_budget(self, prompt_tokens, max_frames)

    def can_admit(self, prompt_tokens: int, max_frames: int) -> bool:
        return can_admit(self, prompt_tokens, max_frames)

    def add(self, embeds: PromptEmbeds, params: SamplingParams, max_frames: int | None = None,
            text_open: bool = False, prefix_len: int = 0) -> Sequence:
        """Start a sequence with room reserved for its prompt and every frame it may make.
        Raises ValueError when its prompt can never fit the cache, MemoryError when the
        pool cannot reserve it now (see can_admit). text_open: its trailing text grows
        through `extend` until closed. prefix_len: the prompt's leading positions that
        depend only on the voice (Prompt.prefix_len; 0: nothing for the prefix cache)."""
        frames = params.frame_limit(max_frames)
        length = embeds.prefill.shape[0]
        frames = self.frame_budget(length, frames)
        draws = Draws(params.seed)
        seq = Sequence(self._next_id, embeds, params, frames, draws.next(frames), draws,
                       codec=self._codec_stream(embeds.codec_prefix), text_open=text_open)
        self.pool.reserve(seq.id, length + frames)
        self._next_id += 1
        if seq.max_frames == 0:
            self._finish(seq, "length")
        else:
            self._start_prefix(seq, prefix_len)
            self.active.append(seq)
        return seq

    def _start_prefix(self, seq: Sequence, prefix_len: int) -> None:
        """A cached prefix is copied into the sequence's first blocks, and only the rest of the
        prompt is fed; an uncached one is fed alone first and then pinned (`_pin_prefix`).
        The last prefix position stays with the rest (module docstring)."""
        shared = prefix_len - 1
        if not self.prefix_cache or shared < 1 or shared >= seq.rows.shape[0]:
            return
        seq.prefix_tokens = shared
        key = np.ascontiguousarray(seq.embeds.prefill[:shared], np.float32).tobytes()
        pinned = self.pool.lookup(key)
        if pinned is None:
            seq.prefix_key = key
            return
        table = self.pool.grow(seq.id, shared)
        self._copy_blocks(pinned, table[:len(pinned)])
        seq.cached, seq.pending = shared, seq.rows[shared:]

    def _pin_prefix(self, seq: Sequence) -> None:
        """Copy the blocks of a prefix just computed into blocks the cache pins (when the pool
        has blocks no reservation needs), before the sequence writes on into its last one."""
        key, seq.prefix_key = seq.prefix_key, None
        assert key is not None  # called while the sequence's prefix is to be pinned
        count = self.pool.blocks_for(seq.prefix_tokens)
        pinned = self.pool.pin(key, count)
        if pinned is not None:
            self._copy_blocks(self.pool.tables[seq.id][:count], pinned)

    def _copy_blocks(self, source: list[int], target: list[int]) -> None:
        """Every layer's keys and values of blocks `source` into blocks `target`: whole rows of
        each cache tensor, so quantization scales stored in a block travel with it."""
        for rows in self._cache_rows:
            rows[target] = rows[source]

    def extend(self, seq: Sequence, rows: np.ndarray, closed: bool, max_frames: int) -> bool:
        """More text for an open sequence: trailing-text rows [n, H], whether the text is now
        complete, and its frame cap for the longer text. Returns False, changing nothing,
        while the pool cannot reserve that cap (try again when blocks return)."""
        if seq.finished:
            return True
        if not seq.text_open:
            raise ValueError(f"sequence {seq.id} has no open text")
        length = seq.embeds.prefill.shape[0]
        frames = max(seq.max_frames, self.frame_budget(length, max_frames))
        try:
            self.pool.reserve(seq.id, length + frames)
        except MemoryError:
            return False
        seq.uniforms = np.concatenate([seq.uniforms, seq.draws.next(frames - seq.max_frames)])
        seq.max_frames, seq.text_open = frames, not closed
        seq.trailing = np.concatenate([seq.trailing, rows.astype(np.float32)])
        if seq.held is not None:
            self._feed_frame(seq, seq.held)
        return True

    def _feed_frame(self, seq: Sequence, frame: np.ndarray) -> None:
        """The talker's next input: the frame's embedding plus trailing text row t (t = the
        frame's index), or the pad once the text has run out; held while an open text has
        no row t yet (feeding a pad would tell the model the text is over)."""
        t = len(seq.frames) - 1
        if t < seq.trailing.shape[0]:
            seq.pending, seq.held = (frame + seq.trailing[t])[None, :], None
        elif seq.text_open:
            seq.pending, seq.held = None, frame
        else:
            seq.pending, seq.held = (frame + self.model.tts_pad)[None, :], None

    def _codec_stream(self, prefix: np.ndarray | None) -> CodecStream:
        """A new sequence's codec stream: fresh, or primed with reference codes [R, 16]
        (in-context cloning). Primed states are kept for the last few references, since a
        cloned voice primes the same codes for every sentence."""
        if prefix is None or self.schedule.offline:
            return CodecStream()
        key = hashlib.sha256(np.ascontiguousarray(prefix, np.int64).tobytes()).digest()
        state = self._primed.pop(key, None)
        if state is None:
            begin = time.perf_counter()
            primed = self._codec.prime(np.asarray(prefix, np.int64).T).state
            assert primed is not None  # a primed stream has a state
            state = primed
            elapsed = time.perf_counter() - begin
            self.times.codec_s += elapsed
            log.info("codec primed with %d reference frames in %.2f s", prefix.shape[0], elapsed)
        self._primed[key] = state
        while len(self._primed) > PRIMED_STATES:
            self._primed.popitem(last=False)
        return CodecStream(state=state)

    def _finish(self, seq: Sequence, reason: str) -> None:
        seq.finished, seq.reason, seq.pending, seq.held = True, reason, None, None
        self.pool.release(seq.id)

    def abort(self, seq: Sequence, reason: str = "aborted") -> None:
        if not seq.finished:
            self._finish(seq, reason)
        self.active = [s for s in self.active if s is not seq]

    def step(self) -> list[Sequence]:
        """Advance every active sequence by one frame; returns those that finished."""
        start, t = time.perf_counter(), self.times
        inference = t.talker_s + t.subcode_s + t.codec_s
        batch = [s for s in self.active if not s.finished and s.pending is not None]
        if batch:
            sampled, logits, hidden = self._run_talker(batch)
            go = self._sample_code0(sampled, logits)
            if go:
                self._run_subcode(go, hidden, sampled)
        if not self.schedule.offline:
            self._decode_ready(self.active)
        done = [s for s in self.active if s.finished]
        self.active = [s for s in self.active if not s.finished]
        t.steps += 1
        t.host_s += time.perf_counter() - start - (t.talker_s + t.subcode_s + t.codec_s - inference)
        return done

    def _next_chunk(self, seq: Sequence) -> tuple[int, np.ndarray] | None:
        """(graph size, codes [16, m]) of the sequence's next codec call, if one is due: a
        full chunk, or the final partial one once the sequence has finished."""
        size = self.schedule.first if seq.codec.frames == 0 else self.schedule.steady
        ready = len(seq.frames) - seq.codec.frames
        if ready >= size or (seq.finished and ready > 0):
            take = min(size, ready)
            return size, np.stack(seq.frames[seq.codec.frames:seq.codec.frames + take]).T
        return None

    def _decode_ready(self, seqs: list[Sequence]) -> None:
        """Decode every due chunk, one call per chunk size for all sequences that need it;
        repeats while some sequence still has a due chunk (at most one chunk per sequence
        per call, since its state moves on)."""
        for _ in range(len(seqs) * 4 + 4):
            due: dict[int, list[tuple[Sequence, np.ndarray]]] = {}
            for seq in seqs:
                chunk = self._next_chunk(seq)
                if chunk is not None:
                    due.setdefault(chunk[0], []).append((seq, chunk[1]))
            if not due:
                return
            for size, items in due.items():
                begin = time.perf_counter()
                pcms = self._codec.decode([s.codec for s, _ in items], [c for _, c in items], size)
                self.times.codec_s += time.perf_counter() - begin
                for (seq, _), pcm in zip(items, pcms):
                    seq.audio.append(pcm)
        raise AssertionError("codec decoding did not converge")

    def _run_talker(self, batch: list[Sequence]) -> tuple[list[Sequence], np.ndarray, np.ndarray]:
        """One paged call: decode rows and prefill chunks of every sequence. Returns the
        sequences whose input is now all in the cache (they sample), with their logits and
        hidden rows; a sequence still mid-prefill gets no row."""
        feeds = [s.rows[:self._feed_rows(s)] for s in batch]
        counts = [f.shape[0] for f in feeds]
        begins = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        tables = [self.pool.grow(s.id, s.cached + n) for s, n in zip(batch, counts)]
        last = [s.rows.shape[0] == n for s, n in zip(batch, counts)]
        rows = (begins[1:] - 1)[last] if any(last) else begins[:1]  # the graph wants at least one row
        inputs = {
            "inputs_embeds": np.concatenate(feeds).astype(np.float32),
            "position_ids": np.concatenate([np.arange(s.cached, s.cached + n) for s, n in zip(batch, counts)]),
            "past_lens": np.array([s.cached for s in batch], np.int32),
            "subsequence_begins": begins,
            "block_indices": np.concatenate(tables).astype(np.int32),
            "block_indices_begins": np.concatenate([[0], np.cumsum([len(t) for t in tables])]).astype(np.int32),
            "max_context_len": np.array(max(s.cached + n for s, n in zip(batch, counts)), np.int32),
            "sample_rows": rows.astype(np.int64),
        }
        begin = time.perf_counter()
        out = self._talker.infer(inputs)
        self.times.talker_s += time.perf_counter() - begin
        for s, n, done in zip(batch, counts, last):
            s.cached += n
            s.pending = None if done else s.rows[n:]
            if s.prefix_key is not None and s.cached == s.prefix_tokens:
                self._pin_prefix(s)
        return [s for s, done in zip(batch, last) if done], out["logits"], out["hidden"]

    def _feed_rows(self, seq: Sequence) -> int:
        """Rows of the sequence's pending input the next talker call feeds: a prefill chunk,
        which stops at the end of a prefix to be cached, and leaves no single prompt row for a
        call of its own (one row over cached positions takes another kernel: last-bit
        differences from one call over the whole prompt, docs/OPENVINO.md §3)."""
        left = (seq.prefix_tokens if seq.cached < seq.prefix_tokens else seq.cached + seq.rows.shape[0]) - seq.cached
        rows = min(self.prefill_chunk, left)
        return rows - 1 if left - rows == 1 and rows > 1 else rows

    def _sample_code0(self, batch: list[Sequence], logits: np.ndarray) -> list[int]:
        """Pick each sequence's group-0 code; returns the batch rows that go on to the subcode."""
        spec = self.model.spec
        go = []
        for row, seq in enumerate(batch):
            p = seq.params
            history = np.array([f[0] for f in seq.frames], np.int64)
            z = process_talker_logits(logits[row], history, len(seq.frames), p.repetition_penalty,
                                      spec.codec_ids.eos, spec.talker.vocab_size, p.min_frames)
            uniform = seq.uniforms[len(seq.frames), 0]
            code = sample_row(z, p.temperature, p.top_k, p.top_p, uniform) if p.do_sample else int(np.argmax(z))
            if code == spec.codec_ids.eos:
                self._finish(seq, "eos")
            else:
                seq.frames.append(np.array([code] + [0] * SUBCODE_STEPS, np.int64))
                go.append(row)
        return go

    def _run_subcode(self, rows: list[int], hidden: np.ndarray, batch: list[Sequence]) -> None:
        seqs = [batch[r] for r in rows]
        sampled = [s.params.subtalker_do_sample for s in seqs]
        inputs = {
            "hidden": hidden[rows].astype(np.float32),
            "code0": np.array([s.frames[-1][0] for s in seqs], np.int64),
            "temperature": np.array([s.params.subtalker_temperature if d else 0.0 for s, d in zip(seqs, sampled)],
                                    np.float32),
            "top_k": np.array([s.params.subtalker_top_k for s in seqs], np.int64),
            "top_p": np.array([s.params.subtalker_top_p for s in seqs], np.float32),
            "uniform": np.stack([s.uniforms[len(s.frames) - 1, 1:] for s in seqs]).astype(np.float32),
        }
        begin = time.perf_counter()
        out = self._subcode.infer(inputs)
        self.times.subcode_s += time.perf_counter() - begin
        for i, seq in enumerate(seqs):
            seq.frames[-1][1:] = out["codes"][i]
            self._feed_frame(seq, out["frame_embedding"][i].copy())
            if len(seq.frames) >= seq.max_frames:
                self._finish(seq, "length")


def prefix_cache_supported(device: str) -> bool:
    """Whether the runners copy KV blocks of a talker on this device (the prefix cache): the
    CPU plugin computes in the host tensors the runner allocated, which it can copy; whether
    another device's plugin keeps the cache there is not established."""
    return device.split(".")[0] == "CPU"
