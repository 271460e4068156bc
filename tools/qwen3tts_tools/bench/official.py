"""The official qwen-tts implementation (PyTorch): loading, and timed generation for the benchmark.

It is the test oracle and the benchmark's yardstick, never a runtime dependency: torch and
qwen_tts are imported inside the functions. qwen-tts is installed with --no-deps; its package
__init__ imports the unused 25 Hz tokenizer, which imports `sox`, `onnxruntime` and
`torchaudio.compliance.kaldi` at import time. None of them is used by the 12 Hz models, so
empty stand-in modules are registered before the import. Everything else (torch,
transformers, librosa, soundfile) is real and must be installed.
"""
from __future__ import annotations

import contextlib
import importlib.machinery
import logging
import sys
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wyoming_qwen3tts.engine.memory import peak_mb

from .process import rss_mb
from .scenarios import Workload
from .stats import Spread

log = logging.getLogger(__name__)

_STUBBED = ("sox", "onnxruntime", "torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi")


def install_stubs() -> None:
    """Register empty stand-ins for the modules only the unused 25 Hz tokenizer imports."""
    for name in _STUBBED:
        if name in sys.modules:
            continue
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, loader=None)
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)


def load_official(model_dir: str | Path, dtype: str = "float32") -> Any:
    """Load a checkpoint directory into the official wrapper through its own from_pretrained.

    Fails if any weight of the official module tree is missing from the checkpoint or any
    checkpoint weight is unexpected: that is the proof that a synthetic checkpoint has the
    real layout. (Checked against the files directly: the official from_pretrained forwards
    `output_loading_info` to the codec loader and breaks on it.)
    """
    install_stubs()
    import torch
    from qwen_tts import Qwen3TTSModel
    from safetensors import safe_open
    from transformers import Qwen2TokenizerFast

    model_dir = Path(model_dir)
    wrapper = Qwen3TTSModel.from_pretrained(str(model_dir), dtype=getattr(torch, dtype))
    # Loaded from a local directory whose config says transformers 4.57.3, the wrapper's
    # fix_mistral_regex=True swaps in the Mistral-fix split regex; loaded by hub id (what
    # users of the official package do) it keeps the canonical Qwen2 regex. The oracle
    # follows the hub-id path, which is the behaviour our tokenizer reproduces.
    wrapper.processor.tokenizer = Qwen2TokenizerFast.from_pretrained(str(model_dir))
    model = wrapper.model
    for module, folder in ((model, model_dir), (model.speech_tokenizer.model, model_dir / "speech_tokenizer")):
        names: set[str] = set()
        for path in folder.glob("model*.safetensors"):
            with safe_open(str(path), "pt") as f:
                names.update(f.keys())
        expected = set(module.state_dict())
        if names != expected:
            raise AssertionError(f"{folder}: official module tree and checkpoint disagree; missing "
                                 f"{sorted(expected - names)[:5]}, unexpected {sorted(names - expected)[:5]}")
    model.eval()
    return wrapper


@dataclass
class OfficialRun:
    """One timed generate_custom_voice call. The package does not stream audio: its first
    audio is the whole utterance, after generation and decoding."""

    frames: int
    ttff_s: float  # call → first complete frame (all 16 codes)
    generate_s: float  # call → all codes (prompt, prefill, every frame)
    subcode_s: float  # summed over the per-frame code-predictor calls
    decode_s: float  # codec decoder over the whole utterance
    total_s: float  # call → waveform


@dataclass
class _Marks:
    start: float = 0.0
    first_frame: float | None = None
    subcode_s: float = 0.0
    decode_begin: float | None = None
    decode_s: float = 0.0
    frames: int = 0


