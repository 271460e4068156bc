"""Where the codec decoder's time goes: OpenVINO's per-node performance counters over a stream
of steady chunks, the graph compiled as the engine compiles it (static batch, the engine's
properties), its state carried from call to call. Grouped by node type and kernel, per frame.

    python -m qwen3tts_tools.bench.decoder_profile --converted DIR [--chunk 8] [--as-cpu avx2-vnni]
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from wyoming_qwen3tts.engine.devices import PRECISION_SETTINGS

from .as_cpu import PROFILES
from .process import run_isolated, setup_logging

log = logging.getLogger("qwen3tts-bench")


@dataclass
class NodeCost:
    """One group of nodes: how many, and their time per decoded frame."""

    node_type: str
    kernel: str
    nodes: int
    ms_per_frame: float
    share: float  # of the graph's summed node time


@dataclass
class DecoderProfile:
    graph: str
    precision: str
    frames_per_call: int
    calls: int
    ms_per_frame: float  # summed node time
    wall_ms_per_frame: float  # infer() as the caller sees it (profiling on)
    groups: list[NodeCost]


def profile(model_dir: Path, chunk: int, precision: str, threads: int | None, calls: int,
            seed: int = 0) -> DecoderProfile:
    """Run in its own process (the caps of --as-cpu are in its environment)."""
    from wyoming_qwen3tts.engine.graphs import fix_batch
    from wyoming_qwen3tts.engine.loaded_model import LoadedModel

    model = LoadedModel(model_dir, precision=precision, threads=threads)
    path = model.dir / f"codec_steady_{chunk}.xml"
    ir = fix_batch(model.core.read_model(path), model.decoder_batch)
    compiled = model.core.compile_model(ir, "CPU", {**model.properties("decoder"), "PERF_COUNT": True})
    request = compiled.create_infer_request()
    rng = np.random.default_rng(seed)
    inputs = {p.any_name: np.zeros(list(p.shape), p.element_type.to_dtype()) for p in compiled.inputs}
    inputs["frames"][:] = chunk
    wall = 0.0
    totals: defaultdict[tuple[str, str], float] = defaultdict(float)  # (node type, kernel) -> seconds
    counts: defaultdict[tuple[str, str], int] = defaultdict(int)
    for call in range(calls + 2):  # two calls to warm up
        inputs["codes"][:] = rng.integers(0, 2048, inputs["codes"].shape)
        start = time.perf_counter()
        out = request.infer(inputs)
        if call >= 2:
            wall += time.perf_counter() - start
            for info in request.profiling_info:
                key = (info.node_type, info.exec_type)
                totals[key] += info.real_time.total_seconds()
                counts[key] += 1
        for port in compiled.outputs:  # the next call continues the stream
            name = port.any_name
            if name.startswith("next."):
                inputs["state." + name[len("next."):]] = out[port]
    frames = calls * chunk
    summed = sum(totals.values())
    groups = sorted((NodeCost(t, k, counts[(t, k)] // calls, s / frames * 1e3, s / summed)
                     for (t, k), s in totals.items() if s > 0), key=lambda g: -g.ms_per_frame)
    return DecoderProfile(path.stem, model.precisions["decoder"], chunk, calls, summed / frames * 1e3,
                          wall / frames * 1e3, groups)


def markdown(p: DecoderProfile, top: int) -> str:
    lines = [f"{p.graph} ({p.precision}, {p.frames_per_call} frames a call, {p.calls} calls): "
             f"{p.ms_per_frame:.1f} ms per frame in its nodes, {p.wall_ms_per_frame:.1f} ms per frame wall", "",
             "| node type | kernel | nodes | ms/frame | share |", "| --- | --- | ---: | ---: | ---: |"]
    lines += [f"| {g.node_type} | {g.kernel} | {g.nodes} | {g.ms_per_frame:.2f} | {g.share:.1%} |"
              for g in p.groups[:top]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qwen3tts_tools.bench.decoder_profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--converted", type=Path, required=True, help="a converted model directory")
    parser.add_argument("--chunk", type=int, default=8, help="the steady chunk graph to profile (frames a call)")
    parser.add_argument("--precision", choices=PRECISION_SETTINGS, default="auto")
    parser.add_argument("--threads", type=int, help="inference threads (default: every core)")
    parser.add_argument("--calls", type=int, default=20, help="timed calls (after two to warm up)")
    parser.add_argument("--as-cpu", choices=sorted(PROFILES), help="as qwen3tts-bench --as-cpu")
    parser.add_argument("--top", type=int, default=25, help="groups in the table")
    parser.add_argument("--json", type=Path, help="also write every group here")
    args = parser.parse_args(argv)
    setup_logging(logging.INFO)
    if args.as_cpu:
        PROFILES[args.as_cpu].apply()
    result = run_isolated(profile, args.converted, args.chunk, args.precision, args.threads, args.calls)
    if args.json:
        args.json.write_text(json.dumps(asdict(result), indent=1), encoding="utf-8")
    print(markdown(result, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
