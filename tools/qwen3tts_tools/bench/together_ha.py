"""Several models in one server, through Home Assistant's eyes: wyoming-bench against a server
of the CustomVoice model alone, one of the Base model alone (a cloned voice) and one serving
both, in one run — the first audio of the preset voice and of the cloned voice from the
server that serves both, next to each served alone (docs/BENCHMARKS.md, "Several models in
one server"). The servers and wyoming-bench are those of vs_piper (same venv, same texts).

    python -m qwen3tts_tools.bench.together_ha --custom DIR --base DIR [--work-dir DIR] [--runs N] [-o OUT]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path

from ..synthetic.recording import speech_like, write_float_wav
from .process import ServerChild, free_port
from .vs_piper import (
    BENCH_PACKAGES,
    DEFAULT_WORK_DIR,
    STOP_TIMEOUT_S,
    TEXTS,
    bench_command,
    ensure_venv,
    markdown_table,
    parse_bench_output,
    run_bench,
    server_names,
    start_all,
    summarize,
)

log = logging.getLogger("qwen3tts_tools.bench.together_ha")

CLONE = "grandma"
REF_TEXT = "This is the reference recording of the voice, about five seconds of it."


def _server(label: str, models: list[Path], port: int, config: Path, args: argparse.Namespace) -> ServerChild:
    cmd = [sys.executable, "-m", "wyoming_qwen3tts", *[a for m in models for a in ("--model", str(m))],
           "--uri", f"tcp://127.0.0.1:{port}", "--threads", str(args.threads), "--data-dir",
           str(args.work_dir / "together-data"), "--config", str(config)]
    return ServerChild("wyoming-qwen3tts", cmd, port, args.work_dir / f"together-{label}.log")


def run(args: argparse.Namespace) -> Path:
    work = args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    bench_python = ensure_venv(work / "bench-venv", BENCH_PACKAGES)
    recording = write_float_wav(work / "together-clone.wav", speech_like(5 * 24000, 7))
    config = work / "together-voices.yaml"  # a synthetic model never ends a sentence: cap its frames
    engine = {"max_frames": args.max_frames}
    config.write_text(json.dumps({"engine": engine, "voices": [{"name": CLONE, "ref_audio": str(recording),
                                                                "ref_text": REF_TEXT}]}))
    alone = work / "together-engine.yaml"
    alone.write_text(json.dumps({"engine": engine}))
    ports = {"custom": free_port(), "base": free_port(), "both": free_port()}
    servers = [_server("custom", [args.custom], ports["custom"], alone, args),
               _server("base", [args.base], ports["base"], config, args),
               _server("both", [args.custom, args.base], ports["both"], config, args)]
    texts = list(TEXTS.values())
    outputs: dict[str, str] = {}
    try:
        asyncio.run(start_all(servers))
        for voice, alone in (("ryan", "custom"), (CLONE, "base")):
            cmd = bench_command(bench_python, [ports[alone], ports["both"]], texts, args.runs, args.warmup, voice)
            outputs[voice] = run_bench(cmd, timeout=args.bench_timeout)
    finally:
        for server in servers:
            server.stop(STOP_TIMEOUT_S)
    labels = {ports["custom"]: "CustomVoice alone", ports["base"]: "Base alone", ports["both"]: "both in one server"}
    tables = []
    for voice, stdout in outputs.items():
        parsed = parse_bench_output(stdout, texts)
        if not parsed:
            raise RuntimeError(f"no results in wyoming-bench's output for {voice}: {stdout[-2000:]}")
        tables.append(f"### Voice {voice}\n\n{markdown_table(summarize(parsed, TEXTS), server_names(parsed, labels))}")
    args.output.mkdir(parents=True, exist_ok=True)
    path = args.output / "together-ha.md"
    path.write_text(f"# Several models in one server, through wyoming-bench\n\nServers: `{args.custom}` alone, "
                    f"`{args.base}` alone (voice {CLONE}, an in-context clone of a synthetic 5 s recording), "
                    f"both in one server; --threads {args.threads}, engine.max_frames {args.max_frames}; "
                    f"{args.runs} timed runs per server, text and "
                    f"mode after {args.warmup} warm-up.\n\n" + "\n".join(tables))
    print(path.read_text())
    return path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m qwen3tts_tools.bench.together_ha", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--custom", type=Path, required=True, help="converted CustomVoice model directory")
    p.add_argument("--base", type=Path, required=True, help="converted Base model directory")
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-frames", type=int, default=60,
                   help="frames per request at most (a synthetic model never ends a sentence itself)")
    p.add_argument("--bench-timeout", type=float, default=3600.0)
    p.add_argument("-o", "--output", type=Path, default=Path("."))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.info("wrote %s", run(parse_args(argv)))


if __name__ == "__main__":
    main()
