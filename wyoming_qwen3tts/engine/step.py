"""The engine line: what the batch (engine/batch.py, which owns the KV block pool and the
sequences) asks of a runner, and what a runner returns.

A runner is an executor and keeps no sequence bookkeeping. Each step the batch hands it a
`StepPlan` — KV blocks to copy, the rows every sequence feeds with their positions and block
tables, and how to sample the sequences that finish their input — and gets back each sampled
sequence's 16 codes and the embedding of its frame (`StepOutput`). Then it asks for the codec
chunks that are due (`CodecChunk` → PCM). A runner's only per-sequence state is its codec
streams' decoder state, opened and closed by the batch. Two runners implement this: the
Python reference (engine/runner.py) and the native one (engine/native.py over native/). What
both follow besides — the codec chunk schedule, how many primed decoder states they keep,
when short chunks can run and where the prefix cache can copy blocks — is here too.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from .sampling import SamplingParams

if TYPE_CHECKING:  # the contract imports no model code at run time
    from .loaded_model import LoadedModel

SUBCODE_STEPS = 15  # codebooks 1-15, filled by one subcode call per frame
GROUPS = SUBCODE_STEPS + 1  # codes per frame
PRIMED_STATES = 32  # decoder states primed with reference codes (in-context clones), ≈5 MB each at full size


@dataclass(frozen=True)
class ChunkSchedule:
    """Frames per codec call: `first` for a stream's first chunk (latency), `steady` after
    (throughput). `offline` decodes nothing while generating (decode the codes at the end)."""

    first: int = 1
    steady: int = 8
    offline: bool = False


@dataclass
class Sampling:
    """How to pick the codes of one sampled row (a sequence whose input is all fed)."""

    params: SamplingParams
    history: np.ndarray  # [frames] int64: the sequence's group-0 codes so far (repetition penalty, min_frames)
    uniforms: np.ndarray  # [16] float64: this frame's draws, group 0 then the 15 subcode steps


@dataclass
class StepPlan:
    """One paged talker call for every sequence with input, then the sampling of those whose
    input is now all in the cache. The arrays are the paged graph's inputs (docs/OPENVINO.md)."""

    copies: np.ndarray  # [c, 2] int32: KV blocks (source, target), copied in order before the call
    embeds: np.ndarray  # [T, H] float32: every fed row, sequence after sequence
    positions: np.ndarray  # [T] int64
    past_lens: np.ndarray  # [n] int32: tokens each sequence has in the cache already
    begins: np.ndarray  # [n + 1] int32: where each sequence's rows begin in `embeds`
    block_indices: np.ndarray  # int32: every sequence's block table, one after another
    block_begins: np.ndarray  # [n + 1] int32: where each table begins in `block_indices`
    max_context: int  # the longest sequence's cached + fed tokens
    sample_rows: np.ndarray  # [k] int64: rows of `embeds` whose output is sampled (a sequence's last);
    # [0] when k = 0, since the graph wants at least one row
    sampling: list[Sampling]  # [k], in the order of sample_rows


@dataclass
class StepOutput:
    """Per sampled row: its codes and the talker input its frame contributes. A row whose
    group-0 code is EOS has no frame: its other codes and its embedding are zeros."""

    codes: np.ndarray  # [k, 16] int64
    embeddings: np.ndarray  # [k, H] float32: the sum of the frame's 16 code embeddings


@dataclass
class CodecChunk:
    """Codes of one stream's next chunk, decoded by the graph for `size` frames (a shorter
    final chunk is padded and cut)."""

    stream: int  # the sequence id its stream was opened with
    codes: np.ndarray  # [m, 16] int64, 1 <= m <= size
    size: int


@dataclass
class StepTimes:
    """Where step time goes, summed since the engine started: inference of each graph, and
    the host's share (planning, sampling, embeddings, bookkeeping)."""

    steps: int = 0
    talker_s: float = 0.0
    subcode_s: float = 0.0
    codec_s: float = 0.0
    host_s: float = 0.0

    @property
    def inference_s(self) -> float:
        return self.talker_s + self.subcode_s + self.codec_s


class Runner(Protocol):
    """The executor of the engine line (module docstring)."""

    @property
    def block_size(self) -> int:
        """Tokens per KV block, as the talker was compiled."""

    @property
    def kv_block_bytes(self) -> int:
        """Bytes of one block of every layer's key and value cache."""

    @property
    def can_copy_blocks(self) -> bool:
        """Whether `StepPlan.copies` works on this talker's device (the prefix cache)."""

    @property
    def rows_exact(self) -> bool:
        """Whether the talker computes a row with the same bits however a prompt's rows are
        split into calls (its own talker does; OpenVINO's paged attention does not for a
        single row, docs/OPENVINO.md §3)."""

    @property
    def can_pace(self) -> bool:
        """Whether a running stream decodes a short chunk at a short chunk's cost (engine/pacing.py)."""

    @property
    def times(self) -> StepTimes:
        """Inference time of each graph so far (`steps` and `host_s` are the batch's)."""

    def allocate_kv(self, num_blocks: int) -> None:
        """Make the KV cache `num_blocks` blocks (once, before the first step)."""

    def forward(self, plan: StepPlan) -> StepOutput:
        """Copy the plan's blocks, run the talker over its rows, sample group 0 of its sampled
        rows and run the subcode for those that did not draw EOS."""

    def open_stream(self, stream: int, prefix: np.ndarray | None) -> None:
        """A codec stream for a new sequence: fresh, or primed with reference codes [R, 16]
        (in-context cloning). A runner without codec graphs (offline) ignores it."""

    def decode(self, chunks: list[CodecChunk]) -> list[np.ndarray]:
        """PCM of each chunk (at most one per stream), in order."""

    def close_stream(self, stream: int) -> None:
        """Forget a stream's decoder state (idempotent)."""

    def close(self) -> None:
        """Free the compiled graphs now (idempotent); forward and decode raise afterwards."""


def short_chunks_carry_on(schedule: ChunkSchedule, steady_lengths: Collection[int]) -> bool:
    """Whether a running stream can decode a short chunk (the first chunk's size) at a short
    chunk's cost: a steady graph of that very length is compiled (engine/pacing.py), among
    `steady_lengths`, those of the compiled steady graphs that take the real frame count (a
    paced stream's partial chunks need it)."""
    return not schedule.offline and schedule.first < schedule.steady and schedule.first in steady_lengths


def prefix_cache_supported(device: str) -> bool:
    """Whether the runners copy KV blocks of a talker on this device (the prefix cache): the
    CPU plugin computes in the host tensors the runner allocated, which it can copy; whether
    another device's plugin keeps the cache there is not established."""
    return device.split(".")[0] == "CPU"


def paces(model: LoadedModel, schedule: ChunkSchedule) -> bool:
    """A runner's `can_pace` for `schedule`, known before it compiles anything: the steady
    graphs it compiles are LoadedModel.codec_graphs'."""
    if schedule.offline:
        return False
    steady = model.codec_graphs((schedule.first, schedule.steady))["steady"]
    return short_chunks_carry_on(schedule, set(steady) & set(model.any_length_chunks()))
