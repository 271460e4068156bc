"""The native runner: engine/step.py's executor in C++ (native/, module
`wyoming_qwen3tts._native`), so that a step's inferences and its sampling run with no Python
between them and without the GIL.

The C++ runner compiles the talker (paged) and subcode graphs itself from the IR files (an
ov.Model cannot cross into another pybind11 module), decodes with codec chunk graphs compiled
apart (`compile_codec`, shared between models: engine/decoders.py) and keeps only the KV cache
tensors and each codec stream's decoder state; the batch (engine/batch.py) owns the pool and
the sequences. This module hands it each plan as flat arrays, which cross without a
per-element conversion.
"""
from __future__ import annotations

import itertools
import logging
import operator

import numpy as np

from .loaded_model import LoadedModel
from .sampling import suppress_from
from .step import (
    GROUPS,
    PRIMED_STATES,
    ChunkSchedule,
    CodecChunk,
    StepOutput,
    StepPlan,
    StepTimes,
    paces,
    prefix_cache_supported,
)

try:
    from .. import _native

    _IMPORT_ERROR: ImportError | None = None
except ImportError as e:  # a build without the extension (it is built by `pip install .`)
    _IMPORT_ERROR = e


log = logging.getLogger(__name__)


def kernel_isas() -> list[str]:
    """The instruction sets of the runner's own kernels this CPU runs, fastest first ([]: none,
    or the extension is not built)."""
    return [] if _IMPORT_ERROR is not None else list(_native.kernel_isas())


def _properties(config: dict) -> dict[str, str]:
    return {key: str(value) for key, value in config.items()}


def _require_extension() -> None:
    if _IMPORT_ERROR is not None:
        raise RuntimeError(f"the native runner is not built ({_IMPORT_ERROR}); reinstall with `pip install .`, "
                           f"or set engine.backend: python")


def compile_codec(model: LoadedModel, schedule: ChunkSchedule) -> _native.CodecGraphs:
    """The codec chunk graphs a streaming schedule needs (LoadedModel.codec_graphs), compiled
    on the decoder's device (native/include/qwen3tts/codec_graphs.hpp)."""
    _require_extension()
    graphs = model.codec_graphs((schedule.first, schedule.steady))
    c = _native.CodecConfig()
    c.first_xml = {n: str(p) for n, p in graphs["first"].items()}
    c.steady_xml = {n: str(p) for n, p in graphs["steady"].items()}
    c.device, c.batch = model.devices["decoder"], model.decoder_batch
    c.properties = _properties(model.properties("decoder"))
    c.first_chunk, c.steady_chunk = schedule.first, schedule.steady
    return _native.CodecGraphs(c)


