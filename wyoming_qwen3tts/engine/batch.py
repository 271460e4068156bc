"""The batch: the running sequences and the KV block pool they live in. Each step it plans one
talker call for every sequence with input (engine/step.py), hands the plan to the runner (the
executor, Python or native), and applies what comes back: codes, EOS, the next input, the
codec chunks now due and their PCM. This is the one place a sequence's bookkeeping lives
(what is cached, which blocks, when it ends); the scheduler above admits, times out and aborts.

The prefix cache: a prompt's first positions (instruct, role, codec prefix: Prompt.prefix_len)
depend only on the voice, so their keys and values are the same in every request of that
voice. A sequence whose prefix is cached starts with copies of the pinned blocks
(`BlockPool.pin`) in its own first blocks and feeds only the rest of its prompt; one whose
prefix is not cached feeds the prefix alone first and then pins a copy. Either way the rest
is computed over a cached prefix, so a request's numbers do not depend on whether its prefix
was cached. With OpenVINO's talker one prefix position is left to the rest: the CPU's paged
attention computes two or more rows over cached positions with the same bits as one call over
all of them, but a single row goes through its decode kernel (last-bit differences) — so with
an f32 KV cache the codes are exactly those without the cache (docs/OPENVINO.md §3). For the
same reason no prefill chunk leaves a single prompt row to a call of its own. The runner's own
talker computes a row the same way however rows are split (`Runner.rows_exact`), so there the
whole prefix is cached: a streaming-layout prompt's first step is then one row.

Codec chunks: a stream's first chunk is short and the rest long (ChunkSchedule), except that
a paced sequence (its audio is played as it arrives) decodes short chunks while it is barely
ahead of playback (engine/pacing.py), where the runner has a stateful graph of the short
length. Either way the decoded audio is the same (the steady graphs decode any split exactly).
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import numpy as np

from ..model.embed import PromptEmbeds
from .audio import SAMPLE_RATE
from .blocks import BlockPool
from .codec_lead import CodecLead
from .loaded_model import LoadedModel
from .pacing import Pacer
from .sampling import SamplingParams
from .sequence import Draws, Sequence
from .step import ChunkSchedule, CodecChunk, Runner, Sampling, StepOutput, StepPlan, StepTimes


class Batch:
    """Owns the block pool and the sequences; steps them through a runner."""

    def __init__(self, model: LoadedModel, runner: Runner, num_blocks: int, schedule: ChunkSchedule,
                 prefill_chunk: int = 256, prefix_cache: bool = True, lead: CodecLead | None = None) -> None:
        """num_blocks: the KV pool's size (the runner allocates it). prefill_chunk: prompt
        tokens a sequence feeds per step, fixed per sequence (not shared out by batch) so
        that a request computes the same numbers in any batch. prefix_cache: keep the KV of
        voice prefixes (module docstring), where the runner can copy blocks. lead: the
        decoder of the start of a stream's first frame (engine/codec_lead.py), used where the
        runner paces; its audio goes to `on_audio` at once, mid-step."""
        if prefill_chunk < 1:
            raise ValueError("prefill_chunk must be >= 1")
        self.model, self.runner, self.schedule = model, runner, schedule
        self.prefill_chunk = prefill_chunk
        self.prefix_cache = prefix_cache and runner.can_copy_blocks
        self.rows_exact = runner.rows_exact  # read once: _feed_rows runs for every sequence every step
        runner.allocate_kv(num_blocks)
        self.pool = BlockPool(num_blocks, runner.block_size)
        self.active: list[Sequence] = []
        self._next_id = 0
        self._copies: list[tuple[int, int]] = []  # KV blocks to copy before the next talker call
        self._steps, self._host_s = 0, 0.0
        frame_s = model.spec.codec_decoder.samples_per_frame / SAMPLE_RATE
        self.pacer = Pacer(schedule.first, schedule.steady, frame_s) if runner.can_pace else None
        self.lead = lead if self.pacer is not None and not schedule.offline else None
        self.on_audio: Callable[[Sequence], None] | None = None  # a sequence has audio before the step ends

    @property
    def times(self) -> StepTimes:
        t = self.runner.times
        return StepTimes(self._steps, t.talker_s, t.subcode_s, t.codec_s, self._host_s)

    @property
    def capacity_tokens(self) -> int:
        return self.pool.num_blocks * self.pool.block_size

    def frame_budget(self, prompt_tokens: int, max_frames: int) -> int:
        """Frames a sequence may generate: its cap, cut to what the cache can ever hold.
        Raises ValueError when the prompt alone can never fit."""
        limit = min(self.capacity_tokens, self.model.spec.talker.stack.max_position_embeddings)
        if prompt_tokens + 1 > limit:
            raise ValueError(f"prompt of {prompt_tokens} tokens does not fit the KV cache ({limit} tokens)")
        return max(0, min(max_frames, limit - prompt_tokens))

    def can_admit(self, prompt_tokens: int, max_frames: int) -> bool:
        """Whether the pool can reserve this sequence's worst case now."""
        return self.pool.can_reserve(prompt_tokens + self.frame_budget(prompt_tokens, max_frames))

    # --- sequences in and out ---
    def add(self, embeds: PromptEmbeds, params: SamplingParams, max_frames: int | None = None,
            text_open: bool = False, prefix_len: int = 0, paced: bool = False) -> Sequence:
        """Start a sequence with room reserved for its prompt and every frame it may make.
        Raises ValueError when its prompt can never fit the cache, MemoryError when the
        pool cannot reserve it now (see can_admit). text_open: its trailing text grows
        through `extend` until closed. prefix_len: the prompt's leading positions that
        depend only on the voice (Prompt.prefix_len; 0: nothing for the prefix cache).
        paced: its audio is played as it arrives (module docstring)."""
        length = embeds.prefill.shape[0]
        frames = self.frame_budget(length, params.frame_limit(max_frames))
        seq = Sequence(self._next_id, embeds, params, frames, Draws(params.seed), text_open=text_open, paced=paced)
        self.pool.reserve(seq.id, length + frames)
        self._next_id += 1
        if frames == 0:
            self._finish(seq, "length")
            return seq
        self.runner.open_stream(seq.id, embeds.codec_prefix)  # an offline runner ignores it
        self._start_prefix(seq, prefix_len)
        self.active.append(seq)
        return seq

    def extend(self, seq: Sequence, rows: np.ndarray, closed: bool, max_frames: int) -> bool:
        """More text for an open sequence: trailing-text rows [n, H], whether the text is now
        complete, and its frame cap for the longer text. Returns False, changing nothing,
        while the pool cannot reserve that cap (try again when blocks return)."""
        if seq.finished:
            return True
        if not seq.text_open:
            raise ValueError(f"sequence {seq.id} has no open text")
        frames = max(seq.max_frames, self.frame_budget(seq.prompt_tokens, max_frames))
        try:
            self.pool.reserve(seq.id, seq.prompt_tokens + frames)
        except MemoryError:
            return False
        seq.grow(frames)
        seq.text_open = not closed
        seq.trailing = np.concatenate([seq.trailing, rows.astype(np.float32)])
        if seq.held is not None:
            seq.feed_frame(seq.held, self.model.tts_pad)
        return True

    def abort(self, seq: Sequence, reason: str = "aborted") -> None:
        if not seq.finished:
            self._finish(seq, reason)
        self.runner.close_stream(seq.id)
        self.active = [s for s in self.active if s is not seq]

    def _finish(self, seq: Sequence, reason: str) -> None:
        seq.finished, seq.reason, seq.pending, seq.held = True, reason, None, None
        self.pool.release(seq.id)

    # --- the prefix cache ---
    def _start_prefix(self, seq: Sequence, prefix_len: int) -> None:
        """A cached prefix is copied into the sequence's first blocks, and only the rest of the
        prompt is fed; an uncached one is fed alone first and then pinned (`_pin_prefix`).
        The last prefix position stays with the rest unless the runner's rows are exact
        (module docstring)."""
        shared = prefix_len - (0 if self.rows_exact else 1)
        if not self.prefix_cache or shared < 1 or shared >= seq.rows.shape[0]:
            return
        seq.prefix_tokens = shared
        key = np.ascontiguousarray(seq.embeds.prefill[:shared], np.float32).tobytes()
        pinned = self.pool.lookup(key)
        if pinned is None:
            seq.prefix_key = key
            return
        table = self.pool.grow(seq.id, shared)
        self._copies += zip(pinned, table[:len(pinned)])
        seq.cached, seq.pending = shared, seq.rows[shared:]

    def _pin_prefix(self, seq: Sequence) -> None:
        """Copy the blocks of a prefix just computed into blocks the cache pins (when the pool
        has blocks no reservation needs); the copy runs before the next talker call, so before
        the sequence writes on into its last prefix block."""
        key, seq.prefix_key = seq.prefix_key, None
        assert key is not None  # called while the sequence's prefix is to be pinned
        count = self.pool.blocks_for(seq.prefix_tokens)
        pinned = self.pool.pin(key, count)
        if pinned is not None:
            self._copies += zip(self.pool.tables[seq.id][:count], pinned)

    def close(self) -> None:
        """Free the runner's graphs and drop the codec lead now (Scheduler.close): a compiled
        decoder shared with other models goes with the last batch using it (engine/decoders.py)."""
        self.runner.close()
        self.lead = None

    # --- one step ---
    def step(self) -> list[Sequence]:
        """Advance every sequence with input by one talker call (a frame, or a prefill chunk)
        and decode the chunks now due; returns the sequences that finished."""
        start, inference = time.perf_counter(), self.runner.times.inference_s
        batch = [s for s in self.active if s.pending is not None]
        if batch:
            plan, sampled = self._plan(batch)
            self._apply(sampled, self.runner.forward(plan))
            if self.pacer is not None and len(sampled) == len(batch) == plan.embeds.shape[0]:  # a decode step
                self.pacer.generated(len(batch), time.perf_counter() - start)
        if not self.schedule.offline:
            self._decode_due()
        done = [s for s in self.active if s.finished]
        self.active = [s for s in self.active if not s.finished]
        for seq in done:
            self.runner.close_stream(seq.id)
        self._steps += 1
        self._host_s += time.perf_counter() - start - (self.runner.times.inference_s - inference)
        return done

    def _plan(self, batch: list[Sequence]) -> tuple[StepPlan, list[Sequence]]:
        """The talker call of this step: decode rows and prefill chunks of every sequence.
        Sequences whose input is then all in the cache sample (returned in row order); one
        still mid-prefill gets no row."""
        counts = [self._feed_rows(s) for s in batch]
        tables = [self.pool.grow(s.id, s.cached + n) for s, n in zip(batch, counts)]
        last = [s.rows.shape[0] == n for s, n in zip(batch, counts)]
        sampled = [s for s, done in zip(batch, last) if done]
        begins = [0, *itertools.accumulate(counts)]
        copies, self._copies = self._copies, []
        plan = StepPlan(  # lists, not numpy operations: a decode step's arrays are a few numbers each
            copies=np.array(copies, np.int32).reshape(-1, 2),
            embeds=np.concatenate([s.rows[:n] for s, n in zip(batch, counts)]).astype(np.float32, copy=False),
            positions=np.array([p for s, n in zip(batch, counts) for p in range(s.cached, s.cached + n)], np.int64),
            past_lens=np.array([s.cached for s in batch], np.int32),
            begins=np.array(begins, np.int32),
            block_indices=np.array([b for t in tables for b in t], np.int32),
            block_begins=np.array([0, *itertools.accumulate(len(t) for t in tables)], np.int32),
            max_context=max(s.cached + n for s, n in zip(batch, counts)),
            sample_rows=np.array([begins[i + 1] - 1 for i, done in enumerate(last) if done] or [0], np.int64),
            sampling=[Sampling(s.params, s.history, s.uniforms[s.num_frames]) for s in sampled],
        )
        for s, n, done in zip(batch, counts, last):
            s.cached += n
            s.pending = None if done else s.rows[n:]
            if s.prefix_key is not None and s.cached == s.prefix_tokens:
                self._pin_prefix(s)
        return plan, sampled

    def _feed_rows(self, seq: Sequence) -> int:
        """Rows of the sequence's pending input the next talker call feeds: a prefill chunk,
        which stops at the end of a prefix to be cached, and leaves no single prompt row for a
        call of its own (one row over cached positions takes another kernel: last-bit
        differences from one call over the whole prompt, docs/OPENVINO.md §3)."""
        left = (seq.prefix_tokens if seq.cached < seq.prefix_tokens else seq.cached + seq.rows.shape[0]) - seq.cached
        rows = min(self.prefill_chunk, left)
        return rows - 1 if left - rows == 1 and rows > 1 and not self.rows_exact else rows

    def _apply(self, sampled: list[Sequence], out: StepOutput) -> None:
        """Each sampled sequence's frame (or its end on EOS or its frame cap), and its next input."""
        eos = self.model.spec.codec_ids.eos
        for seq, codes, embedding in zip(sampled, out.codes, out.embeddings):
            if codes[0] == eos:
                self._finish(seq, "eos")
                continue
            seq.add_frame(codes)
            seq.feed_frame(embedding, self.model.tts_pad)
            if seq.num_frames >= seq.max_frames:
                self._finish(seq, "length")

    def chunk_frames(self, seq: Sequence) -> int:
        """Frames per chunk the sequence's audio comes in from here on, as far as a listener
        who plays it as it arrives is concerned: short while the engine keeps a paced sequence
        supplied with short chunks (it takes long ones only once they would not leave a gap)."""
        if seq.paced and self.pacer is not None and self.pacer.keeps_up(self._stepping()):
            return self.schedule.first
        return self.schedule.steady

    def frame_rate(self, seq: Sequence) -> float | None:
        """Frames per second a paced sequence is expected to get at the current batch size,
        before its own pace can be measured. None: not measured yet, not paced, short chunks
        do not keep up, or its text is still arriving, which may set a slower pace (one frame
        per text token at most)."""
        stepping = self._stepping()
        if not seq.paced or seq.text_open or self.pacer is None or not self.pacer.keeps_up(stepping):
            return None
        return self.pacer.short_rate(stepping)

    def _stepping(self) -> int:
        """Sequences the next decode step runs (the batch size the pacer measures steps by);
        one sitting out for text does not count."""
        return max(1, sum(s.pending is not None for s in self.active))

    def _due(self, seq: Sequence, now: float) -> CodecChunk | None:
        """The sequence's next codec chunk, if one is due: a full chunk, the final partial
        one once the sequence has finished, or a paced sequence's short one while it is
        barely ahead of playback (assumed to start with its first audio)."""
        size = self.schedule.first if seq.decoded == 0 else self.schedule.steady
        ready = seq.num_frames - seq.decoded
        if ready >= size or (seq.finished and ready > 0):
            return CodecChunk(seq.id, seq.chunk(size), size)
        if ready > 0 and seq.paced and self.pacer is not None and seq.first_audio_at is not None:
            ahead_s = seq.decoded * self.pacer.frame_s - (now - seq.first_audio_at)
            if self.pacer.short_due(self._stepping(), ahead_s, ready):
                size = self.pacer.call_size(ready)
                return CodecChunk(seq.id, seq.chunk(size), size)
        return None

    def _lead(self) -> None:
        """The start of each new stream's first frame, out before the rest of the step
        (engine/codec_lead.py): where the frame's whole decoding will not finish first (it
        has not ended), the stream starts fresh (no reference codes in front) and that
        decoding is measured to come before the lead has played."""
        assert self.lead is not None and self.pacer is not None
        new = [s for s in self.active if s.num_frames and not s.decoded and not s.led and not s.finished
               and s.embeds.codec_prefix is None]
        if not new or not self.pacer.lead_keeps_up(self.lead.samples / SAMPLE_RATE, len(new)):
            return
        for seq in new:
            seq.audio.append(self.lead(seq.chunk(1)[0]))
            seq.led, seq.first_audio_at = self.lead.samples, time.perf_counter()
            if self.on_audio is not None:
                self.on_audio(seq)

    def _decode_due(self) -> None:
        """Decode every due chunk; repeats while some sequence still has one (a runner
        decodes at most one chunk per stream per call, since its state moves on)."""
        if self.lead is not None:
            self._lead()
        for _ in range(len(self.active) * (self.schedule.steady + 2) + 4):  # a paced one may take 1 frame a call
            start = time.perf_counter()
            due = [(s, c) for s in self.active if (c := self._due(s, start)) is not None]
            if not due:
                return
            decoded = self.runner.decode([c for _, c in due])
            end = time.perf_counter()
            sizes = {c.size for _, c in due}
            if self.pacer is not None and len(sizes) == 1:
                self.pacer.decoded(sizes.pop(), len(due), end - start)
            for (seq, chunk), pcm in zip(due, decoded):
                if seq.decoded == 0 and seq.led:
                    pcm = pcm[seq.led:]  # the lead's samples are out already
                elif seq.decoded == 0:
                    seq.first_audio_at = end
                seq.decoded += chunk.codes.shape[0]
                seq.audio.append(pcm)
        raise AssertionError("codec decoding did not converge")
