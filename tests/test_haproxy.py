"""The HAProxy recipe (deploy/haproxy.cfg, docs/HAPROXY.md) run as written: Debian's haproxy
in front of two servers on loopback, load through it — Wyoming (the project's client on the
wyoming library, one-shot and streamed, and wyoming-bench), the HTTP side's /api/speak and the
official OpenAI client on /v1/audio/speech — and one server stopped mid-run (SIGKILL, and
separately SIGTERM). Every request that starts after the stop is served by the other server;
only requests in flight on the stopped one may fail, and each of those ends (an error or a
closed connection) within bounds, never hangs; the health check, which speaks Wyoming, marks
the stopped one down.

Opt-in (about two minutes of CPU, Debian's haproxy, which CI does not install, and
wyoming-bench in the virtual environment qwen3tts_tools.bench.vs_piper keeps: made on first
use, in $QWEN3TTS_BENCH_WORK or ~/.cache/wyoming-qwen3tts/vs-piper); never skipped:

    apt-get install -y haproxy
    python -m pytest -m e2e tests/test_haproxy.py -s
"""
from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import aiohttp
import httpx
import openai
import pytest
from test_server import free_port
from wyoming.client import AsyncClient
from wyoming.tts import SynthesizeChunk, SynthesizeStart, SynthesizeStop

from qwen3tts_tools.bench.vs_piper import BENCH_PACKAGES, DEFAULT_WORK_DIR, ensure_venv, parse_bench_output
from wyoming_qwen3tts.client import ClientError, describe, synthesize

pytestmark = pytest.mark.e2e

RECIPE = Path(__file__).resolve().parents[1] / "deploy/haproxy.cfg"
SERVERS = ("tts1", "tts2")
REQUEST_TIMEOUT_S = 30.0  # a request's bound in this test: one that takes longer hangs
TEXT = "The kitchen lights are on. The front door is locked."
TOKEN = "haproxy-test-token"
# tcplog: "127.0.0.1:40000 [05/Dec/2026:04:10:00.123] wyoming wyoming_servers/tts2 1/0/345 6789 -- 1/1/0/0/0 0/0"
TCPLOG = re.compile(r"^\S+:\d+ \[(?P<accepted>[^\]]+)\] wyoming wyoming_servers/(?P<server>\S+) "
                    r"\S+ (?P<result>\+?\d+) ")
# httplog: "127.0.0.1:40002 [05/Dec/2026:04:10:00.123] http http_servers/tts2 0/0/0/2/40 200 48044 - - ---- ..."
HTTPLOG = re.compile(r"^\S+:\d+ \[(?P<accepted>[^\]]+)\] http http_servers/(?P<server>\S+) \S+ (?P<result>\d+) ")


@pytest.fixture(scope="module")
def haproxy_binary() -> str:
    binary = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if binary is None:
        pytest.fail("haproxy is not installed: apt-get install -y haproxy", pytrace=False)
    return binary


@dataclass
class Servers:
    """Two wyoming-qwen3tts processes serving the tiny model on loopback."""

    procs: dict[str, subprocess.Popen]
    ports: dict[str, int]  # Wyoming
    http_ports: dict[str, int]
    logs: dict[str, Path]


@pytest.fixture
def servers(converted_factory, tmp_path: Path) -> Iterator[Servers]:
    model = converted_factory("tiny", "custom_voice", "int8")
    config = tmp_path / "config.yaml"
    config.write_text("engine:\n  max_frames: 24\nserver:\n  default_voice: ryan\n", encoding="utf-8")
    procs, ports, http_ports, logs = {}, {}, {}, {}
    try:
        for name in SERVERS:
            ports[name], http_ports[name], logs[name] = free_port(), free_port(), tmp_path / f"{name}.log"
            with logs[name].open("w") as out:
                procs[name] = subprocess.Popen(
                    [sys.executable, "-m", "wyoming_qwen3tts", "--model", str(model), "--config", str(config),
                     "--uri", f"tcp://127.0.0.1:{ports[name]}", "--data-dir", str(tmp_path / f"data-{name}"),
                     "--http", f"127.0.0.1:{http_ports[name]}", "--http-token", TOKEN, "--threads", "1", "--greedy"],
                    stdout=out, stderr=subprocess.STDOUT)
        for name in SERVERS:  # listed voices and the model loaded: a request is answered at once
            deadline = time.monotonic() + 180
            while "ready on" not in logs[name].read_text():
                assert procs[name].poll() is None, logs[name].read_text()[-4000:]
                assert time.monotonic() < deadline, f"{name} not ready:\n{logs[name].read_text()[-4000:]}"
                time.sleep(0.2)
        yield Servers(procs, ports, http_ports, logs)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)