@contextlib.contextmanager
def _wrapped(obj: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """Replace obj.name by make(original) for the duration (an instance attribute, removed after)."""
    own = vars(obj).get(name)
    setattr(obj, name, make(getattr(obj, name)))
    try:
        yield
    finally:
        if own is None:
            delattr(obj, name)
        else:
            setattr(obj, name, own)


def timed_generate(wrapper: Any, text: str, speaker: str, language: str, frames: int, seed: int) -> OfficialRun:
    """Exactly `frames` frames through the official generate_custom_voice with its default
    sampling, EOS held off, timed through hooks on its own per-frame loop: the code predictor's
    `generate` runs once per frame (and completes it), the speech tokenizer's `decode` once."""
    import torch

    model, marks = wrapper.model, _Marks()

    def hold_eos(generate: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            kwargs["min_new_tokens"] = kwargs["max_new_tokens"]  # the wrapper pins 2; mask EOS throughout
            return generate(*args, **kwargs)
        return run

    def per_frame(generate: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            begin = time.perf_counter()
            result = generate(*args, **kwargs)
            end = time.perf_counter()
            marks.subcode_s += end - begin
            marks.frames += 1
            if marks.first_frame is None:
                marks.first_frame = end
            return result
        return run

    def decoder(decode: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            marks.decode_begin = time.perf_counter()
            result = decode(*args, **kwargs)
            marks.decode_s = time.perf_counter() - marks.decode_begin
            return result
        return run

    torch.manual_seed(seed)
    with _wrapped(model.talker, "generate", hold_eos), \
            _wrapped(model.talker.code_predictor, "generate", per_frame), \
            _wrapped(model.speech_tokenizer, "decode", decoder), torch.inference_mode():
        marks.start = time.perf_counter()
        # max_new_tokens = frames + 1: the last sampled group-0 code is never completed into a frame
        wavs, _ = wrapper.generate_custom_voice(text=text, speaker=speaker, language=language,
                                                max_new_tokens=frames + 1)
        end = time.perf_counter()
    samples = len(wavs[0])
    if marks.frames != frames or samples != frames * model.speech_tokenizer.get_decode_upsample_rate():
        raise RuntimeError(f"official generation made {marks.frames} frames ({samples} samples), expected {frames}")
    assert marks.first_frame is not None and marks.decode_begin is not None  # it made frames and decoded them
    return OfficialRun(frames=frames, ttff_s=marks.first_frame - marks.start,
                       generate_s=marks.decode_begin - marks.start, subcode_s=marks.subcode_s,
                       decode_s=marks.decode_s, total_s=end - marks.start)


def cast(wrapper: Any, dtype: str) -> None:
    """Talker and codec to `dtype`, as from_pretrained(dtype=...) would have loaded them."""
    import torch

    wrapper.model.to(getattr(torch, dtype))
    wrapper.model.speech_tokenizer.model.to(getattr(torch, dtype))


DTYPES = ("float32", "bfloat16")  # what the official package runs in on a CPU


@dataclass
class OfficialResult:
    """The official implementation on the benchmark's text, in its fastest dtype here."""

    dtype: str  # the one measured: the faster in the probe
    probe_fps: dict[str, float]  # generation frames/s of a short run in each dtype
    threads: int
    load_s: float
    frames: int
    ttff_s: Spread  # call → first complete frame, over runs
    generate_fps: Spread  # frames / generation time (codes only), over runs
    e2e_fps: Spread  # frames / (generation + decoding), over runs
    rtf: Spread  # (generation + decoding) / audio duration, over runs
    per_frame_ms: dict[str, Spread]  # talker (all but the code predictor, prefill included), subcode, decoder
    rss_mb: float  # after the runs, in the measured dtype
    peak_rss_mb: float  # over the whole process (loading happens in float32)
    runs: list[OfficialRun]


def bench_official(checkpoint: Path, work: Workload, probe_frames: int, threads: int) -> OfficialResult:
    """Load once in float32; time a short run in each dtype; measure `work.runs` runs in the faster."""
    install_stubs()
    import torch
    import transformers

    transformers.logging.set_verbosity_error()  # not "Setting pad_token_id ..." on every run
    torch.set_num_threads(threads)
    start = time.perf_counter()
    wrapper = load_official(checkpoint, "float32")
    load_s = time.perf_counter() - start

    def generate(frames: int, seed: int) -> OfficialRun:
        return timed_generate(wrapper, work.text, work.speaker, work.language, frames, seed)

    probe: dict[str, float] = {}
    for dtype in DTYPES:
        cast(wrapper, dtype)
        generate(probe_frames, seed=0)  # warm-up
        probe[dtype] = probe_frames / generate(probe_frames, seed=1).generate_s
        log.info("official, %s: %.2f frames/s (probe of %d frames)", dtype, probe[dtype], probe_frames)
    best = max(probe, key=probe.__getitem__)
    cast(wrapper, best)  # (float32 after the bfloat16 probe: bf16-rounded weights, the same speed)
    runs = [generate(work.frames, seed=100 + r) for r in range(work.runs)]
    result = OfficialResult(
        dtype=best, probe_fps=probe, threads=threads, load_s=load_s, frames=work.frames,
        ttff_s=Spread.of(r.ttff_s for r in runs),
        generate_fps=Spread.of(r.frames / r.generate_s for r in runs),
        e2e_fps=Spread.of(r.frames / r.total_s for r in runs),
        rtf=Spread.of(r.total_s / work.audio_s for r in runs),
        per_frame_ms={"talker": Spread.of((r.generate_s - r.subcode_s) / r.frames for r in runs).scaled(1e3),
                      "subcode": Spread.of(r.subcode_s / r.frames for r in runs).scaled(1e3),
                      "decoder": Spread.of(r.decode_s / r.frames for r in runs).scaled(1e3)},
        rss_mb=rss_mb(), peak_rss_mb=peak_mb(), runs=runs)
    log.info("official (%s): %s frames/s generating, %s with decoding, first frame %s ms", best,
             result.generate_fps.text(".2f"), result.e2e_fps.text(".2f"), result.ttff_s.scaled(1e3).text(".0f"))
    return result
