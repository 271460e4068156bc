"""The vox-tts side of qwen3tts-bench, run by the vox virtual environment's Python (never
imported by the package: it needs only the standard library and vox).

Protocol: one JSON object on stdin (model, text, speaker, language, frames, runs, threads,
seed, sampling, warm_up_frames), one JSON object on stdout (the load, each run's timings and
vox's own stage timers, the process's RSS); progress goes to stderr. EOS is held off by
the caller through vox's VOX_DEBUG_NO_EOS environment variable, so `max_frames` is the exact
length; the driver reports the frames it got and the caller checks them.
"""
from __future__ import annotations

import json
import logging
import resource
import sys
import time
from typing import Any

log = logging.getLogger("vox-driver")

STAGES = ("prefill", "talker", "predictor", "codec")  # vox's engine.stats()["backend"]["seconds"]


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _peak_rss_mb() -> float:
    """This process's own high-water mark (VmHWM), as engine.memory.peak_mb reads it (this
    driver imports only the standard library). Not ru_maxrss: a child's starts at its parent's,
    which Linux carries across fork and exec, and the bench that starts this one is large."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))


def _stage_s(engine: Any) -> dict[str, float]:
    seconds = engine.stats()["backend"]["seconds"]
    return {stage: float(seconds[stage]) for stage in STAGES}


def _one_run(engine: Any, voice: Any, config: dict[str, Any], frames: int, seed: int) -> dict[str, Any]:
    """One utterance through a streaming session, as a client would play it: the fields of
    vox_peer.VoxRun (the caller's side of the protocol)."""
    spf = engine.info["manifest"]["audio"]["samples_per_frame"]
    before = _stage_s(engine)
    start = time.perf_counter()
    session = engine.session(voice, seed=seed, max_frames=frames, language=config["language"], **config["sampling"])
    session.feed(config["text"])
    first, samples, chunks = None, 0, 0
    for chunk in session:
        if first is None:
            first = time.perf_counter() - start
        samples += len(chunk)
        chunks += 1
    total = time.perf_counter() - start
    del session  # a session's stage timers reach engine.stats() when it is freed
    after = _stage_s(engine)
    if first is None:
        raise RuntimeError("vox produced no audio")
    return {"frames": samples // spf, "first_audio_s": first, "total_s": total, "chunks": chunks,
            "stage_s": {s: after[s] - before[s] for s in STAGES}}


def measure(config: dict[str, Any]) -> dict[str, Any]:
    """Load, one warm-up utterance (page in the mapped weights, size the buffers), then the runs."""
    import vox

    start = time.perf_counter()
    engine = vox.Engine(config["model"], device="cpu", threads=config["threads"])
    voice = engine.speaker_voice(config["speaker"])
    load_s = time.perf_counter() - start
    loaded = _rss_mb()
    _one_run(engine, voice, config, config["warm_up_frames"], seed=config["seed"] - 1)
    runs = []
    for r in range(config["runs"]):
        runs.append(_one_run(engine, voice, config, config["frames"], seed=config["seed"] + r))
        run = runs[-1]
        log.info("vox run %d: %d frames, first audio %.0f ms, %.2f frames/s", r + 1, run["frames"],
                 run["first_audio_s"] * 1e3, run["frames"] / run["total_s"])
    info, stats = engine.info, engine.stats()
    return {"version": vox.__version__, "load_s": load_s, "rss_loaded_mb": loaded,
            "peak_rss_mb": _peak_rss_mb(),
            "precision": info["manifest"]["precision"], "chunk_frames": info["manifest"]["generation"]["chunk_frames"],
            "overlapped_codec": stats["backend"]["overlapped_codec"],
            "plan": {k: stats["plan"][k] for k in ("backend", "mode", "threads", "overlap", "spin")},
            "runs": runs}


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    result = measure(json.load(sys.stdin))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