def recipe(servers: Servers, wyoming_port: int, http_port: int, stats: Path) -> str:
    """deploy/haproxy.cfg with this test's addresses: every other line as written. Each
    substitution must apply, so a changed recipe fails here rather than going untested."""
    text = RECIPE.read_text(encoding="utf-8")
    substitutions = [
        (r"^ *(chroot|user|group) .*\n", "", 3),  # the test runs it in the foreground, as itself
        (r"log /dev/log local0", "log stdout format raw local0", 1),
        (r"stats socket /run/haproxy/admin\.sock", f"stats socket {stats}", 1),
        (r"bind :10200", f"bind 127.0.0.1:{wyoming_port}", 1),
        (r"bind :8000", f"bind 127.0.0.1:{http_port}", 1),
        *[(rf"server {name} \S+:10200 check", f"server {name} 127.0.0.1:{servers.ports[name]} check", 1)
          for name in SERVERS],
        *[(rf"server {name} \S+:8000 check", f"server {name} 127.0.0.1:{servers.http_ports[name]} check", 1)
          for name in SERVERS],
    ]
    for pattern, replacement, count in substitutions:
        text, made = re.subn(pattern, replacement, text, flags=re.MULTILINE)
        assert made == count, f"{pattern!r} matched {made} times in {RECIPE}, not {count}"
    return text


@dataclass
class Proxy:
    proc: subprocess.Popen
    uri: str  # Wyoming
    url: str  # HTTP
    stats: Path
    log: Path

    def stat(self, backend: str = "wyoming_servers") -> dict[str, dict[str, str]]:
        """Each server's row of `show stat` (status, scur, ...) in `backend`."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(str(self.stats))
            sock.sendall(b"show stat\n")
            raw = b""
            while chunk := sock.recv(65536):
                raw += chunk
        lines = raw.decode().splitlines()
        header = lines[0].lstrip("# ").split(",")
        rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:] if line]
        return {row["svname"]: row for row in rows if row["pxname"] == backend and row["svname"] in SERVERS}

    def status(self, backend: str = "wyoming_servers") -> dict[str, str]:
        return {name: row["status"] for name, row in self.stat(backend).items()}


@pytest.fixture
def proxy(haproxy_binary: str, servers: Servers, tmp_path: Path) -> Iterator[Proxy]:
    port, http_port = free_port(), free_port()
    config, stats, log = tmp_path / "haproxy.cfg", tmp_path / "admin.sock", tmp_path / "haproxy.log"
    config.write_text(recipe(servers, port, http_port, stats), encoding="utf-8")
    env = {**os.environ, "QWEN3TTS_HTTP_TOKEN": TOKEN}  # the health check's token (the recipe's comment)
    subprocess.run([haproxy_binary, "-c", "-f", str(config)], check=True, capture_output=True, env=env)
    with log.open("w") as out:
        proc = subprocess.Popen([haproxy_binary, "-db", "-f", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                env=env)
    proxy = Proxy(proc, f"tcp://127.0.0.1:{port}", f"http://127.0.0.1:{http_port}", stats, log)
    try:
        deadline = time.monotonic() + 30
        while not stats.exists() or {*proxy.status().values(), *proxy.status("http_servers").values()} != {"UP"}:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"the servers' health checks never passed:\n{log.read_text()}"
            time.sleep(0.2)
        yield proxy
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@dataclass
class Outcome:
    """One request through the proxy, in wall-clock time (comparable with HAProxy's log)."""

    start: float
    end: float
    kind: str  # one-shot, streamed (Wyoming) or http
    error: str | None  # None: the whole reply arrived


async def wyoming_load(uri: str, stop: asyncio.Event, outcomes: list[Outcome], streaming: bool) -> None:
    """Requests one after another until `stop`, alternating one-shot and streamed, each bounded."""
    while not stop.is_set():
        start = time.time()
        try:
            reply = await asyncio.wait_for(synthesize(uri, TEXT, streaming=streaming, timeout=REQUEST_TIMEOUT_S),
                                           REQUEST_TIMEOUT_S)
            error = None if reply.audio else "no audio"
        except asyncio.TimeoutError:
            error = "hang"
        except (ClientError, OSError, asyncio.IncompleteReadError) as e:
            error = f"{type(e).__name__}: {e}"
        outcomes.append(Outcome(start, time.time(), "streamed" if streaming else "one-shot", error))
        streaming = not streaming


async def http_load(url: str, stop: asyncio.Event, outcomes: list[Outcome]) -> None:
    """The HTTP side's streamed speech (POST /api/speak) one after another until `stop`."""
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout, headers={"Authorization": f"Bearer {TOKEN}"}) as session:
        while not stop.is_set():
            start = time.time()
            try:
                async with session.post(f"{url}/api/speak", json={"text": TEXT, "voice": "ryan"}) as response:
                    body = await response.read()
                error = None if response.status == 200 and len(body) > 44 else f"HTTP {response.status}: {body[:200]!r}"
            except asyncio.TimeoutError:
                error = "hang"
            except (aiohttp.ClientError, OSError) as e:
                error = f"{type(e).__name__}: {e}"
            outcomes.append(Outcome(start, time.time(), "http", error))


