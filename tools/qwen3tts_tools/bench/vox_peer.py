"""vox-tts, the strongest CPU peer: a native C++ Qwen3-TTS engine with its own quantised
format (.tmod). It runs in a virtual environment of its own in the work dir (its packages
never touch ours), from a q8 model it builds once from the same checkpoint, in a child
process (vox_driver.py) on the same text, speaker, language, sampling, thread count and
frame count as ours, EOS held off. Its figures are measured the way the official side's
are: frames/s with decoding, time to first audio (it streams), its own per-stage timers
for the per-graph split, and the peak RSS of its process."""
from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .scenarios import Workload
from .stats import Spread

log = logging.getLogger(__name__)

VERSION = "0.19.5"  # vox-tts from PyPI, pinned: its figures are only comparable with themselves
QUANT = "q8"  # its fastest CPU format that passes its own tolerance (q4 does not)
DRIVER = Path(__file__).with_name("vox_driver.py")
# the checkpoint's generation_config.json key → vox's generation parameter (vox's converter
# reads another file name, so its defaults would apply unless these are passed)
SAMPLING = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p",
            "repetition_penalty": "repetition_penalty", "subtalker_temperature": "sub_temperature",
            "subtalker_top_k": "sub_top_k", "subtalker_top_p": "sub_top_p"}
NO_EOS = {"VOX_DEBUG_NO_EOS": "1"}  # vox's switch that never samples EOS: max_frames is then exact


class VoxError(RuntimeError):
    """The vox side could not be installed, built or run."""


def _run(cmd: list[str], what: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """cmd, its stderr passed through (progress, errors); fails with `what` named."""
    result = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, **kwargs)
    if result.returncode != 0:
        raise VoxError(f"{what} failed (exit {result.returncode}): {' '.join(cmd)}; its errors are above")
    return result


def installed_version(python: Path) -> str | None:
    """The vox version `python` imports, or None."""
    result = subprocess.run([str(python), "-I", "-c", "import vox; print(vox.__version__)"],
                            capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else None


def ensure_venv(venv: Path) -> Path:
    """The Python of `venv` with vox-tts==VERSION, created with pip once (PyPI access needed
    then). A venv left half-installed has no marker and is made again."""
    python, marker = venv / "bin" / "python", venv / "vox-tts.installed"
    if marker.is_file() and marker.read_text().strip() == VERSION:
        return python
    if venv.exists():
        shutil.rmtree(venv)
    log.info("installing vox-tts %s into its own virtual environment %s", VERSION, venv)
    _run([sys.executable, "-m", "venv", str(venv)], "creating the vox virtual environment")
    _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--quiet", f"vox-tts=={VERSION}"],
         f"pip install vox-tts=={VERSION}")
    marker.write_text(VERSION + "\n")
    return python


def check_python(python: Path) -> Path:
    """`python` must import vox at the pinned version."""
    found = installed_version(python)
    if found != VERSION:
        raise VoxError(f"{python} imports vox {found or '(none)'}; the benchmark needs vox-tts=={VERSION}")
    return python


def build_model(python: Path, checkpoint: Path, out: Path) -> Path:
    """`out`: the checkpoint as a vox .tmod (q8 weights), built once aside and renamed into place."""
    if out.is_file():
        return out
    partial = out.with_name(f"{out.name}.partial-{secrets.token_hex(4)}")
    log.info("building the vox %s model %s from %s", QUANT, out, checkpoint)
    start = time.perf_counter()
    try:
        _run([str(python), "-I", "-m", "vox", "build", "--model", str(checkpoint), "--quant", QUANT, "--no-hash",
              "-o", str(partial)], "vox build")
        os.rename(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    log.info("built %s in %.0f s", out.name, time.perf_counter() - start)
    return out


def sampling(checkpoint: Path) -> dict[str, float]:
    """The checkpoint's default sampling, as vox's parameters (what ours and the official use)."""
    gen = json.loads((checkpoint / "generation_config.json").read_text(encoding="utf-8"))
    return {vox: gen[key] for key, vox in SAMPLING.items()}


@dataclass
class VoxRun:
    """One utterance, streamed. Stage seconds are vox's own timers (engine.stats())."""

    frames: int
    first_audio_s: float  # session created → first PCM chunk
    total_s: float  # session created → last PCM chunk
    chunks: int
    stage_s: dict[str, float]  # prefill, talker, predictor, codec


@dataclass
class VoxResult:
    version: str
    model: str  # the .tmod
    precision: dict[str, str]  # as built: weights, quant, codec
    threads: int
    chunk_frames: int  # its streaming chunk (its default)
    overlapped_codec: bool  # decoding on another thread, in parallel with generation
    plan: dict[str, object]  # its resource plan: mode, threads, overlap, spin
    load_s: float
    frames: int
    ttfa_s: Spread  # first audio, over runs
    e2e_fps: Spread  # frames / wall time (generation and decoding), over runs
    rtf: Spread
    per_frame_ms: dict[str, Spread]  # talker (prefill included), subcode (predictor), decoder
    rss_loaded_mb: float
    peak_rss_mb: float  # of its process, the whole run
    runs: list[VoxRun]


def summarise(raw: dict, model: Path, threads: int, work: Workload) -> VoxResult:
    """The driver's output as figures; every run must have made exactly `work.frames` frames."""
    runs = [VoxRun(**r) for r in raw["runs"]]
    made = [r.frames for r in runs]
    if any(n != work.frames for n in made):
        raise VoxError(f"vox made {made} frames, expected {work.frames} in every run: VOX_DEBUG_NO_EOS did not hold "
                       f"EOS off, or max_frames cut it")
    if any(not any(r.stage_s.values()) for r in runs):
        raise VoxError("vox's stage timers did not count a run (engine.stats() publishes a session's when it is freed)")

    def per_frame(*stages: str) -> Spread:
        return Spread.of(sum(r.stage_s[s] for s in stages) / r.frames for r in runs).scaled(1e3)

    return VoxResult(
        version=raw["version"], model=str(model), precision=raw["precision"], threads=threads,
        chunk_frames=raw["chunk_frames"], overlapped_codec=raw["overlapped_codec"], plan=raw["plan"],
        load_s=raw["load_s"], frames=work.frames, ttfa_s=Spread.of(r.first_audio_s for r in runs),
        e2e_fps=Spread.of(r.frames / r.total_s for r in runs), rtf=Spread.of(r.total_s / work.audio_s for r in runs),
        per_frame_ms={"talker": per_frame("prefill", "talker"), "subcode": per_frame("predictor"),
                      "decoder": per_frame("codec")},
        rss_loaded_mb=raw["rss_loaded_mb"], peak_rss_mb=raw["peak_rss_mb"], runs=runs)


def bench_vox(python: Path, model: Path, work: Workload, threads: int, params: dict[str, float],
              seed: int = 100) -> VoxResult:
    """vox_driver.py in a child process of `python` (isolated mode: only the vox venv's packages)."""
    config = {"model": str(model), "text": work.text, "speaker": work.speaker, "language": work.language,
              "frames": work.frames, "runs": work.runs, "threads": threads, "seed": seed, "sampling": params,
              "warm_up_frames": min(work.frames, 10)}
    result = _run([str(python), "-I", str(DRIVER)], "the vox driver", input=json.dumps(config),
                  env={**os.environ, **NO_EOS})
    vox = summarise(json.loads(result.stdout), model, threads, work)
    log.info("vox %s (%s): %s frames/s with decoding, first audio %s ms", vox.version, QUANT, vox.e2e_fps.text(".2f"),
             vox.ttfa_s.scaled(1e3).text(".0f"))
    return vox
