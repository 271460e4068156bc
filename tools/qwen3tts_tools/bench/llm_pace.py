"""Speaking while the LLM writes: our server fed a reply at a language model's pace, as Home
Assistant 2025.7+ streams it (synthesize-start, a synthesize-chunk per token, the compat
synthesize, synthesize-stop), once per way of feeding the text (server.text_feeding: sentence;
word, with and without the holdback).

Each reply is cut into LLM-like tokens (a word of up to 6 letters, or even pieces of a longer
one, with the space before it; punctuation on its own: about 4 characters a token) and sent at 20 or 50 tokens/s,
or at 20 tokens/s with a 2 s stall after the first 8 tokens (half the tokens of a shorter
reply). Every audio-chunk's arrival is timestamped. Per request:

- first audio: the first audio-chunk's arrival - the first text chunk sent;
- underruns: a player that starts at the first chunk's arrival and plays continuously at real
  time runs dry whenever a chunk arrives after everything before it has been played: the
  number of those gaps and their total length;
- total: synthesize-stopped - the first text chunk.

Medians over --runs runs per (mode, pacing, text). The server runs as a child process, once
per mode, each on a loopback port of its own, all started before the first request; the
requests go to the modes in turn, so that a slow spell of the machine hits each alike. The
warm-up and the timed requests hold the machine's CPU lock (/tmp/cpu.lock, if it exists), never
while a server starts; a request during which other processes (or virtual machines) took more
than --max-busy of the CPU is made again once they are quiet.

    python -m qwen3tts_tools.bench.llm_pace --model DIR [--runs 3] [-o llm-pace.json] [--markdown llm-pace.md]
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
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from wyoming.audio import AudioChunk
from wyoming.error import Error
from wyoming.event import Event, async_read_event, async_write_event
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped

from wyoming_qwen3tts.engine.contention import Contention

from .machine import machine, versions
from .process import CPU_LOCK, ServerChild, cpu_lock, free_port

log = logging.getLogger("qwen3tts_tools.bench.llm_pace")

TEXTS: dict[str, str] = {
    "short": "The kitchen lights are on.",
    "long": ("I turned on the lights in the living room and the kitchen, set the thermostat to twenty one "
             "degrees, and locked the front door because everyone has left the house."),
    "answer": ("Your next meeting is at three o'clock with the design team. It should take about an hour. "
               "I have set a reminder for fifteen minutes before it starts."),
}
TOKEN_CHARS = 6  # most letters or digits of a word in one token; a longer word is split evenly
TOKEN_RE = re.compile(r"(\s*)(\w+|[^\w\s])|\s+")


@dataclass(frozen=True)
class Pacing:
    """How fast the tokens come: `tokens_per_s`, with a pause of `stall_s` before token
    `stall_after` (at most half the reply's tokens in)."""

    name: str
    tokens_per_s: float
    stall_after: int = 0  # 0: no stall
    stall_s: float = 0.0

    def offsets(self, tokens: int) -> list[float]:
        """When each token is sent, in seconds from the first."""
        stall_at = min(self.stall_after, tokens // 2) if self.stall_after and self.stall_s > 0 else None
        return [i / self.tokens_per_s + (self.stall_s if stall_at is not None and i >= stall_at else 0.0)
                for i in range(tokens)]


PACINGS: dict[str, Pacing] = {p.name: p for p in (Pacing("20/s", 20.0), Pacing("50/s", 50.0),
                                                    Pacing("stall", 20.0, stall_after=8, stall_s=2.0))}


@dataclass(frozen=True)
class Mode:
    """A way the server feeds streamed text: its flags."""

    name: str
    label: str
    args: tuple[str, ...]


def modes(holdback_s: float) -> dict[str, Mode]:
    return {m.name: m for m in (
        Mode("sentence", "sentence, holdback 0", ("--text-feeding", "sentence", "--holdback", "0")),
        Mode("word", f"word, holdback {holdback_s:g} s", ("--text-feeding", "word", "--holdback", f"{holdback_s:g}")),
        Mode("word-nohold", "word, holdback 0", ("--text-feeding", "word", "--holdback", "0")),
    )}


def llm_tokens(text: str) -> list[str]:
    """`text` as an LLM streams it: each word (with the whitespace before it) whole, or in even
    pieces of at most TOKEN_CHARS letters, each punctuation mark its own token. Joined, the text."""
    tokens: list[str] = []
    for m in TOKEN_RE.finditer(text):
        space, body = m.group(1), m.group(2)
        if body is None:  # trailing whitespace
            tokens.append(m.group())
            continue
        n = -(-len(body) // TOKEN_CHARS)
        cuts = [round(i * len(body) / n) for i in range(n + 1)]
        pieces = [body[a:b] for a, b in zip(cuts, cuts[1:])]
        tokens += [space + pieces[0], *pieces[1:]]
    return tokens


def gap_list(arrivals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Where a player that starts with the first chunk as it arrives and plays continuously at
    real time runs dry: (seconds of audio played before, seconds of silence) per gap. A chunk
    that arrives after everything before it has been played makes a gap. `arrivals`: (arrival
    time, seconds of audio) of each chunk, in order."""
    gaps: list[tuple[float, float]] = []
    played_until: float | None = None
    audio = 0.0
    for t, seconds in arrivals:
        if played_until is None:
            played_until = t
        elif t > played_until:
            gaps.append((audio, t - played_until))
            played_until = t
        played_until += seconds
        audio += seconds
    return gaps


# --- the client ---------------------------------------------------------------------------


@dataclass
class Timeline:
    """One paced request as the client saw it, times from the first text chunk sent."""

    arrivals: list[tuple[float, float]] = field(default_factory=list)  # (arrival, audio seconds) per chunk
    text_s: float = 0.0  # synthesize-stop sent
    stopped_s: float | None = None  # synthesize-stopped read
    error: str | None = None


async def paced_request(port: int, text: str, offsets: list[float], tokens: list[str],
                        event_timeout: float = 120.0) -> Timeline:
    """Send `tokens` at `offsets` as one streamed request and read the reply meanwhile."""
    timeline = Timeline()
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10.0)
    t0 = 0.0

    async def send() -> None:
        await async_write_event(SynthesizeStart().event(), writer)
        nonlocal t0
        t0 = time.monotonic()
        for token, at in zip(tokens, offsets):
            delay = t0 + at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await async_write_event(SynthesizeChunk(text=token).event(), writer)
        await async_write_event(Synthesize(text=text).event(), writer)  # Home Assistant's compat copy
        await async_write_event(SynthesizeStop().event(), writer)
        timeline.text_s = time.monotonic() - t0

    async def read() -> None:
        while True:
            event: Event | None = await asyncio.wait_for(async_read_event(reader), event_timeout)
            now = time.monotonic()
            if event is None:
                raise ConnectionError("the server closed the connection before synthesize-stopped")
            if AudioChunk.is_type(event.type):
                chunk = AudioChunk.from_event(event)
                timeline.arrivals.append((now - t0, len(chunk.audio) / (chunk.rate * chunk.width * chunk.channels)))
            elif Error.is_type(event.type) and timeline.error is None:
                timeline.error = Error.from_event(event).text
            elif SynthesizeStopped.is_type(event.type):
                timeline.stopped_s = now - t0
                return

    sender = asyncio.create_task(send())
    try:
        await read()
        await sender
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
        timeline.error = timeline.error or f"{type(e).__name__}: {e}"
    finally:
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
        writer.close()
    return timeline


@dataclass(frozen=True)
class Measurement:
    mode: str
    pacing: str
    text: str
    run: int
    ttfa_s: float | None  # first audio-chunk after the first text chunk
    gaps: int  # underruns of a player started at the first chunk
    gap_s: float  # their total length
    total_s: float | None  # synthesize-stopped after the first text chunk
    audio_s: float
    text_s: float  # the last text sent (synthesize-stop) after the first
    played_s: float | None  # the simulated player done: ttfa + audio + gaps
    chunks: int
    gaps_at: list[tuple[float, float]]  # (audio played before, silence) per gap, seconds
    error: str | None = None
    others: float = 0.0  # share of the CPU other processes took meanwhile
    steal: float = 0.0  # ... and other virtual machines
    attempts: int = 1  # requests made for this one (the others were repeated: others were busy)

    @classmethod
    def of(cls, mode: str, pacing: str, text: str, run: int, timeline: Timeline, others: float = 0.0,
           steal: float = 0.0, attempts: int = 1) -> Measurement:
        found = gap_list(timeline.arrivals)
        gap_s = sum(s for _, s in found)
        audio = sum(s for _, s in timeline.arrivals)
        ttfa = timeline.arrivals[0][0] if timeline.arrivals else None
        return cls(mode, pacing, text, run, ttfa, len(found), gap_s, timeline.stopped_s, audio, timeline.text_s,
                   None if ttfa is None else ttfa + audio + gap_s, len(timeline.arrivals),
                   [(round(a, 3), round(s, 4)) for a, s in found], timeline.error, others, steal, attempts)

    @property
    def ok(self) -> bool:
        return self.error is None and self.ttfa_s is not None and self.total_s is not None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(measurements: list[Measurement], mode_names: list[str], pacings: list[str],
              texts: list[str]) -> list[dict[str, Any]]:
    """One row per (mode, pacing, text): medians over the runs that succeeded, and the most gaps seen."""
    rows = []
    for mode in mode_names:
        for pacing in pacings:
            for text in texts:
                runs = [m for m in measurements if (m.mode, m.pacing, m.text) == (mode, pacing, text)]
                ok = [m for m in runs if m.ok]
                if not runs:
                    continue
                ttfa = [m.ttfa_s for m in ok if m.ttfa_s is not None]  # all of them: ok runs have audio
                rows.append({
                    "mode": mode, "pacing": pacing, "text": text, "ok": len(ok), "runs": len(runs),
                    "ttfa_ms": _ms(_median(ttfa)), "ttfa_min_ms": _ms(min(ttfa, default=None)),
                    "ttfa_max_ms": _ms(max(ttfa, default=None)),
                    "gaps": _median([m.gaps for m in ok]), "gaps_max": max((m.gaps for m in ok), default=None),
                    "gap_ms": _ms(_median([m.gap_s for m in ok])),
                    "longest_gap_ms": _ms(_median([max((g for _, g in m.gaps_at), default=0.0) for m in ok])),
                    "total_s": _median([m.total_s for m in ok if m.total_s is not None]),
                    "audio_s": _median([m.audio_s for m in ok]), "text_s": _median([m.text_s for m in ok]),
                    "played_s": _median([m.played_s for m in ok if m.played_s is not None])})
    return rows


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _cell(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def markdown(result: dict[str, Any]) -> str:
    """The comparison (first audio and underruns side by side per mode), then every figure."""
    rows, labels = result["rows"], {name: m["label"] for name, m in result["modes"].items()}
    names = [n for n in result["modes"] if any(r["mode"] == n for r in rows)]
    by_key = {(r["mode"], r["pacing"], r["text"]): r for r in rows}
    keys = list(dict.fromkeys((r["pacing"], r["text"]) for r in rows))
    head = ["text", "pacing", *[f"{labels[n]}: first audio ms / gaps (ms)" for n in names]]
    lines = ["| " + " | ".join(head) + " |", "| --- | --- |" + " ---: |" * len(names)]
    for pacing, text in keys:
        cells = []
        for n in names:
            r = by_key.get((n, pacing, text))
            cells.append("" if r is None else f"{_cell(r['ttfa_ms'], '.0f')} / {_cell(r['gaps'], 'g')} "
                                              f"({_cell(r['gap_ms'], '.0f')})")
        lines.append(f"| {text} | {pacing} | " + " | ".join(cells) + " |")
    full = ["| mode | pacing | text | ok/runs | first audio, ms (min–max) | gaps (most) | gaps, ms | longest gap, ms "
            "| total, s | text sent, s | audio, s | played to the end, s |",
            "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        full.append(f"| {labels[r['mode']]} | {r['pacing']} | {r['text']} | {r['ok']}/{r['runs']} "
                    f"| {_cell(r['ttfa_ms'], '.0f')} "
                    f"({_cell(r['ttfa_min_ms'], '.0f')}–{_cell(r['ttfa_max_ms'], '.0f')}) "
                    f"| {_cell(r['gaps'], 'g')} ({_cell(r['gaps_max'], 'g')}) | {_cell(r['gap_ms'], '.0f')} "
                    f"| {_cell(r.get('longest_gap_ms'), '.0f')} "
                    f"| {_cell(r['total_s'], '.2f')} | {_cell(r['text_s'], '.2f')} | {_cell(r['audio_s'], '.2f')} "
                    f"| {_cell(r['played_s'], '.2f')} |")
    texts = "\n".join(f"- **{name}** ({t['tokens']} tokens): {t['text']}" for name, t in result["texts"].items())
    m, c = result["machine"], result["contention"]
    engine = result["engine"]
    cap = ", ".join(f"engine.{k} {v}" for k, v in engine.items()) if isinstance(engine, dict) else engine
    others = [x["others"] for x in result["measurements"]] or [0.0]
    steal = [x["steal"] for x in result["measurements"]] or [0.0]
    return (f"# Speaking while the LLM writes\n\n`{result['command']}`\n\n"
            f"{m['cpu']}, {m['cores']} cores; model {result['model']}; server flags "
            f"`{' '.join(result['server_args'])}`; frame cap: {cap}. "
            f"{result['runs']} timed runs per cell after {result['warmup']} warm-up request(s) per text and mode, "
            f"the modes interleaved; medians. During the requests kept, other processes took at most "
            f"{max(others):.1%} of the CPU (median {statistics.median(others):.1%}) and other virtual machines at "
            f"most {max(steal):.1%}; {c['repeated']} request(s) were made again because others took more than "
            f"{c['max_busy']:.0%} during them ({c['kept_busy']} kept above it).\n\n"
            f"Texts:\n\n{texts}\n\n" + "\n".join(lines) + "\n\n" + "\n".join(full) + "\n\n"
            "First audio: first audio-chunk read − first synthesize-chunk sent. Gaps: times a player started at "
            "the first chunk and playing at real time runs dry, for how long in all, and the longest. Total: "
            "synthesize-stopped − first chunk. Played to the end: first audio + audio + gaps.\n")


# --- the run ------------------------------------------------------------------------------


def server_cpu_s(pid: int) -> float:
    """CPU seconds the process has used (user + system; /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_config(path: Path, frames_per_token: float | None, min_frames: int | None) -> dict[str, Any]:
    """The server's config.yaml: the engine's frame cap (random weights hardly ever draw EOS,
    so every sentence runs to it); None keeps the server's default."""
    engine = {k: v for k, v in (("frames_per_token", frames_per_token), ("min_frames", min_frames)) if v is not None}
    path.write_text("engine:\n" + "".join(f"  {k}: {v}\n" for k, v in engine.items()) if engine else "{}\n",
                    encoding="utf-8")
    return engine


class Others:
    """How much of the CPU others took over an interval: the machine's busy time less ours
    (this process and our servers), and what other virtual machines took (steal); as shares
    of all cores' time."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def mark(self) -> tuple[Contention, float]:
        return Contention.start(), self._ours()

    def since(self, mark: tuple[Contention, float]) -> tuple[float, float]:
        contention, ours = mark
        other, steal = contention.shares()
        capacity = max(1e-9, (time.monotonic() - contention.wall) * (os.cpu_count() or 1))
        return max(0.0, other - (self._ours() - ours) / capacity), steal

    def _ours(self) -> float:
        return sum(server_cpu_s(pid) for pid in self.pids)

    async def quiet(self, max_share: float, timeout: float, window_s: float = 2.0) -> bool:
        """Wait until others take at most `max_share` over a window (False: not within `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            mark = self.mark()
            await asyncio.sleep(window_s)
            if sum(self.since(mark)) <= max_share:
                return True
            if time.monotonic() >= deadline:
                return False


async def measure_one(port: int, mode: str, pacing: str, name: str, run: int, args: argparse.Namespace,
                      others: Others, what: str = "run", retries: int | None = None) -> Measurement:
    """One paced request; again (after others have gone quiet) while others took more than
    --max-busy of the CPU during it, at most `retries` times (default --retries)."""
    text = TEXTS[name]
    tokens = llm_tokens(text)
    retries = args.retries if retries is None else retries
    for attempt in range(1, retries + 2):
        mark = others.mark()
        timeline = await paced_request(port, text, PACINGS[pacing].offsets(len(tokens)), tokens, args.event_timeout)
        other, steal = others.since(mark)
        m = Measurement.of(mode, pacing, name, run, timeline, round(other, 4), round(steal, 4), attempt)
        log.info("%s, %s, %s, %s %d: first audio %s ms, %d gaps (%.0f ms), total %s s, audio %.2f s; others %.0f %% "
                 "of the CPU%s", mode, pacing, name, what, run, _cell(_ms(m.ttfa_s), ".0f"), m.gaps, m.gap_s * 1000,
                 _cell(m.total_s, ".2f"), m.audio_s, (other + steal) * 100, f", error: {m.error}" if m.error else "")
        if not m.ok or other + steal <= args.max_busy or attempt > retries:
            return m
        log.info("others took more than %.0f %% of the CPU: again once they are quiet", args.max_busy * 100)
        if not await others.quiet(args.max_busy, args.quiet_timeout):
            log.warning("others stayed busy for %.0f s; measuring anyway", args.quiet_timeout)
    raise AssertionError("unreachable")


async def measure_all(ports: dict[str, int], args: argparse.Namespace, others: Others) -> list[Measurement]:
    """Warm-up, then every run, pacing and text with the modes interleaved (a slow spell of the
    machine hits every mode alike)."""
    fastest = max(PACINGS.values(), key=lambda p: p.tokens_per_s).name
    for run in range(args.warmup):
        for name in args.texts:
            for mode, port in ports.items():
                m = await measure_one(port, mode, fastest, name, run, args, others, "warm-up", retries=0)
                if not m.ok:
                    raise RuntimeError(f"{mode}: warm-up failed: {m.error}")
    return [await measure_one(port, mode, pacing, name, run, args, others)
            for run in range(args.runs) for pacing in args.pacings for name in args.texts
            for mode, port in ports.items()]


def start_server(args: argparse.Namespace, mode: Mode, work: Path, config: Path) -> ServerChild:
    """Our server with the mode's flags, started and ready (never inside the CPU lock)."""
    port = free_port()
    argv = [sys.executable, "-m", "wyoming_qwen3tts", "--model", str(args.model), "--uri", f"tcp://127.0.0.1:{port}",
            "--config", str(config), "--data-dir", str(work / "data"), *server_args(args), *mode.args]
    server = ServerChild(f"wyoming-qwen3tts ({mode.name})", argv, port, work / f"server-{mode.name}.log")
    server.start()
    try:
        asyncio.run(server.wait_ready(args.ready_timeout, log_marker="ready on"))
    except BaseException:
        server.stop(args.stop_timeout)
        raise
    return server


def measure(args: argparse.Namespace, work: Path, config: Path) -> tuple[list[Measurement], dict[str, Any]]:
    """One server per mode, started one after the other; then, under the CPU lock, the warm-up
    and the timed requests; the servers stopped."""
    all_modes = modes(args.holdback)
    servers: dict[str, ServerChild] = {}
    try:
        for name in args.modes:
            servers[name] = start_server(args, all_modes[name], work, config)
        others = Others([s.pid for s in servers.values()])
        with cpu_lock(args.cpu_lock, args.lock_timeout) as locked:
            mark = others.mark()
            found = asyncio.run(measure_all({n: s.port for n, s in servers.items()}, args, others))
            other, steal = others.since(mark)
    finally:
        exit_codes = {name: server.stop(args.stop_timeout) for name, server in servers.items()}
    return found, {"cpu_lock": locked, "other_cpu_share": round(other, 4), "steal_share": round(steal, 4),
                   "max_busy": args.max_busy, "repeated": sum(m.attempts - 1 for m in found),
                   "kept_busy": sum(m.others + m.steal > args.max_busy for m in found),
                   "server_exit_codes": exit_codes}


def server_args(args: argparse.Namespace) -> list[str]:
    out = ["--precision", args.precision] if args.precision else []
    out += ["--threads", str(args.threads)] if args.threads else []
    return out + shlex.split(args.server_args)


def run(args: argparse.Namespace, argv: list[str] | None = None) -> dict[str, Any]:
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="qwen3tts-llm-pace-"))
    work.mkdir(parents=True, exist_ok=True)
    config = work / "config.yaml"
    engine = write_config(config, args.frames_per_token, args.min_frames)
    all_modes = modes(args.holdback)
    measurements, contention = measure(args, work, config)
    manifest = json.loads((args.model / "manifest.json").read_text(encoding="utf-8"))
    result = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python", "-m", "qwen3tts_tools.bench.llm_pace",
                               *(sys.argv[1:] if argv is None else argv)]),
        "machine": machine(), "versions": versions(),
        "model": f"{args.model.name} ({manifest['options'].get('weights')} weights)",
        "model_dir": str(args.model), "server_args": server_args(args),
        "engine": engine or "server default", "runs": args.runs, "warmup": args.warmup,
        "modes": {n: asdict(all_modes[n]) for n in args.modes},
        "pacings": {n: asdict(PACINGS[n]) for n in args.pacings},
        "texts": {n: {"text": TEXTS[n], "tokens": len(llm_tokens(TEXTS[n]))} for n in args.texts},
        "contention": contention,
        "rows": summarize(measurements, args.modes, args.pacings, args.texts),
        "measurements": [asdict(m) for m in measurements],
    }
    if args.work_dir is None and all(m.ok for m in measurements):
        shutil.rmtree(work, ignore_errors=True)
    else:
        log.info("server logs in %s", work)
    return result


def _names(choices: Sequence[str]) -> Any:
    def parse(text: str) -> list[str]:
        names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
        unknown = [n for n in names if n not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"name one or more of {', '.join(choices)}")
        return names
    return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m qwen3tts_tools.bench.llm_pace", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="converted model directory")
    p.add_argument("--modes", type=_names(list(modes(0.5))), default=list(modes(0.5)),
                   help="comma-separated: sentence, word, word-nohold (default all)")
    p.add_argument("--pacings", type=_names(list(PACINGS)), default=list(PACINGS),
                   help="comma-separated: 20/s, 50/s, stall (default all)")
    p.add_argument("--texts", type=_names(list(TEXTS)), default=list(TEXTS),
                   help="comma-separated: short, long, answer (default all)")
    p.add_argument("--runs", type=int, default=3, help="timed runs per mode, pacing and text")
    p.add_argument("--warmup", type=int, default=1, help="untimed requests per text after each server start")
    p.add_argument("--holdback", type=float, default=0.5, help="the word mode's --holdback (s)")
    p.add_argument("--precision", default="auto", help="the server's --precision ('' : its config's)")
    p.add_argument("--threads", type=int, help="the server's --threads")
    p.add_argument("--server-args", default="", help="more flags for the server, one string")
    p.add_argument("--frames-per-token", type=float, default=3.5,
                   help="the server's engine.frames_per_token: random weights run every sentence to this cap, "
                        "3.5 frames (0.28 s) per text token is speech's length (0: the server's default)")
    p.add_argument("--min-frames", type=int, default=0, help="the server's engine.min_frames (-1: its default)")
    p.add_argument("--work-dir", type=Path, help="config, data dir and server logs (default: a temporary one, "
                                                 "removed if every request succeeded)")
    p.add_argument("-o", "--output", type=Path, help="write the JSON here")
    p.add_argument("--markdown", type=Path, help="write the markdown here")
    p.add_argument("--max-busy", type=float, default=0.1,
                   help="a request during which other processes and VMs took more than this share of the CPU is "
                        "made again once they are quiet (1: never)")
    p.add_argument("--retries", type=int, default=8, help="most repetitions of a request for --max-busy")
    p.add_argument("--quiet-timeout", type=float, default=600.0,
                   help="longest wait for the others to be quiet before a repetition (s)")
    p.add_argument("--ready-timeout", type=float, default=600.0, help="bound on a server's start (s)")
    p.add_argument("--stop-timeout", type=float, default=30.0, help="SIGKILL a server this long after SIGTERM (s)")
    p.add_argument("--event-timeout", type=float, default=120.0, help="longest wait for the next event (s)")
    p.add_argument("--cpu-lock", type=Path, default=CPU_LOCK,
                   help="the lock file timed runs take turns on (default %(default)s; a missing file: no lock)")
    p.add_argument("--lock-timeout", type=float, default=3600.0, help="longest wait for the CPU lock (s)")
    p.add_argument("--debug", action="store_true")
    args = p.parse_args(argv)
    if args.runs < 1 or args.warmup < 0:
        p.error("--runs must be >= 1 and --warmup >= 0")
    args.frames_per_token = args.frames_per_token or None
    args.min_frames = None if args.min_frames < 0 else args.min_frames
    return args


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally that stops the server


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm) if main_thread else None
    try:
        result = run(args, argv)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    md = markdown(result)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(md, encoding="utf-8")
    print(md)
    failed = [m for m in result["measurements"] if m["error"] is not None or m["ttfa_s"] is None]
    if failed:
        log.error("%d request(s) failed, e.g. %s", len(failed), failed[0])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