async def openai_load(url: str, stop: asyncio.Event, outcomes: list[Outcome]) -> None:
    """The official OpenAI client streaming WAV from /v1/audio/speech until `stop`; its own
    retries off, so that HAProxy's are the only ones."""
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0, timeout=REQUEST_TIMEOUT_S)
    async with client:
        while not stop.is_set():
            start = time.time()
            try:
                async with client.audio.speech.with_streaming_response.create(
                        model="tts-1", voice="ryan", input=TEXT, response_format="wav") as response:
                    body = await response.read()
                error = None if len(body) > 44 else f"{len(body)} bytes"
            except openai.APITimeoutError:
                error = "hang"
            except (openai.OpenAIError, httpx.HTTPError) as e:
                error = f"{type(e).__name__}: {e}"
            outcomes.append(Outcome(start, time.time(), "openai", error))


@dataclass
class Held:
    """A streamed request kept open (no synthesize-stop) until released: surely in flight."""

    events: list[str] = field(default_factory=list)
    audio: asyncio.Event = field(default_factory=asyncio.Event)
    ended: str = ""  # "stopped" (synthesize-stopped), "closed" (the connection ended) or "hang"
    end: float = 0.0


async def held_stream(uri: str, release: asyncio.Event, held: Held) -> None:
    async def read(client: AsyncClient) -> None:
        while True:
            event = await client.read_event()
            if event is None:
                held.ended = "closed"
                return
            held.events.append(event.type)
            if event.type == "audio-chunk":
                held.audio.set()
            if event.type == "synthesize-stopped":
                held.ended = "stopped"
                return

    try:
        async with AsyncClient.from_uri(uri, connect_timeout=5, read_timeout=REQUEST_TIMEOUT_S) as client:
            await client.write_event(SynthesizeStart().event())
            await client.write_event(SynthesizeChunk(text="One sentence first. ").event())
            reader = asyncio.create_task(read(client))
            await asyncio.wait({reader, asyncio.create_task(release.wait())}, return_when=asyncio.FIRST_COMPLETED)
            if not reader.done():
                await client.write_event(SynthesizeStop().event())
            await asyncio.wait_for(reader, REQUEST_TIMEOUT_S)
    except asyncio.TimeoutError:
        held.ended = "hang"
    except (OSError, asyncio.IncompleteReadError):
        held.ended = "closed"
    held.end = time.time()


