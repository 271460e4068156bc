"""qwen3tts-bench: time to first audio, RTF, throughput and memory of our engine, side by side
with its peers on the same checkpoint and text — the official PyTorch implementation and
vox-tts, the strongest CPU one — against this machine's memory-bandwidth bound. Writes JSON
(every figure, and a flat summary), markdown and a PNG plot."""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import secrets
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from wyoming_qwen3tts.backend_flags import add_backend_flags
from wyoming_qwen3tts.convert.ops import WEIGHT_FORMATS
from wyoming_qwen3tts.convert.pipeline import CODEC_FORMATS, convert
from wyoming_qwen3tts.engine.contention import Contention
from wyoming_qwen3tts.engine.devices import PRECISION_SETTINGS
from wyoming_qwen3tts.model.manifest import older_format
from wyoming_qwen3tts.server.models import formats_name

from ..synthetic.presets import PRESETS
from ..synthetic.writer import write_checkpoint
from . import together, vox_peer
from .as_cpu import PROFILES, larger_kernels
from .limits import frame_bound, graph_reads, read_bandwidth
from .machine import machine, versions
from .official import bench_official
from .plot import plot
from .process import run_isolated, setup_logging
from .report import Report, compare_official, compare_vox, markdown, summary, write_json
from .scenarios import EngineSetup, Workload, bench_ours, merged, process_groups

log = logging.getLogger("qwen3tts-bench")

TEXT = "Good evening! The living room lights are off, the front door is locked, and tomorrow will be sunny."
VARIANT = "custom_voice"
BUSY = 0.05  # share of the CPU other processes may take before the figures are flagged
PEERS = ("official", "vox")


def _levels(text: str) -> list[int]:
    levels = sorted({int(x) for x in text.split(",")})
    if not levels or levels[0] < 1 or 1 not in levels:
        raise argparse.ArgumentTypeError("concurrency levels must be positive and include 1 (the one-stream figures)")
    return levels


def _peers(text: str) -> tuple[str, ...]:
    if text == "none":
        return ()
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",")))
    unknown = [n for n in names if n not in PEERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown peer(s) {', '.join(unknown)}: name any of {', '.join(PEERS)}, "
                                         f"or none")
    return names


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="qwen3tts-bench", description=__doc__)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="0.6b", help="synthetic checkpoint size")
    parser.add_argument("--work-dir", type=Path, default=Path.home() / ".cache" / "wyoming-qwen3tts" / "bench",
                        help="where the synthetic checkpoint, its conversions, the vox venv and vox model are made "
                             "once and reused")
    parser.add_argument("--checkpoint", type=Path, help="an existing checkpoint directory instead of the work dir's")
    parser.add_argument("--converted", type=Path,
                        help="its existing conversion (with --weights) instead of the work dir's")
    parser.add_argument("--weights", choices=WEIGHT_FORMATS, default="int8",
                        help="our talker and subcode weights: the conversion {preset}-custom_voice-{weights}")
    parser.add_argument("--codec-weights", choices=CODEC_FORMATS, default="fp32",
                        help="our codec decoder's weights (int8: docs/BENCHMARKS.md \"The decoder in INT8\"); "
                        "other than fp32, the conversion's name ends in -codec_{codec_weights}")
    parser.add_argument("--peers", type=_peers, default=PEERS,
                        help="comma-separated peers to measure next to ours: official, vox; or none")
    parser.add_argument("--vox-python", type=Path,
                        help=f"a Python with vox-tts=={vox_peer.VERSION} instead of the work dir's vox venv "
                             f"(which the first run creates with pip)")
    parser.add_argument("-o", "--out", type=Path, default=Path("bench-results"),
                        help="writes bench-PRESET.json, .md and .png here")
    parser.add_argument("--frames", type=int, default=40, help="frames per request (80 ms each), EOS held off")
    parser.add_argument("--runs", type=int, default=3, help="runs per scenario (figures: median, min, max)")
    parser.add_argument("--streams", type=_levels, default=[1, 2, 4, 8], help="concurrency levels, e.g. 1,2,4,8")
    parser.add_argument("--probe-frames", type=int, default=8,
                        help="frames of the official dtype probe (each of float32 and bfloat16)")
    parser.add_argument("--text", default=TEXT)
    parser.add_argument("--speaker", default="ryan")
    parser.add_argument("--language", default="english")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="inference threads of each implementation")
    add_backend_flags(parser, default="auto")  # engine.backend and engine.kernels
    parser.add_argument("--precision", choices=PRECISION_SETTINGS, default="f32",
                        help="our compute precision (auto: per graph and device)")
    parser.add_argument("--as-cpu", choices=sorted(PROFILES),
                        help="stand in for a smaller CPU: every stage as it would run there (the runner's kernels "
                             "for it, OpenVINO held to its instruction set; docs/BENCHMARKS.md)")
    parser.add_argument("--bandwidth-mb", type=int, default=1024, help="buffer read to measure bandwidth")
    parser.add_argument("--codec-lead", action=argparse.BooleanOptionalAction, default=False,
                        help="decode a stream's first 40 ms ahead of the rest of its first frame (engine.codec_lead; "
                             "default off, as the server's)")
    parser.add_argument("--together", action="store_true",
                        help="instead: a CustomVoice and a Base model of --preset served by one server, against each "
                             "served alone (one stream each, both at once, peak RSS; docs/BENCHMARKS.md)")
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    if args.frames < 2 or args.runs < 1 or args.probe_frames < 1:
        parser.error("--frames must be >= 2, --runs and --probe-frames >= 1")
    if args.kernels != "auto" and args.backend == "python":
        parser.error("--kernels needs the native runner (the kernels live in it), not --backend python")
    if args.as_cpu:
        profile = PROFILES[args.as_cpu]
        if args.kernels not in ("auto", profile.kernels) or args.backend == "python":
            parser.error(f"--as-cpu {args.as_cpu} runs the native runner's {profile.kernels} kernels: leave out "
                         f"--kernels {args.kernels} and --backend {args.backend}")
        if args.together:
            parser.error("--as-cpu measures one model (its report names the stand-in), not --together")
        if args.precision in ("bf16", "f16"):
            parser.error(f"--as-cpu {args.as_cpu}: such a CPU has no native {args.precision}; use auto or f32")
        args.kernels = profile.kernels
    return args


