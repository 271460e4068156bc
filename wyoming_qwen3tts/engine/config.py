"""Engine settings: batching, KV pool, admission queue, runaway guards, timeouts, codec schedule.

This is the `engine:` section of config.yaml (which documents every field; a test keeps
the two in step); the defaults suit a 2-core CPU serving a few satellites.
"""
from __future__ import annotations

from dataclasses import dataclass

RUNNERS = ("native", "python")
RUNTIMES = ("auto", "native", "openvino")
KERNELS = ("auto", "avx512_vnni", "avx_vnni", "avx2")  # native/include/qwen3tts/kernels.hpp, fastest first
TEXT_LAYOUTS = ("auto", "streaming", "non_streaming")


@dataclass(frozen=True)
class EngineConfig:
    """How the scheduler shares one model among requests."""

    max_batch: int = 8  # sequences stepped together (one talker call per step for all)
    kv_cache_mb: int = 512  # KV pool budget; the block count follows from the compiled cache layout
    kv_blocks: int | None = None  # pool size in blocks, overrides kv_cache_mb
    max_queue: int = 32  # waiting requests; one more gets a "busy" error
    prefill_chunk: int = 256  # prompt tokens per talker call per sequence (long prompts take several)
    prefix_cache: bool = True  # keep the KV of each voice's prompt prefix (CPU talker): prefill only the text
    frames_per_token: float = 6.0  # runaway guard: frame cap = min_frames + factor × text tokens ...
    min_frames: int = 40  # ... (a frame is 80 ms; 6 frames ≈ 0.5 s per token is slower than any speech)
    max_frames: int = 2048  # ... and never more than this (≈ 164 s)
    request_timeout: float = 300.0  # seconds from submit to the last frame; 0 = none
    first_chunk: int = 1  # frames in a stream's first codec call: first audio after one frame
    steady_chunk: int = 8  # frames per codec call after that (fewer, larger calls)
    runner: str = "native"  # the step loop: native (C++) or python (the reference, for debugging)
    # native runner: INT4 weights of the CPU graphs multiplied by its own kernel (true), by
    # OpenVINO's (false), or None (auto): its own for an f32 talker unless the precision setting is
    # f32 (OpenVINO's numbers)
    int4_kernel: bool | None = None
    # native runner: who runs the code predictor on a CPU — its own threads and kernels (native),
    # OpenVINO's subcode graph, or auto: native unless the precision is f32 (OpenVINO's numbers)
    subcode_runtime: str = "auto"
    # native runner: who runs the talker on a CPU — its own threads and kernels over its own KV
    # cache (native), OpenVINO's paged talker graph, or auto: native unless the precision is f32
    talker_runtime: str = "auto"
    # native runner: the instruction set of its own kernels — auto (the fastest the CPU runs) or a
    # smaller one, to measure what a smaller CPU's copy does here (docs/OPENVINO.md §10)
    kernels: str = "auto"
    # where a request's text goes in its prompt (docs/MODEL.md §5.3): auto = the official wrappers'
    # default of the model type (non_streaming for CustomVoice and VoiceDesign: the whole text is
    # prefilled before the first frame); streaming = one text token in the prompt, the rest fed one
    # per frame (the official generate()'s default, and always that of text that is still coming):
    # the first frame after a one-position prefill, whatever the text's length
    text_layout: str = "auto"
    # the first 40 ms of a stream's first frame decoded ahead of the rest and sent at once
    # (engine/codec_lead.py; a conversion of format 5 has the graph): first audio ~10 ms sooner
    # on a 2-core CPU, for one more compiled decoder (~0.2 GB with bf16) and ~8 ms more work
    # per request; used only where the rest of the frame then comes before the lead has played
    codec_lead: bool = True

    def validate(self) -> None:
        """Raises ValueError naming the first bad field."""
        positive = ("max_batch", "kv_cache_mb", "max_queue", "prefill_chunk", "max_frames", "first_chunk",
                    "steady_chunk")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"engine.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.kv_blocks is not None and self.kv_blocks < 1:
            raise ValueError(f"engine.kv_blocks must be >= 1, got {self.kv_blocks!r}")
        if self.frames_per_token <= 0 or self.min_frames < 0:
            raise ValueError("engine.frames_per_token must be > 0 and engine.min_frames >= 0")
        if self.runner not in RUNNERS:
            raise ValueError(f"engine.runner: {self.runner!r} is not one of {', '.join(RUNNERS)}")
        for name in ("subcode_runtime", "talker_runtime"):
            if getattr(self, name) not in RUNTIMES:
                raise ValueError(f"engine.{name}: {getattr(self, name)!r} is not one of {', '.join(RUNTIMES)}")
        if self.kernels not in KERNELS:
            raise ValueError(f"engine.kernels: {self.kernels!r} is not one of {', '.join(KERNELS)}")
        if self.kernels != "auto" and self.runner == "native":
            from .native import kernel_isas  # the extension, only when a copy is named

            runs = kernel_isas()
            if self.kernels not in runs:
                raise ValueError(f"engine.kernels: this CPU does not run the {self.kernels} copy (it runs: "
                                 f"{', '.join(runs) or 'none'})")
        if self.text_layout not in TEXT_LAYOUTS:
            raise ValueError(f"engine.text_layout: {self.text_layout!r} is not one of {', '.join(TEXT_LAYOUTS)}")
        if self.request_timeout < 0:
            raise ValueError(f"engine.request_timeout must be >= 0, got {self.request_timeout!r}")

    def native_int4(self, precision: str, talker_precision: str) -> bool:
        """Whether the native runner should multiply INT4 weights with its own kernel, for a model
        loaded with this precision setting whose talker computes in `talker_precision` (auto:
        only an f32 talker, the kernel's own precision, and not the exact path; the runner still
        leaves them to OpenVINO where the CPU runs none of its kernels' instruction sets)."""
        auto = precision != "f32" and talker_precision == "f32"
        return self.runner == "native" and (self.int4_kernel if self.int4_kernel is not None else auto)

    def native_subcode(self, precision: str) -> bool:
        """Whether the native runner should run the code predictor itself, for a model loaded
        with this precision setting (it still falls back to OpenVINO's graph where the CPU or
        the conversion do not allow it)."""
        return self._native(self.subcode_runtime, precision)

    def native_talker(self, precision: str) -> bool:
        """The same for the talker."""
        return self._native(self.talker_runtime, precision)

    def _native(self, runtime: str, precision: str) -> bool:
        return self.runner == "native" and (runtime == "native" or (runtime == "auto" and precision != "f32"))

    def frame_cap(self, text_tokens: int) -> int:
        """Most frames a request with this many text tokens may generate (runaway guard)."""
        return min(self.max_frames, self.min_frames + int(self.frames_per_token * text_tokens))
