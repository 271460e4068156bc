"""`qwen3tts-bench --together`: a CustomVoice and a Base model served by one server, against
each served alone (docs/BENCHMARKS.md, "Several models in one server").

Each serving runs in a process of its own, loaded the way the server loads it (its plans,
its build_service, one decoder for both), so each peak RSS is that serving's alone: the
CustomVoice model alone, the Base model alone (an in-context clone of a synthetic 5 s
recording), and both together — each model's one stream with the other idle, then one stream
of each at once. The clone's features are encoded first in a throwaway process, so no
measured peak holds the encoders."""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from wyoming_qwen3tts.config import ModelEntry, ServerConfig, VoiceConfig, apply_overrides
from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.engine.memory import peak_mb
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.server.loading import build_services
from wyoming_qwen3tts.server.service import Service

from ..synthetic.recording import speech_like, write_float_wav
from .process import rss_mb, run_isolated
from .scenarios import EngineSetup, Workload
from .stats import Spread

log = logging.getLogger(__name__)

CLONE = "clone"
REF_TEXT = "This is the reference recording of the voice, about five seconds of it."


@dataclass
class Served:
    """One serving: which models, and per model its one-stream and both-at-once figures."""

    label: str
    load_s: float
    rss_loaded_mb: float
    peak_rss_mb: float
    alone: dict[str, tuple[Spread, Spread]]  # voice -> (frames/s, first audio ms), the other model idle
    both: dict[str, tuple[Spread, Spread]]  # voice -> the same, one stream of each model at once


def recording(work_dir: Path) -> Path:
    """A 5 s speech-like recording to clone (written once)."""
    path = work_dir / "together-clone.wav"
    if not path.is_file():
        write_float_wav(path, speech_like(5 * 24000, 7))
    return path


def _config(models: list[Path], voices: tuple[VoiceConfig, ...], work: Workload, setup: EngineSetup,
            data_dir: Path) -> ServerConfig:
    engine = EngineConfig(max_batch=4, max_queue=4, min_frames=work.frames, max_frames=work.frames,
                          first_chunk=setup.first_chunk, steady_chunk=setup.steady_chunk, backend=setup.backend,
                          kernels=setup.kernels, codec_lead=setup.codec_lead)
    config = apply_overrides(ServerConfig(engine=engine), data_dir=str(data_dir), precision=setup.precision,
                             kv_precision=setup.kv_precision, threads=setup.threads)
    return dataclasses.replace(config, models=tuple(ModelEntry(str(m)) for m in models), voices=voices)


def _one(service: Service, voice: str, work: Workload, seed: int) -> tuple[float, float]:
    """(frames/s, first audio s) of one request of `voice`, read to its end."""
    entry, language = service.catalogue.resolve(voice, work.language)
    params = SamplingParams.from_defaults(service.engine.model.spec.generation, min_frames=work.frames, seed=seed)
    handle = service.engine.submit(entry.request(work.text, language), params, max_frames=work.frames)
    handle.read_all()
    result = handle.result
    assert result is not None and result.ttfa_s is not None
    if result.frames != work.frames:
        raise RuntimeError(f"{voice}: {result.frames} frames, expected {work.frames} (EOS must be held off)")
    return result.frames / result.total_s, result.ttfa_s


def _spreads(runs: list[tuple[float, float]]) -> tuple[Spread, Spread]:
    return Spread.of(r[0] for r in runs), Spread.of(r[1] for r in runs).scaled(1e3)


def serve_and_measure(label: str, models: list[Path], voices: tuple[VoiceConfig, ...], speak: list[str],
                      work: Workload, setup: EngineSetup, data_dir: Path) -> Served:
    """Load `models` as the server does and measure `speak[i]` (a voice of model i)."""
    start = time.perf_counter()
    services = build_services(_config(models, voices, work, setup, data_dir))
    try:
        load_s, loaded = time.perf_counter() - start, rss_mb()
        alone = {voice: _spreads([_one(s, voice, work, 1000 * r) for r in range(work.runs)])
                 for s, voice in zip(services, speak)}
        both: dict[str, tuple[Spread, Spread]] = {}
        if len(services) > 1:
            runs: dict[str, list[tuple[float, float]]] = {voice: [] for voice in speak}
            for r in range(work.runs):
                threads = [threading.Thread(
                    target=lambda s=s, v=v, seed=1000 * r: runs[v].append(_one(s, v, work, seed)))
                           for s, v in zip(services, speak)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            both = {voice: _spreads(figures) for voice, figures in runs.items()}
        return Served(label, load_s, loaded, peak_mb(), alone, both)
    finally:
        for service in services:
            service.engine.close()


def _encode_clone(base: Path, voices: tuple[VoiceConfig, ...], work: Workload, setup: EngineSetup,
                  data_dir: Path) -> None:
    """Load the Base model once so the clone's features are encoded into its cache."""
    for service in build_services(_config([base], voices, dataclasses.replace(work, frames=2), setup, data_dir)):
        service.engine.close()


def bench_together(custom: Path, base: Path, work: Workload, setup: EngineSetup, work_dir: Path) -> list[Served]:
    """CustomVoice alone, Base alone, both together: each in its own process."""
    voices = (VoiceConfig(name=CLONE, ref_audio=str(recording(work_dir)), ref_text=REF_TEXT),)
    data_dir = work_dir / "together-data"
    run_isolated(_encode_clone, base, voices, work, setup, data_dir)
    return [run_isolated(serve_and_measure, "CustomVoice alone", [custom], (), [work.speaker], work, setup, data_dir),
            run_isolated(serve_and_measure, "Base alone", [base], voices, [CLONE], work, setup, data_dir),
            run_isolated(serve_and_measure, "both in one server", [custom, base], voices, [work.speaker, CLONE],
                         work, setup, data_dir)]


def markdown(servings: list[Served], command: str, work: Workload, setup: EngineSetup) -> str:
    """The table: per serving and voice, one stream alone and both at once; load and memory."""
    lines = [f"Command: `{command}`", "",
             f"{work.frames} frames ({work.audio_s:.1f} s) per request, {work.runs} runs, figures median "
             f"(min–max); backend {setup.backend}, precision {setup.precision}, KV {setup.kv_precision}, "
             f"codec lead {'on' if setup.codec_lead else 'off'}.", "",
             "| served | voice | frames/s, alone | first audio ms, alone | frames/s, both at once "
             "| first audio ms, both at once | RSS loaded MB | peak RSS MB | load s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in servings:
        for voice, (fps, ttfa) in s.alone.items():
            both = s.both.get(voice)
            lines.append(f"| {s.label} | {voice} | {fps.text()} | {ttfa.text('.0f')} | "
                         f"{both[0].text() if both else '–'} | {both[1].text('.0f') if both else '–'} | "
                         f"{s.rss_loaded_mb:.0f} | {s.peak_rss_mb:.0f} | {s.load_s:.1f} |")
    apart = max(s.peak_rss_mb for s in servings if len(s.alone) == 1)
    together = next((s for s in servings if len(s.alone) > 1), None)
    if together is not None:
        lines += ["", f"Together: peak {together.peak_rss_mb:.0f} MB, "
                      f"{together.peak_rss_mb - apart:+.0f} MB over the larger served alone ({apart:.0f} MB)."]
    return "\n".join(lines)