class NativeRunner:
    """engine/step.py's Runner over the C++ one."""

    def __init__(self, model: LoadedModel, schedule: ChunkSchedule, own_stacks: bool = False,
                 kernels: str = "auto", codec: tuple[_native.CodecGraphs, bool] | None = None) -> None:
        """own_stacks: run the talker and the code predictor with the runner's own threads and
        kernels (native/include/qwen3tts/talker_cpu.hpp, subcode_cpu.hpp) where the device, the
        CPU and the conversion allow, the talker over its own KV cache (f32 where the KV
        precision is f32, else u8); OpenVINO's graphs elsewhere. Which runs is logged.
        kernels: the instruction set of its own kernels (engine.kernels; auto: the fastest).
        codec: (the compiled codec graphs, whether they were compiled for this runner) from a
        registry of shared ones (engine/decoders.py); None: compiled here. Offline: none."""
        _require_extension()
        spec = model.spec
        c = _native.RunnerConfig()
        c.talker_xml, c.subcode_xml = str(model.dir / "talker.xml"), str(model.dir / "subcode.xml")
        c.talker_device, c.subcode_device = model.devices["talker"], model.devices["subcode"]
        c.talker_properties = _properties(model.properties("talker", model.kv_precision))
        c.subcode_properties = _properties(model.properties("subcode"))
        c.num_layers = spec.talker.stack.num_layers
        c.eos, c.suppress_from, c.groups = spec.codec_ids.eos, suppress_from(spec.talker.vocab_size), GROUPS
        c.primed_states, c.own_stacks = PRIMED_STATES, own_stacks
        c.talker_u8_cache = model.kv_precision != "f32"
        c.kernels = "" if kernels == "auto" else kernels
        if schedule.offline:
            self.codec, fresh = None, False
        else:
            self.codec, fresh = codec or (compile_codec(model, schedule), True)
        # the codec's own marks where it was compiled for this runner: what the bench reports per stage
        self._codec_memory = list(self.codec.load_memory) if fresh and self.codec is not None else []
        self._runner = _native.Runner(c, self.codec)
        log.info("talker: %s; code predictor: %s", self._runner.talker_runtime, self._runner.subcode_runtime)
        self._sampling = operator.attrgetter(*_native.SAMPLING_FIELDS)  # a row of forward's sampling matrix
        self.model, self.schedule = model, schedule
        self.can_copy_blocks = prefix_cache_supported(model.devices["talker"])
        self.can_pace = paces(model, schedule)

    @property
    def block_size(self) -> int:
        return self._runner.block_size

    @property
    def kv_block_bytes(self) -> int:
        return self._runner.kv_block_bytes

    @property
    def subcode_runtime(self) -> str:
        """Who runs the code predictor: "subcode_cpu, …" (the runner's own) or "openvino",
        with the reason when the runner's own was asked for and not possible."""
        return self._runner.subcode_runtime

    @property
    def rows_exact(self) -> bool:
        """Its own talker computes a row alike however rows are split (docs/OPENVINO.md §12)."""
        return self._runner.rows_exact

    @property
    def talker_runtime(self) -> str:
        """Who runs the talker: "talker_cpu, …" (the runner's own) or "openvino", with the
        reason when the runner's own was asked for and not possible."""
        return self._runner.talker_runtime

    @property
    def load_memory(self) -> list[tuple[str, int, int]]:
        """(stage, anonymous kB, file kB) resident before loading and after each graph: before,
        codec (as before where it was shared or not needed), talker, subcode."""
        runner = list(self._runner.load_memory)
        codec = self._codec_memory or [runner[0], ("codec", *runner[0][1:])]
        return [*codec, *runner[1:]]

    @property
    def times(self) -> StepTimes:
        t = self._runner.times
        return StepTimes(talker_s=t.talker_s, subcode_s=t.subcode_s, codec_s=t.codec_s)

    def allocate_kv(self, num_blocks: int) -> None:
        self._runner.allocate_kv(num_blocks)

    def forward(self, plan: StepPlan) -> StepOutput:
        # Lists where they will do (the binding makes the arrays in C): each numpy function a step
        # calls costs µs of host time, tens once an inference has emptied the caches.
        rows = plan.sampling
        k = len(rows)
        sampling = np.array([self._sampling(s.params) for s in rows], np.float64)
        sampling = sampling.reshape(k, len(_native.SAMPLING_FIELDS))
        history_begins = [0, *itertools.accumulate(len(s.history) for s in rows)]
        history = np.concatenate([s.history for s in rows]) if k else np.zeros(0, np.int64)
        uniforms = [s.uniforms for s in rows]
        codes, embeddings = self._runner.forward(
            plan.copies, plan.embeds, plan.positions, plan.past_lens, plan.begins, plan.block_indices,
            plan.block_begins, plan.max_context, plan.sample_rows[:k],  # the C++ side adds the row a graph needs
            sampling, history, history_begins, uniforms)
        return StepOutput(codes, embeddings)

    def open_stream(self, stream: int, prefix: np.ndarray | None) -> None:
        self._runner.open_stream(stream, prefix)

    def decode(self, chunks: list[CodecChunk]) -> list[np.ndarray]:
        return self._runner.decode([(c.stream, c.codes, c.size) for c in chunks])

    def close_stream(self, stream: int) -> None:
        self._runner.close_stream(stream)

    def close(self) -> None:
        """Free the C++ runner's graphs, KV cache and mapped weights now (Scheduler.close),
        instead of whenever this object happens to be collected, and its share of the codec
        graphs (they go with the last runner using them); forward() and decode() raise
        afterwards, times stay readable. Idempotent."""
        self._runner.close()
        self.codec = None
