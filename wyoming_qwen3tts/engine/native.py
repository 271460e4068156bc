"""The native runner (native/, module `wyoming_qwen3tts._native`) behind the interface of the
Python reference runner, so the scheduler drives either.

The C++ runner compiles the talker (paged), subcode and codec chunk graphs itself from the
IR files (an ov.Model cannot cross into another pybind11 module), owns the KV pool and the
sequences, and runs each step without the GIL. Python still embeds prompts (once per
request) and makes each request's draws, so both runners sample the same numbers.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .blocks import PREFIX_ENTRIES
from .config import EngineConfig
from .loaded_model import LoadedModel
from .runner import (
    PRIMED_STATES,
    SUBCODE_STEPS,
    ChunkSchedule,
    Draws,
    StepTimes,
    can_admit,
    frame_budget,
    prefix_cache_supported,
)
from .sampling import SamplingParams, suppress_from

_native: Any
try:
    from .. import _native
except ImportError as e:  # a build without the extension (it is built by `pip install .`)
    _native = None
    _IMPORT_ERROR = e


def _properties(config: dict) -> dict[str, str]:
    return {key: str(value) for key, value in config.items()}


class NativeRunner:
    """Runner (engine/runner.py) protocol over the C++ runner."""

    def __init__(self, model: LoadedModel, config: EngineConfig, schedule: ChunkSchedule) -> None:
        if _native is None:
            raise RuntimeError(f"the native runner is not built ({_IMPORT_ERROR}); reinstall with `pip install .`, "
                               f"or set engine.runner: python")
        spec = model.spec
        c = _native.RunnerConfig()
        c.talker_xml, c.subcode_xml = str(model.dir / "talker.xml"), str(model.dir / "subcode.xml")
        graphs = model.codec_graphs((schedule.first, schedule.steady)) if not schedule.offline else {}
        c.first_xml = {n: str(p) for n, p in graphs.get("first", {}).items()}
        c.steady_xml = {n: str(p) for n, p in graphs.get("steady", {}).items()}
        c.talker_device, c.subcode_device = model.devices["talker"], model.devices["subcode"]
        c.decoder_device, c.decoder_batch = model.devices["decoder"], model.decoder_batch
        c.talker_properties = _properties(model.properties("talker", model.kv_precision))
        c.subcode_properties = _properties(model.properties("subcode"))
        c.decoder_properties = _properties(model.properties("decoder"))
        c.num_layers = spec.talker.stack.num_layers
        c.kv_blocks = config.kv_blocks or 0
        c.kv_cache_bytes = config.kv_cache_mb * 2**20
        c.first_chunk, c.steady_chunk, c.offline = schedule.first, schedule.steady, schedule.offline
        c.prefill_chunk = config.prefill_chunk
        c.prefix_cache = config.prefix_cache and prefix_cache_supported(model.devices["talker"])
        c.eos, c.suppress_from, c.groups = spec.codec_ids.eos, suppress_from(spec.talker.vocab_size), SUBCODE_STEPS + 1
        c.prefix_entries, c.primed_states = PREFIX_ENTRIES, PRIMED_STATES
        c.tts_pad = model.tts_pad.astype(np.float32)
        self._runner = _native.Runner(c)
        self.model, self.schedule = model, schedule
        self._draws: dict[int, Draws] = {}  # open sequences' generators: a growing frame cap draws on

    @property
    def pool(self):
        return self._runner.pool

    @property
    def block_size(self) -> int:
        return self._runner.block_size

    @property
    def kv_block_bytes(self) -> int:
        return self._runner.kv_block_bytes

    @property
    def capacity_tokens(self) -> int:
        return self._runner.capacity_tokens

    @property
    def active(self) -> list:
        return self._runner.active

    @property
    def load_memory(self) -> list[tuple[str, int, int]]:
        """(stage, anonymous kB, file kB) resident before loading and after each graph."""
        return list(self._runner.load_memory)

    @property
    def times(self) -> StepTimes:
        t = self._runner.times
        return StepTimes(t.steps, t.talker_s, t.subcode_s, t.codec_s, t.host_s)

    def frame_budget(self, prompt_tokens: int, max_frames: int) -> int:
        return frame_budget(self, prompt_tokens, max_frames)

    def can_admit(self, prompt_tokens: int, max_frames: int) -> bool:
        return can_admit(self, prompt_tokens, max_frames)

    @property
    def prefix_cache(self) -> bool:
        return self._runner.prefix_cache

    def add(self, embeds, params: SamplingParams, max_frames: int | None = None, text_open: bool = False,
            prefix_len: int = 0):
        frames = self.frame_budget(embeds.prefill.shape[0], params.frame_limit(max_frames))
        p = _native.SamplingParams()
        for name in ("do_sample", "top_k", "top_p", "temperature", "repetition_penalty", "subtalker_do_sample",
                     "subtalker_top_k", "subtalker_top_p", "subtalker_temperature", "min_frames"):
            setattr(p, name, getattr(params, name))
        draws = Draws(params.seed)
        seq = self._runner.add(embeds.prefill, embeds.trailing, p, draws.next(frames).ravel(), frames,
                               embeds.codec_prefix, text_open, prefix_len)
        if text_open and not seq.finished:
            self._draws[seq.id] = draws
        return seq

    def extend(self, seq, rows: np.ndarray, closed: bool, max_frames: int) -> bool:
        """As Runner.extend: the uniforms of the frames a larger cap adds continue the
        request's draws."""
        if seq.finished:
            return True
        frames = max(seq.max_frames, self.frame_budget(seq.prompt_tokens, max_frames))
        draws = self._draws[seq.id]
        uniforms = draws.next(frames - seq.max_frames)
        if not self._runner.extend(seq, rows, closed, frames, uniforms.ravel()):
            draws.unread(uniforms)
            return False
        if closed:
            del self._draws[seq.id]
        return True

    def abort(self, seq, reason: str = "aborted") -> None:
        self._draws.pop(seq.id, None)
        self._runner.abort(seq, reason)

    def close(self) -> None:
        """Free the C++ runner's graphs and mapped weights now (Scheduler.close), instead of
        whenever this object happens to be collected; step() and add() raise afterwards, the
        pool and times stay readable. Idempotent."""
        self._runner.close()

    def step(self) -> list:
        done = self._runner.step()
        for seq in done:
            self._draws.pop(seq.id, None)
        return done