def _write_checkpoint(out: Path, preset: str, variant: str = VARIANT) -> Path:
    """A synthetic checkpoint, written aside and renamed into place (never half-written)."""
    work = out.with_name(f"{out.name}.partial-{secrets.token_hex(4)}")
    write_checkpoint(work, preset, variant)
    os.rename(work, out)
    return out


def prepare(args: argparse.Namespace, variant: str = VARIANT) -> tuple[Path, Path]:
    """The checkpoint and its conversion: given, found in the work dir, or made there (a
    variant other than CustomVoice always in the work dir). A given conversion measured
    without peers needs no checkpoint: none is written then (4.5 GB at 1.7B)."""
    given = variant == VARIANT
    checkpoint = (args.checkpoint if given else None) or args.work_dir / f"{args.preset}-{variant}"
    formats = formats_name(args.weights, args.codec_weights)
    converted = (args.converted if given else None) or args.work_dir / f"{args.preset}-{variant}-{formats}"
    needed = not (args.converted and given) or bool(args.peers)
    if needed and not (checkpoint / "config.json").is_file():
        if args.checkpoint and given:
            raise SystemExit(f"{checkpoint} is not a checkpoint directory")
        log.info("writing the synthetic %s %s checkpoint to %s", args.preset, variant, checkpoint)
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        run_isolated(_write_checkpoint, checkpoint, args.preset, variant)
    manifest = converted / "manifest.json"
    older = (not (args.converted and given) and manifest.is_file() and
             older_format(json.loads(manifest.read_text(encoding="utf-8"))) is not None)
    if not manifest.is_file() or older:  # the work dir's own conversion is made again in an older format
        if args.converted and given:
            raise SystemExit(f"{converted} is not a converted model directory")
        log.info("converting %s to %s in %s%s", checkpoint, args.weights.upper(), converted,
                 " (it holds an older format)" if older else "")
        run_isolated(convert, checkpoint, converted, weights=args.weights, codec_weights=args.codec_weights,
                     force=older)
    options = json.loads((converted / "manifest.json").read_text(encoding="utf-8"))["options"]
    if options["weights"] != args.weights:
        raise SystemExit(f"{converted} holds {options['weights']} weights, not the {args.weights} of --weights")
    if options["codec_weights"] != args.codec_weights:
        raise SystemExit(f"{converted} holds an {options['codec_weights']} codec, not the "
                         f"{args.codec_weights} of --codec-weights")
    return checkpoint, converted


def prepare_vox(args: argparse.Namespace, checkpoint: Path) -> tuple[Path, Path]:
    """vox's Python (given, or the work dir's venv) and its model of the checkpoint."""
    python = vox_peer.check_python(args.vox_python or vox_peer.ensure_venv(args.work_dir / "vox-venv"))
    model = vox_peer.build_model(python, checkpoint, args.work_dir / f"{checkpoint.name}-vox-{vox_peer.QUANT}.tmod")
    return python, model


def _model_facts(checkpoint: Path, converted: Path) -> dict[str, Any]:
    manifest = json.loads((converted / "manifest.json").read_text(encoding="utf-8"))
    return {"checkpoint": str(checkpoint), "converted": str(converted), "converted_created": manifest["created"],
            "converted_by": manifest["package_version"], "options": manifest["options"],
            "graphs": {name: g["weights"] for name, g in manifest["graphs"].items()}}


