"""First audio of OpenAI's `/v1/audio/speech` beside Wyoming's, on one server in one run:
`python -m qwen3tts_tools.bench.http_first_byte --model DIR`.

Starts `wyoming-qwen3tts --http` on loopback, then for each run asks for the same text in four
ways, one after another (never two at once), their order turning each run so that no way
always follows another: Wyoming one-shot `synthesize`, Wyoming streaming (synthesize-start,
the text in one chunk, stop), and OpenAI's speech API as pcm and as wav. Each is timed from
sending the request on a new connection to its first audio: Wyoming's first audio-chunk
event, the HTTP body's first byte (wav: the header and the first samples leave together);
then the connection is closed, which withdraws the rest of the response. Writes
http-first-byte.md and .json (docs/BENCHMARKS.md)."""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from wyoming.audio import AudioChunk
from wyoming.client import AsyncClient
from wyoming.error import Error
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from .process import ServerChild, cpu_lock, free_port

log = logging.getLogger("http-first-byte")

TEXT = "Good evening! The living room lights are off, the front door is locked, and tomorrow will be sunny."
WAYS = ("wyoming one-shot", "wyoming streaming", "openai pcm", "openai wav")
READY_TIMEOUT_S = 1800.0  # a first start may convert the model
BENCH_LOCK = Path("/tmp/bench.lock")  # the lock timed runs on this project's shared machines take
SETTLE_S = 1.0  # after each request: the server has withdrawn the rest before the next is timed


async def wyoming_first(uri: str, text: str, voice: str, streaming: bool) -> float:
    """Seconds from sending the request (on a new connection) to the first audio-chunk; then
    the connection is closed, which withdraws the rest (only the first audio is measured)."""
    raw_voice = {"name": voice}
    async with AsyncClient.from_uri(uri, connect_timeout=10.0) as client:
        start = time.monotonic()
        if streaming:
            events = [SynthesizeStart().event(), SynthesizeChunk(text=text).event(), Synthesize(text=text).event(),
                      SynthesizeStop().event()]
        else:
            events = [Synthesize(text=text).event()]
        for event in events:
            if event.type in ("synthesize", "synthesize-start"):
                event.data["voice"] = raw_voice
            await client.write_event(event)
        while (event := await client.read_event()) is not None:
            if AudioChunk.is_type(event.type):
                return time.monotonic() - start
            if Error.is_type(event.type):
                raise RuntimeError(f"Wyoming error: {Error.from_event(event).text}")
    raise RuntimeError("the Wyoming response had no audio")


async def openai_first(session: aiohttp.ClientSession, url: str, text: str, voice: str, fmt: str) -> float:
    """Seconds from sending the request (on a new connection) to the first byte of the body;
    then the connection is closed, as Wyoming's."""
    body = {"model": "tts-1", "input": text, "voice": voice, "response_format": fmt}
    start = time.monotonic()
    async with session.post(f"{url}/v1/audio/speech", json=body) as response:
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {await response.text()}")
        first = await response.content.readany()
        took = time.monotonic() - start
        if not first:
            raise RuntimeError("the HTTP response had no body")
        response.close()
    return took


async def measure(uri: str, url: str, text: str, voice: str | None, runs: int, warmup: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
        if voice is None:  # the server's default voice, for both protocols
            async with session.get(f"{url}/v1/audio/voices") as response:
                voice = str((await response.json())["default"])
        ways = {
            "wyoming one-shot": lambda: wyoming_first(uri, text, voice, False),
            "wyoming streaming": lambda: wyoming_first(uri, text, voice, True),
            "openai pcm": lambda: openai_first(session, url, text, voice, "pcm"),
            "openai wav": lambda: openai_first(session, url, text, voice, "wav"),
        }
        for run in range(warmup + runs):
            order = WAYS[run % len(WAYS):] + WAYS[:run % len(WAYS)]
            for way in order:
                took = await ways[way]()
                await asyncio.sleep(SETTLE_S)
                if run >= warmup:
                    times[way].append(took)
    return times


def summarize(times: dict[str, list[float]]) -> list[dict[str, Any]]:
    base = statistics.median(times["wyoming one-shot"])
    rows = []
    for way in WAYS:
        values = sorted(times[way])
        median = statistics.median(values)
        rows.append({"way": way, "median_ms": 1e3 * median, "min_ms": 1e3 * values[0], "max_ms": 1e3 * values[-1],
                     "vs_one_shot_ms": 1e3 * (median - base)})
    return rows


def markdown(rows: list[dict[str, Any]], setup: str) -> str:
    lines = [setup, "", "| way | median ms | min | max | median − Wyoming one-shot |",
             "| --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['way']} | {r['median_ms']:.1f} | {r['min_ms']:.1f} | {r['max_ms']:.1f} | "
              f"{r['vs_one_shot_ms']:+.1f} |" for r in rows]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> Path:
    args.output.mkdir(parents=True, exist_ok=True)
    port, http_port = free_port(), free_port()
    uri, url = f"tcp://127.0.0.1:{port}", f"http://127.0.0.1:{http_port}"
    extra = shlex.split(args.server_args)
    server = ServerChild("wyoming-qwen3tts", [sys.executable, "-m", "wyoming_qwen3tts", "--model", str(args.model),
                                              "--uri", uri, "--http", f"127.0.0.1:{http_port}",
                                              "--threads", str(args.threads), *extra],
                         port, args.output / "http-first-byte-server.log")
    server.start()
    try:
        asyncio.run(server.wait_ready(READY_TIMEOUT_S, log_marker="ready on"))
        with cpu_lock(BENCH_LOCK) as locked:
            times = asyncio.run(measure(uri, url, args.text, args.voice, args.runs, args.warmup))
    finally:
        server.stop()
    setup = (f"`wyoming-qwen3tts --model {args.model} --threads {args.threads} {args.server_args}`, loopback, "
             f"{os.cpu_count()} cores{'' if locked else ', without the CPU lock'}; {args.runs} runs after "
             f"{args.warmup} untimed, the four ways one at a time in a turning order; text: \"{args.text}\".")
    rows = summarize(times)
    (args.output / "http-first-byte.json").write_text(json.dumps({"setup": setup, "rows": rows, "times_s": times},
                                                                 indent=2))
    path = args.output / "http-first-byte.md"
    path.write_text(markdown(rows, setup))
    print(markdown(rows, setup))
    return path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m qwen3tts_tools.bench.http_first_byte", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="converted model directory")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--server-args", default="", help="more arguments for the server")
    p.add_argument("--voice", default=None, help="voice (default: the server's)")
    p.add_argument("--text", default=TEXT)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("-o", "--output", type=Path, default=Path("."))
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.info("wrote %s", run(parse_args(argv)))


if __name__ == "__main__":
    main()
