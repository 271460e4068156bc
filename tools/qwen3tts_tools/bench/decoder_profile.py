"""Where the codec decoder's time goes: OpenVINO's per-node performance counters over a stream
of steady chunks, the graph compiled as the engine compiles it (static batch, the engine's
properties, the state in bf16 where the native runner keeps it so), its state carried from call
to call. Grouped by node type and kernel, per frame.

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
import openvino as ov
from openvino.preprocess import PrePostProcessor

from wyoming_qwen3tts.engine.devices import PRECISION_SETTINGS, device_capabilities
from wyoming_qwen3tts.model.stream_io import NEXT, STATE

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


def state_in_bf16(ir: ov.Model) -> ov.Model:
    """The graph's f32 state inputs and outputs in bf16, as the native runner compiles the chunk
    graphs where the decoder computes bf16 on a CPU with native BF16 (native/src/codec_graphs.cpp,
    docs/OPENVINO.md §14): profiled with f32 state, the decoder shows reorders and f32
    concatenations the engine does not run."""
    ppp = PrePostProcessor(ir)
    for port in ir.inputs:
        if port.any_name.startswith(STATE) and port.element_type == ov.Type.f32:
            ppp.input(port.any_name).tensor().set_element_type(ov.Type.bf16)
    for port in ir.outputs:
        if port.any_name.startswith(NEXT) and port.element_type == ov.Type.f32:
            ppp.output(port.any_name).tensor().set_element_type(ov.Type.bf16)
    return ppp.build()


def profile(model_dir: Path, chunk: int, precision: str, threads: int | None, calls: int,
            seed: int = 0) -> DecoderProfile:
    """Run in its own process (the caps of --as-cpu are in its environment)."""
    from wyoming_qwen3tts.engine.graphs import fix_batch
    from wyoming_qwen3tts.engine.loaded_model import LoadedModel

    model = LoadedModel(model_dir, precision=precision, threads=threads)
    path = model.dir / f"codec_steady_{chunk}.xml"
    ir = fix_batch(model.core.read_model(path), model.decoder_batch)
    if model.precisions["decoder"] == "bf16" and "BF16" in device_capabilities(model.core, "CPU"):
        ir = state_in_bf16(ir)
    compiled = model.core.compile_model(ir, "CPU", {**model.properties("decoder"), "PERF_COUNT": True})
    request = compiled.create_infer_request()
    rng = np.random.default_rng(seed)
    inputs = {p.any_name: ov.Tensor(p.element_type, list(p.shape)) for p in compiled.inputs}
    for tensor in inputs.values():
        tensor.data[:] = 0
    inputs["frames"].data[:] = chunk
    wall = 0.0
    totals: defaultdict[tuple[str, str], float] = defaultdict(float)  # (node type, kernel) -> seconds
    counts: defaultdict[tuple[str, str], int] = defaultdict(int)
    for call in range(calls + 2):  # two calls to warm up
        inputs["codes"].data[:] = rng.integers(0, 2048, inputs["codes"].data.shape)
        start = time.perf_counter()
        request.infer(inputs)
        if call >= 2:
            wall += time.perf_counter() - start
            for info in request.profiling_info:
                key = (info.node_type, info.exec_type)
                totals[key] += info.real_time.total_seconds()
                counts[key] += 1
        for port in compiled.outputs:  # the next call continues the stream
            name = port.any_name
            if name.startswith(NEXT):
                request.get_tensor(port).copy_to(inputs[STATE + name[len(NEXT):]])
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
