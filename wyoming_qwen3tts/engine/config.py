"""Engine settings: batching, KV pool, admission queue, runaway guards, timeouts, codec schedule.

This is the `engine:` section of config.yaml (which documents every field; a test keeps
the two in step); the defaults suit a 2-core CPU serving a few satellites.
"""
from __future__ import annotations

from dataclasses import dataclass

BACKENDS = ("auto", "native", "openvino", "python")
# the copies of native/include/qwen3tts/kernels.hpp (its Isa), fastest first
KERNELS = ("auto", "avx512_amx", "avx512_vnni", "avx_vnni", "avx2")
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
    # who runs the talker and the code predictor (docs/ARCHITECTURE.md, "Back ends"): auto = the
    # native runner's own layer stacks on a CPU unless the precision is f32 (OpenVINO's numbers),
    # OpenVINO's graphs elsewhere; native = its own stacks wherever the device, CPU and conversion
    # allow; openvino = OpenVINO's graphs, stepped by the native runner; python = OpenVINO's graphs
    # stepped by the Python reference loop (engine/runner.py, for debugging)
    backend: str = "auto"
    # the instruction set of the runner's own kernels — auto (the fastest the CPU runs) or a
    # smaller one, to measure what a smaller CPU's copy does here (docs/OPENVINO.md §10)
    kernels: str = "auto"
    # where a request's text goes in its prompt (docs/MODEL.md §5.3): auto = the official wrappers'
    # default of the model type (non_streaming for CustomVoice and VoiceDesign: the whole text is
    # prefilled before the first frame); streaming = one text token in the prompt, the rest fed one
    # per frame (the official generate()'s default, and always that of text that is still coming):
    # the first frame after a one-position prefill, whatever the text's length
    text_layout: str = "auto"
    # the first 40 ms of a stream's first frame decoded ahead of the rest and sent at once
    # (engine/codec_lead.py; a conversion of format 5 has the graph): first audio 4-10 ms sooner
    # on a 2-core CPU, for one more compiled decoder (+264 MB at 0.6B with bf16) and ~8 ms more
    # work per request; used only where the rest of the frame then comes before the lead has
    # played. Off by default: the memory buys too little (docs/BENCHMARKS.md, "The codec lead's price")
    codec_lead: bool = False

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
        if self.backend not in BACKENDS:
            raise ValueError(f"engine.backend: {self.backend!r} is not one of {', '.join(BACKENDS)}")
        if self.kernels not in KERNELS:
            raise ValueError(f"engine.kernels: {self.kernels!r} is not one of {', '.join(KERNELS)}")
        if self.kernels != "auto" and self.native_runner:
            from .native import kernel_isas  # the extension, only when a copy is named

            runs = kernel_isas()
            if self.kernels not in runs:
                raise ValueError(f"engine.kernels: this CPU does not run the {self.kernels} copy (it runs: "
                                 f"{', '.join(runs) or 'none'})")
        if self.text_layout not in TEXT_LAYOUTS:
            raise ValueError(f"engine.text_layout: {self.text_layout!r} is not one of {', '.join(TEXT_LAYOUTS)}")
        if self.request_timeout < 0:
            raise ValueError(f"engine.request_timeout must be >= 0, got {self.request_timeout!r}")

    @property
    def native_runner(self) -> bool:
        """The C++ step loop (engine/native.py) rather than the Python reference."""
        return self.backend != "python"

    def own_stacks(self, precision: str) -> bool:
        """Whether the native runner should run the talker and code predictor with its own
        layer stacks, for a model loaded with this precision setting (it still runs OpenVINO's
        graphs where the device, the CPU or the conversion do not allow its own, and says why)."""
        return self.backend == "native" or (self.backend == "auto" and precision != "f32")

    def frame_cap(self, text_tokens: int) -> int:
        """Most frames a request with this many text tokens may generate (runaway guard)."""
        return min(self.max_frames, self.min_frames + int(self.frames_per_token * text_tokens))


# Settings that engine.backend replaced (five switches became it and engine.kernels): an old key
# or flag is an error that names it, never silently ignored. The value says what became of each.
RETIRED = {
    "runner": "its python is backend: python",
    "int4_kernel": "the runner's own stacks multiply INT4 weights themselves; OpenVINO's graphs use OpenVINO's "
                   "products",
    "talker_runtime": "one setting for the talker and the code predictor",
    "subcode_runtime": "one setting for the talker and the code predictor",
}


def retired(name: str, flag: bool = False) -> str:
    """The error for an old setting (`flag`: as a command-line flag)."""
    old, new = (f"--{name.replace('_', '-')}", "--backend") if flag else (f"engine.{name}", "engine.backend")
    return f"{old} was replaced by {new} ({', '.join(BACKENDS)}): {RETIRED[name]}"