def measure(args: argparse.Namespace, argv: list[str] | None) -> Report:
    """Every measurement, then the figures derived from them."""
    start = time.perf_counter()
    checkpoint, converted = prepare(args)
    vox = prepare_vox(args, checkpoint) if "vox" in args.peers else None
    setup = EngineSetup(backend=args.backend, precision=args.precision, threads=args.threads,
                        max_batch=max(args.streams), kernels=args.kernels, codec_lead=args.codec_lead)
    as_cpu = None
    if args.as_cpu:
        larger = run_isolated(larger_kernels, converted, args.precision, args.threads, setup.first_chunk,
                              setup.steady_chunk)
        as_cpu = {**dataclasses.asdict(PROFILES[args.as_cpu]), "larger_kernels": larger}
    contention = Contention.start()  # from here on, every figure is a measurement
    work = Workload(args.text, args.speaker, args.language, args.frames, args.runs)
    bandwidth = read_bandwidth(args.bandwidth_mb)
    log.info("read bandwidth: %s GB/s", ", ".join(f"{n} thread(s) {s.text()}" for n, s in bandwidth.gb_per_s.items()))
    ours = merged([run_isolated(bench_ours, converted, work, group, setup) for group in process_groups(args.streams)])
    official = run_isolated(bench_official, checkpoint, work, args.probe_frames, args.threads) \
        if "official" in args.peers else None
    theirs = vox_peer.bench_vox(*vox, work, args.threads, vox_peer.sampling(checkpoint)) if vox else None
    other_cpu_share, steal_share = contention.shares()

    facts = _model_facts(checkpoint, converted)
    steady = f"codec_steady_{setup.steady_chunk}"
    reads = {name: graph_reads(converted / f"{graph}.xml", graph, facts["graphs"][graph], frames)
             for name, graph, frames in (("talker", "talker", 1), ("subcode", "subcode", 1),
                                         ("codec", steady, setup.steady_chunk))}
    kv_per_frame = ours.kv_block_mb * 2**20 / ours.block_size * (ours.prompt_tokens + args.frames / 2)
    bound = frame_bound(reads, kv_per_frame, bandwidth.best,
                        {name: ours.one.per_frame_ms[name].median for name in reads})
    return Report(
        preset=args.preset, created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        command=shlex.join(["qwen3tts-bench", *(sys.argv[1:] if argv is None else argv)]),
        wall_s=time.perf_counter() - start, other_cpu_share=other_cpu_share,
        steal_share=steal_share, machine=machine(), versions=versions(),
        model=facts, workload=work, bandwidth=bandwidth, reads=reads,
        mb_per_frame={name: {p: r.bytes_per_frame(p) / 1e6 for p in r.precisions} for name, r in reads.items()},
        bound=bound, ours=ours, official=official, vox=theirs,
        ratios={**({"official": compare_official(ours, official)} if official else {}),
                **({"vox": compare_vox(ours, theirs)} if theirs else {})},
        summary=summary(ours, official, theirs), as_cpu=as_cpu)


def main_together(args: argparse.Namespace, argv: list[str] | None) -> int:
    """--together: the two models' servings side by side, markdown and JSON."""
    (_, custom), (_, base) = prepare(args), prepare(args, "base")
    work = Workload(args.text, args.speaker, args.language, args.frames, args.runs)
    setup = EngineSetup(backend=args.backend, precision=args.precision, threads=args.threads,
                        kernels=args.kernels, codec_lead=args.codec_lead)
    servings = together.bench_together(custom, base, work, setup, args.work_dir)
    command = shlex.join(["qwen3tts-bench", *(sys.argv[1:] if argv is None else argv)])
    text = together.markdown(servings, command, work, setup)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"together-{args.preset}-{args.weights}"
    Path(f"{stem}.md").write_text(text + "\n", encoding="utf-8")
    Path(f"{stem}.json").write_text(json.dumps([dataclasses.asdict(s) for s in servings], indent=1), encoding="utf-8")
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging(logging.DEBUG if args.debug else logging.INFO)
    if args.as_cpu:
        PROFILES[args.as_cpu].apply()  # before any child process starts
        log.info("standing in for a smaller CPU: %s", PROFILES[args.as_cpu].describe())
    if args.together:
        return main_together(args, argv)
    report = measure(args, argv)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"bench-{args.preset}"  # bench-0.6b: not a suffix to replace
    write_json(report, Path(f"{stem}.json"))
    Path(f"{stem}.md").write_text(markdown(report) + "\n", encoding="utf-8")
    plot(report, Path(f"{stem}.png"))
    print(markdown(report))
    if report.other_cpu_share + report.steal_share > BUSY:
        log.warning("others took %.0f %% of the CPU while measuring (processes %.0f %%, other VMs %.0f %%): the "
                    "figures are low; run again on a quiet machine",
                    (report.other_cpu_share + report.steal_share) * 100,
                    report.other_cpu_share * 100, report.steal_share * 100)
    log.info("wrote %s.{json,md,png} in %.1f min", stem, report.wall_s / 60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
