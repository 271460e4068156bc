"""Our engine under load: one stream and several concurrent ones, every request exactly
`frames` frames long (EOS held off), through the real scheduler with streaming audio.

Peak RSS is a process-wide maximum, so the levels whose peak is reported (1 and 4 streams)
each run in a process of their own; the other levels share one."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from wyoming_qwen3tts.engine.audio import SAMPLE_RATE
from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.engine.memory import Resident, peak_mb
from wyoming_qwen3tts.engine.metrics import EngineMetrics
from wyoming_qwen3tts.engine.open import Placement, open_engine
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.engine.scheduler import Scheduler
from wyoming_qwen3tts.engine.step import StepTimes
from wyoming_qwen3tts.model.prompt import VoiceRequest

from .process import rss_mb
from .stats import Spread, percentile

log = logging.getLogger(__name__)

FRAME_S = 0.08  # audio per frame: 1920 samples at 24 kHz (12.5 frames/s is real time)
PARTS = ("talker", "subcode", "codec", "host")  # where a step's time goes (StepTimes fields)
ISOLATED = (1, 4)  # concurrency levels measured each in a process of its own (their peak RSS is reported)


@dataclass(frozen=True)
class Workload:
    """What every request says, and how it is generated."""

    text: str
    speaker: str
    language: str
    frames: int  # per request, exactly (EOS held off, frame cap = frames)
    runs: int  # per scenario

    @property
    def audio_s(self) -> float:
        return self.frames * FRAME_S


@dataclass(frozen=True)
class EngineSetup:
    backend: str = "auto"  # engine.backend: who runs the talker and the code predictor
    precision: str = "f32"  # as asked of LoadedModel ("auto": it picks per graph and device)
    kv_precision: str = "u8"
    threads: int | None = None  # inference threads per graph (None: every core)
    first_chunk: int = 1
    steady_chunk: int = 8
    max_batch: int = 8  # the engine's batch and queue limit, the same in every process (the most streams)
    kernels: str = "auto"  # engine.kernels: the instruction set of the native runner's own kernels
    codec_lead: bool = False  # engine.codec_lead: a stream's first 40 ms decoded ahead (one more decoder)


@dataclass
class LevelResult:
    """`streams` requests submitted together, `runs` times."""

    streams: int
    aggregate_fps: Spread  # frames of every stream / wall time, over runs
    ttfa_p50_s: Spread  # over runs
    ttfa_p90_s: Spread
    ttfa_s: list[float]  # every request of every run: the distribution
    rtf: Spread  # per request (time / audio duration), every request of every run
    per_frame_ms: dict[str, Spread]  # PARTS and "total": step time per generated frame, over runs
    step_ms: Spread  # one engine step (one talker call for all streams), over runs
    blocks_used: int  # most KV blocks in use during the runs
    peak_rss_mb: float  # of the process, after this level (1 and 4 streams: alone in theirs)


@dataclass
class OursResult:
    model_dir: str
    setup: EngineSetup
    load_s: float
    rss_loaded_mb: float  # after compiling every graph (the one-stream process)
    precisions: dict[str, str]  # graph → the precision it ran with (LoadedModel resolves "auto" per device)
    prompt_tokens: int
    blocks_total: int
    block_size: int  # tokens per KV block
    kv_block_mb: float
    levels: list[LevelResult]
    # (stage, anonymous MB, file MB) resident: before the runner, after each graph it compiled
    # (native runner only), after the warm-up request; the one-stream process
    memory: list[tuple[str, float, float]] = field(default_factory=list)
    subcode_runtime: str = "openvino"  # who ran the code predictor (NativeRunner.subcode_runtime)
    talker_runtime: str = "openvino"  # who ran the talker (NativeRunner.talker_runtime)

    @property
    def one(self) -> LevelResult:
        """The one-stream scenario (the CLI always runs it)."""
        return next(level for level in self.levels if level.streams == 1)

    def level(self, streams: int) -> LevelResult | None:
        return next((level for level in self.levels if level.streams == streams), None)


def process_groups(levels: list[int]) -> list[list[int]]:
    """The levels each child process runs: 1 and 4 streams alone, the others together."""
    rest = [n for n in levels if n not in ISOLATED]
    return [[n] for n in ISOLATED if n in levels] + ([rest] if rest else [])


def merged(parts: list[OursResult]) -> OursResult:
    """One result from the processes of process_groups (the first ran one stream)."""
    return replace(parts[0], levels=sorted((level for p in parts for level in p.levels), key=lambda x: x.streams))


@dataclass
class _Run:
    wall_s: float
    ttfa_s: list[float]
    rtf: list[float]
    times: StepTimes  # this run's share
    frames: int
    blocks_used: int


def _delta(after: StepTimes, before: StepTimes) -> StepTimes:
    return StepTimes(after.steps - before.steps, *(getattr(after, f"{p}_s") - getattr(before, f"{p}_s")
                                                   for p in PARTS))


def _settled(engine: Scheduler, requests_done: int, timeout: float = 30.0) -> EngineMetrics:
    """Metrics once the engine has published the end of every request of a run."""
    deadline = time.monotonic() + timeout
    while True:
        metrics = engine.metrics()
        if metrics.requests_done >= requests_done and metrics.active == 0:
            return metrics
        if time.monotonic() > deadline:
            raise RuntimeError(f"the engine did not publish the end of its requests within {timeout} s")
        time.sleep(0.001)


def _one_run(engine: Scheduler, voice: VoiceRequest, work: Workload, streams: int, seed: int) -> _Run:
    gen = engine.model.spec.generation
    before = engine.metrics()
    start = time.perf_counter()
    handles = [engine.submit(voice, SamplingParams.from_defaults(gen, min_frames=work.frames, seed=seed + i),
                             max_frames=work.frames) for i in range(streams)]
    blocks = 0
    for _ in handles[0]:  # sample the pool while the first stream plays
        blocks = max(blocks, engine.metrics().blocks_used)
    for handle in handles[1:]:
        handle.read_all()
    wall = time.perf_counter() - start
    after = _settled(engine, before.requests_done + streams)
    ttfa, rtf = [], []
    for handle in handles:
        r = handle.result
        assert r is not None  # every stream was read to its end
        if r.frames != work.frames or r.reason != "length":
            raise RuntimeError(f"a request ended with {r.frames} frames ({r.reason}); expected exactly "
                               f"{work.frames}: EOS must be held off and the frame cap must not cut it")
        assert r.ttfa_s is not None  # it made frames, so it had audio
        ttfa.append(r.ttfa_s)
        rtf.append(r.total_s / (r.samples / SAMPLE_RATE))
    return _Run(wall, ttfa, rtf, _delta(after.times, before.times), streams * work.frames, blocks)


def _level(engine: Scheduler, voice: VoiceRequest, work: Workload, streams: int) -> LevelResult:
    runs = [_one_run(engine, voice, work, streams, seed=1000 * r) for r in range(work.runs)]
    per_frame = {p: Spread.of(getattr(r.times, f"{p}_s") / r.frames for r in runs).scaled(1e3) for p in PARTS}
    per_frame["total"] = Spread.of(sum(getattr(r.times, f"{p}_s") for p in PARTS) / r.frames
                                   for r in runs).scaled(1e3)
    level = LevelResult(
        streams=streams,
        aggregate_fps=Spread.of(r.frames / r.wall_s for r in runs),
        ttfa_p50_s=Spread.of(percentile(r.ttfa_s, 50) for r in runs),
        ttfa_p90_s=Spread.of(percentile(r.ttfa_s, 90) for r in runs),
        ttfa_s=[t for r in runs for t in r.ttfa_s],
        rtf=Spread.of(x for r in runs for x in r.rtf),
        per_frame_ms=per_frame,
        step_ms=Spread.of(sum(getattr(r.times, f"{p}_s") for p in PARTS) / r.times.steps for r in runs).scaled(1e3),
        blocks_used=max(r.blocks_used for r in runs),
        peak_rss_mb=peak_mb())
    log.info("ours, %d stream(s): %s frames/s, first audio p50 %s ms, %.1f ms per frame", streams,
             level.aggregate_fps.text(), level.ttfa_p50_s.scaled(1e3).text(".0f"), per_frame["total"].median)
    return level


def bench_ours(model_dir: Path, work: Workload, levels: list[int], setup: EngineSetup) -> OursResult:
    """Load the converted model, warm up, then each concurrency level `work.runs` times."""
    start = time.perf_counter()
    config = EngineConfig(max_batch=setup.max_batch, max_queue=setup.max_batch, min_frames=work.frames,
                          max_frames=work.frames, first_chunk=setup.first_chunk, steady_chunk=setup.steady_chunk,
                          backend=setup.backend, kernels=setup.kernels, codec_lead=setup.codec_lead)
    engine = open_engine(model_dir, config, Placement(precision=setup.precision, kv_precision=setup.kv_precision,
                                                      threads=setup.threads))
    model = engine.model
    voice = VoiceRequest(work.text, work.language, work.speaker)
    with engine:
        load_s = time.perf_counter() - start
        loaded = rss_mb()
        warm_up = Workload(work.text, work.speaker, work.language, min(work.frames, setup.steady_chunk + 2), 1)
        _one_run(engine, voice, warm_up, 1, seed=1)  # first inferences allocate and pick kernels
        memory: list[tuple[str, float, float]] = [
            (stage, anon / 1024, file / 1024) for stage, anon, file in getattr(engine.runner, "load_memory", [])]
        resident = Resident.now()  # anonymous: what the plugins allocated; file: mapped weights in memory
        memory.append(("warm-up", resident.anon_kb / 1024, resident.file_kb / 1024))
        results = [_level(engine, voice, work, n) for n in levels]
        metrics = engine.metrics()
    return OursResult(str(model_dir), setup, load_s, loaded, dict(model.precisions), len(model.prompt(voice)),
                      metrics.blocks_total, engine.runner.block_size, engine.runner.kv_block_bytes / 2**20, results,
                      memory,
                      getattr(engine.runner, "subcode_runtime", "openvino"),
                      getattr(engine.runner, "talker_runtime", "openvino"))
