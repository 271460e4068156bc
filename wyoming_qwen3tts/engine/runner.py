"""The Python reference runner: the executor of engine/step.py in numpy and OpenVINO's Python
API — one paged talker call for every sequence the plan feeds (prefills and decode steps
mixed), sampling, one subcode call for the batch, and the codec chunk graphs.

It is the oracle of the native runner and the debugging path. The batch (engine/batch.py)
decides what each step feeds; this module also holds what both runners share: the chunk
schedule, the graphs a schedule needs, and where the prefix cache can copy blocks.
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import openvino as ov

from .codec_stream import CodecStream, StreamingCodec
from .graphs import fix_batch, to_paged
from .loaded_model import LoadedModel
from .sampling import process_talker_logits, sample_row
from .step import GROUPS, CodecChunk, Sampling, StepOutput, StepPlan, StepTimes

log = logging.getLogger(__name__)

PRIMED_STATES = 32  # decoder states primed with reference codes (in-context clones), ≈5 MB each at full size


@dataclass(frozen=True)
class ChunkSchedule:
    """Frames per codec call: `first` for a stream's first chunk (latency), `steady` after
    (throughput). `offline` decodes nothing while generating (decode the codes at the end)."""

    first: int = 1
    steady: int = 8
    offline: bool = False


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


class PythonRunner:
    """The reference executor (engine/step.py's Runner): the paged talker, sampling in numpy,
    the subcode and the codec chunk graphs, driven from Python."""

    def __init__(self, model: LoadedModel, schedule: ChunkSchedule = ChunkSchedule(),
                 graphs: RunnerGraphs | None = None) -> None:
        """graphs: compiled already for this schedule (default: compiled here)."""
        self.model = model
        self.schedule = schedule
        self.graphs = graphs = graphs or RunnerGraphs.compile(model, schedule)
        codec = graphs.codec
        first, steady = (sorted(codec.first), sorted(codec.steady)) if codec else ([], [])
        if not schedule.offline and (schedule.first not in first + steady or schedule.steady not in steady):
            raise ValueError(f"no codec graphs for chunks first={schedule.first} steady={schedule.steady} "
                             f"(compiled: first {first}, steady {steady})")
        self.can_copy_blocks = prefix_cache_supported(model.devices["talker"])
        self.rows_exact = False  # the paged attention graph (docs/OPENVINO.md §3)
        self.can_pace = short_chunks_carry_on(schedule, {g.frames for g in codec.steady.values() if g.any_length}
                                              if codec else ())
        self._talker = graphs.talker.create_infer_request()
        self._subcode = graphs.subcode.create_infer_request()
        self._cache_rows: list[np.ndarray] = []  # each cache tensor's bytes, one row per block
        self._streams: dict[int, CodecStream] = {}
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

    def allocate_kv(self, num_blocks: int) -> None:
        if self._cache_rows or num_blocks < 1:
            raise ValueError("the KV cache is allocated once, with at least one block")
        for port in self.graphs.talker.inputs:
            name = port.get_any_name()
            if _is_cache(name):
                shape = [num_blocks] + [d.get_length() for d in list(port.get_partial_shape())[1:]]
                tensor = ov.Tensor(port.get_element_type(), shape)
                self._talker.set_tensor(name, tensor)
                self._cache_rows.append(tensor.data.view(np.uint8).reshape(num_blocks, -1))  # shares its memory

    def forward(self, plan: StepPlan) -> StepOutput:
        for rows in self._cache_rows:  # whole rows of each cache tensor: quantization scales travel too
            for source, target in plan.copies:
                rows[target] = rows[source]
        logits, hidden = self.talker(plan)
        codes = np.zeros((len(plan.sampling), GROUPS), np.int64)
        embeddings = np.zeros((len(plan.sampling), hidden.shape[-1]), np.float32)
        codes[:, 0] = [self._code0(s, z) for s, z in zip(plan.sampling, logits)]
        go = np.flatnonzero(codes[:, 0] != self.model.spec.codec_ids.eos)
        if go.size:
            codes[go, 1:], embeddings[go] = self._run_subcode([plan.sampling[i] for i in go], codes[go, 0], hidden[go])
        return StepOutput(codes, embeddings)

    def talker(self, plan: StepPlan) -> tuple[np.ndarray, np.ndarray]:
        """The paged talker call: logits and hidden rows of the plan's sample rows."""
        inputs = {
            "inputs_embeds": plan.embeds,
            "position_ids": plan.positions,
            "past_lens": plan.past_lens,
            "subsequence_begins": plan.begins,
            "block_indices": plan.block_indices,
            "block_indices_begins": plan.block_begins,
            "max_context_len": np.array(plan.max_context, np.int32),
            "sample_rows": plan.sample_rows,
        }
        begin = time.perf_counter()
        out = self._talker.infer(inputs)
        self.times.talker_s += time.perf_counter() - begin
        return out["logits"], out["hidden"]

    def _code0(self, s: Sampling, logits: np.ndarray) -> int:
        p, spec = s.params, self.model.spec
        z = process_talker_logits(logits, s.history, len(s.history), p.repetition_penalty, spec.codec_ids.eos,
                                  spec.talker.vocab_size, p.min_frames)
        return sample_row(z, p.temperature, p.top_k, p.top_p, s.uniforms[0]) if p.do_sample else int(np.argmax(z))

    def _run_subcode(self, rows: list[Sampling], code0: np.ndarray,
                     hidden: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Codes 1-15 and the frame embedding of each row."""
        params = [s.params for s in rows]
        inputs = {
            "hidden": hidden.astype(np.float32),
            "code0": code0,
            "temperature": np.array([p.subtalker_temperature if p.subtalker_do_sample else 0.0 for p in params],
                                    np.float32),
            "top_k": np.array([p.subtalker_top_k for p in params], np.int64),
            "top_p": np.array([p.subtalker_top_p for p in params], np.float32),
            "uniform": np.stack([s.uniforms[1:] for s in rows]).astype(np.float32),
        }
        begin = time.perf_counter()
        out = self._subcode.infer(inputs)
        self.times.subcode_s += time.perf_counter() - begin
        return out["codes"], out["frame_embedding"]

    def open_stream(self, stream: int, prefix: np.ndarray | None) -> None:
        """Primed states are kept for the last few references, since a cloned voice primes the
        same codes for every sentence."""
        if self.schedule.offline:
            return
        if stream in self._streams:
            raise ValueError(f"codec stream {stream} is open already")
        if prefix is None:
            self._streams[stream] = CodecStream()
            return
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
        self._streams[stream] = CodecStream(state=state)

    def decode(self, chunks: list[CodecChunk]) -> list[np.ndarray]:
        """One codec call per chunk size for every stream that needs it."""
        by_size: dict[int, list[int]] = {}
        for i, chunk in enumerate(chunks):
            by_size.setdefault(chunk.size, []).append(i)
        pcms: list[np.ndarray] = [np.zeros(0, np.float32)] * len(chunks)
        for size, items in by_size.items():
            begin = time.perf_counter()
            out = self._codec.decode([self._streams[chunks[i].stream] for i in items],
                                     [chunks[i].codes.T for i in items], size)
            self.times.codec_s += time.perf_counter() - begin
            for i, pcm in zip(items, out):
                pcms[i] = pcm
        return pcms

    def close_stream(self, stream: int) -> None:
        self._streams.pop(stream, None)

    def close(self) -> None:
        """Nothing to free early: the compiled graphs go with this object."""


def short_chunks_carry_on(schedule: ChunkSchedule, steady_lengths: Collection[int]) -> bool:
    """Whether a running stream can decode a short chunk (the first chunk's size) at a short
    chunk's cost: a steady graph of that very length is compiled (engine/pacing.py), among
    `steady_lengths`, those of the compiled steady graphs that take the real frame count (a
    paced stream's partial chunks need it)."""
    return not schedule.offline and schedule.first < schedule.steady and schedule.first in steady_lengths


def paces(model: LoadedModel, schedule: ChunkSchedule) -> bool:
    """A runner's `can_pace` for `schedule`, known before it compiles anything: the steady
    graphs it compiles are LoadedModel.codec_graphs'."""
    if schedule.offline:
        return False
    steady = model.codec_graphs((schedule.first, schedule.steady))["steady"]
    return short_chunks_carry_on(schedule, set(steady) & set(model.any_length_chunks()))


def prefix_cache_supported(device: str) -> bool:
    """Whether the runners copy KV blocks of a talker on this device (the prefix cache): the
    CPU plugin computes in the host tensors the runner allocated, which it can copy; whether
    another device's plugin keeps the cache there is not established."""
    return device.split(".")[0] == "CPU"