def start_bench(uri: str, out: Path) -> subprocess.Popen:
    """wyoming-bench (the venv qwen3tts-vs-piper keeps, made once) as one more client: one- shot
    and streamed requests one after another, each line of -v one measurement or failure."""
    work = Path(os.environ.get("QWEN3TTS_BENCH_WORK") or DEFAULT_WORK_DIR)
    bench_python = ensure_venv(work / "bench-venv", BENCH_PACKAGES)
    bench = bench_python.parent / "wyoming-bench"
    host_port = uri.removeprefix("tcp://")
    with out.open("w") as f:
        return subprocess.Popen([str(bench), "tts", host_port, "--mode", "both", "--rounds", "10000", "--warmup", "0",
                                 "--timeout", "10", "-v", "--texts", TEXT], stdout=f, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


async def refused(port: int, bound_s: float = 10.0) -> float:
    """The wall-clock time from which `port` on loopback refuses connections."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except ConnectionRefusedError:
            return time.time()
        except ConnectionResetError:  # accepted by a dying listener: the next one is refused
            continue
        writer.close()
        await asyncio.sleep(0.01)
    raise AssertionError(f"port {port} still accepts connections {bound_s:.0f} s after the signal")


@dataclass
class Run:
    outcomes: list[Outcome]
    held: list[Held]
    signalled: float
    cut: float  # the stopped server refuses Wyoming connections from here on
    down: float  # HAProxy's health check marked it down
    log: str
    bench: str


async def stop_one_under_load(servers: Servers, proxy: Proxy, victim: str, sig: signal.Signals,
                              bench_out: Path) -> Run:
    release, stop, outcomes = asyncio.Event(), asyncio.Event(), []
    held = [Held(), Held()]
    held_tasks = []
    for h in held:  # one after the other: least connections puts one on each server
        held_tasks.append(asyncio.create_task(held_stream(proxy.uri, release, h)))
        await asyncio.wait_for(h.audio.wait(), REQUEST_TIMEOUT_S)
    assert {name: int(row["scur"]) for name, row in proxy.stat().items()} == {"tts1": 1, "tts2": 1}
    bench = start_bench(proxy.uri, bench_out)
    try:
        workers = [asyncio.create_task(wyoming_load(proxy.uri, stop, outcomes, streaming=i % 2 == 1))
                   for i in range(2)]
        workers.append(asyncio.create_task(http_load(proxy.url, stop, outcomes)))
        workers.append(asyncio.create_task(openai_load(proxy.url, stop, outcomes)))
        await asyncio.sleep(5)
        servers.procs[victim].send_signal(sig)
        signalled = time.time()
        cut = await refused(servers.ports[victim])
        deadline = time.monotonic() + 30
        while proxy.status()[victim] != "DOWN":
            assert time.monotonic() < deadline, f"{victim} not marked down 30 s after it stopped"
            await asyncio.sleep(0.1)
        down = time.time()
        deadline = time.monotonic() + 90
        while not enough_after(outcomes, cut, down):  # and more requests with it down
            assert time.monotonic() < deadline, "too few requests finished after the stop in 90 s"
            await asyncio.sleep(0.2)
        stop.set()
        await asyncio.gather(*workers)
    finally:
        bench.terminate()
        bench.wait(10)
    release.set()
    await asyncio.gather(*held_tasks)
    servers.procs[victim].wait(30)
    await asyncio.sleep(0.5)  # HAProxy logs a session when it ends
    return Run(outcomes, held, signalled, cut, down, proxy.log.read_text(), bench_out.read_text())


def enough_after(outcomes: list[Outcome], cut: float, down: float) -> bool:
    """Enough requests after the stop to show where they go: 10, 2 of each HTTP client, 3 after
    the server was marked down."""
    after = [o for o in outcomes if o.start > cut]
    return (len(after) >= 10 and sum(o.kind == "http" for o in after) >= 2
            and sum(o.kind == "openai" for o in after) >= 2 and sum(o.start > down for o in after) >= 3)


def sessions_logged(log: str, pattern: re.Pattern[str]) -> list[tuple[float, str, str]]:
    """(accepted, server, what came back: bytes or HTTP status) of each session in HAProxy's log."""
    sessions = []
    for line in log.splitlines():
        if match := pattern.match(line):
            accepted = datetime.strptime(match["accepted"], "%d/%b/%Y:%H:%M:%S.%f").timestamp()
            sessions.append((accepted, match["server"], match["result"]))
    return sessions


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_server_stopped_under_load(servers: Servers, proxy: Proxy, sig: signal.Signals, tmp_path: Path) -> None:
    victim, survivor = SERVERS
    run = asyncio.run(asyncio.wait_for(stop_one_under_load(servers, proxy, victim, sig, tmp_path / "bench.out"), 180))
    outcomes = run.outcomes
    after = [o for o in outcomes if o.start > run.cut]
    # in flight: started before the port closed, still running when the signal was sent
    in_flight = [o for o in outcomes if o.start <= run.cut and o.end >= run.signalled]
    failed = [o for o in outcomes if o.error is not None]
    bench = next(iter(parse_bench_output(run.bench, [TEXT]).values()), {"measurements": []})["measurements"]
    summary = (f"{len(outcomes)} requests ({sum(o.kind == 'http' for o in outcomes)} /api/speak, "
               f"{sum(o.kind == 'openai' for o in outcomes)} OpenAI) and {len(bench)} of "
               f"wyoming-bench; {len(in_flight)} in flight at the stop, {len(after)} after it, {len(failed)} failed "
               f"(+{sum(not m['ok'] for m in bench)} of wyoming-bench); the port closed "
               f"{run.cut - run.signalled:.2f} s after the signal, marked down {run.down - run.cut:.1f} s later")
    print(f"\n{sig.name}: {summary}")
    # the stopped server takes no new connection at once (SIGTERM: it stops listening, then drains)
    assert run.cut - run.signalled < 1.0, summary
    assert enough_after(outcomes, run.cut, run.down), summary
    # none lost beyond those in flight; none hangs
    assert all(o.error is None for o in after), [(o.kind, o.error) for o in after if o.error]
    assert all(o in in_flight for o in failed), (summary, [(o.kind, o.start - run.cut, o.error) for o in failed])
    assert not [o for o in outcomes if o.error == "hang"]
    # wyoming-bench, one request at a time: at most the one in flight failed
    assert sum(m["ok"] for m in bench) >= 2 and sum(not m["ok"] for m in bench) <= 1, run.bench[-3000:]
    # HAProxy: both served before the stop, the survivor everything after it
    for pattern, backend in ((TCPLOG, "wyoming"), (HTTPLOG, "http")):
        sessions = sessions_logged(run.log, pattern)
        before = {server for accepted, server, _ in sessions if accepted < run.cut - 0.5}
        assert before == set(SERVERS), (backend, before)
        later = [(server, result) for accepted, server, result in sessions if accepted > run.cut]
        assert later and all(server == survivor for server, _ in later), (backend, later)
        if backend == "http":
            assert all(result == "200" for _, result in later), later
        else:
            assert all(int(result.lstrip("+")) > 0 for _, result in later), later
    assert f"Server wyoming_servers/{victim} is DOWN" in run.log
    # the stream held open on each server: the survivor's ends as asked, the stopped one's
    # within bounds: cut at once (SIGKILL), or ended by the server itself with an error after
    # its grace period (SIGTERM: not cut by HAProxy, which marks it down only after that)
    cut_short = [h for h in run.held if h.ended != "stopped" or "error" in h.events]
    assert len(cut_short) == 1, run.held
    stopped, (kept,) = cut_short[0], [h for h in run.held if h not in cut_short]
    assert kept.events[-2:] == ["audio-stop", "synthesize-stopped"], kept
    if sig == signal.SIGKILL:
        assert stopped.ended == "closed" and stopped.end - run.cut < 2, (stopped, stopped.end - run.cut)
    else:
        assert stopped.events[-3:] == ["error", "audio-stop", "synthesize-stopped"], stopped
        assert stopped.end < run.down, (stopped.end - run.cut, run.down - run.cut)
        assert "stopping on SIGTERM" in servers.logs[victim].read_text()
    assert servers.procs[survivor].poll() is None


def test_the_health_check_speaks_wyoming(servers: Servers, proxy: Proxy) -> None:
    """A server that listens but does not answer `describe` with `info` is marked down: the
    check is Wyoming's describe/info, not a bare connect (a process frozen by SIGSTOP keeps its
    port open and its kernel keeps accepting connections)."""
    victim, _ = SERVERS
    servers.procs[victim].send_signal(signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 30
        while proxy.status()[victim] != "DOWN":
            assert time.monotonic() < deadline, f"{victim} frozen but still up 30 s later"
            time.sleep(0.2)
        assert asyncio.run(describe(servers.ports[victim], timeout=1)) is None  # it listens, unanswering
        with socket.create_connection(("127.0.0.1", servers.ports[victim]), timeout=2):
            pass
    finally:
        servers.procs[victim].send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 30
    while proxy.status()[victim] != "UP":
        assert time.monotonic() < deadline, f"{victim} answers again but is not back up 30 s later"
        time.sleep(0.2)
