"""Processes and clients for the end-to-end tests: our server, a real Home Assistant driven over
its HTTP and websocket APIs (stdlib only: the test venv has no aiohttp), a Wyoming proxy that
hides streaming support (so HA takes its one-shot path), and audio decoding with ffmpeg.

Every wait is bounded; every process is started in its own process group and ended by
`stop()` (SIGTERM, then SIGKILL)."""
from __future__ import annotations

import asyncio
import base64
import json
import os
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CUSTOM_COMPONENTS = HERE / "custom_components"
LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def wait_until(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.5,
               alive: Callable[[], None] | None = None) -> Any:
    """Poll `check` until it returns something truthy; AssertionError naming `what` after
    `timeout` seconds. `alive` raises when a process it watches has died."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        if alive is not None:
            alive()
        try:
            last = check()
        except Exception as e:
            last = e
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout:.0f} s (last: {last!r})")
        time.sleep(interval)


class Process:
    """A subprocess in its own process group, output to a log file."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.name, self.argv, self.log = name, argv, log
        self._out = log.open("ab")
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=subprocess.STDOUT, env=env,
                                     cwd=str(cwd) if cwd else None, start_new_session=True)
        self.started = time.monotonic()

    def alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}; log {self.log}:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._out.close()
        return self.proc.returncode


# --- our server ---

SERVER_CONFIG = """\
engine:
  max_frames: {max_frames}
server:
  default_voice: ryan
  max_text_chars: {max_text_chars}
"""
MAX_FRAMES = 25  # 2 s of audio per sentence at most (the tiny model rarely stops earlier)
FRAME_S = 0.08
MAX_TEXT_CHARS = 1000


class Server:
    """`wyoming-qwen3tts` on a fixed loopback port, restartable (same port, same data dir)."""

    def __init__(self, model: Path, workdir: Path, port: int | None = None) -> None:
        self.model, self.workdir = model, workdir
        self.port = port or free_port()
        self.uri = f"tcp://{LOOPBACK}:{self.port}"
        self.data_dir = workdir / "data"
        self.config = workdir / "config.yaml"
        workdir.mkdir(parents=True, exist_ok=True)
        self.config.write_text(SERVER_CONFIG.format(max_frames=MAX_FRAMES, max_text_chars=MAX_TEXT_CHARS))
        self.process: Process | None = None
        self.starts = 0

    def start(self) -> Server:
        """QWEN3TTS_E2E_SERVER_SRC=DIR runs the package from another source tree (e.g. an
        older commit's, to see which failures a change fixed) and QWEN3TTS_E2E_SERVER_ARGS
        adds flags (e.g. `--backend python`, when that tree's native module is not built)."""
        assert self.process is None or self.process.proc.poll() is not None
        self.starts += 1
        launch = ["-m", "wyoming_qwen3tts"]
        if src := os.environ.get("QWEN3TTS_E2E_SERVER_SRC"):  # ahead of an editable install's finder
            launch = ["-c", "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in "
                      f"type(f).__module__]; sys.path.insert(0, {src!r}); sys.argv[0] = 'wyoming-qwen3tts'; "
                      "from wyoming_qwen3tts.server.app import main; sys.exit(main())"]
        argv = [sys.executable, *launch,
                "--model", str(self.model), "--uri", self.uri, "--config", str(self.config),
                "--data-dir", str(self.data_dir), "--precision", "f32", "--greedy", "--threads", "1",
                *shlex.split(os.environ.get("QWEN3TTS_E2E_SERVER_ARGS", ""))]
        self.process = Process(f"wyoming-qwen3tts ({self.uri})", argv, self.workdir / f"server-{self.starts}.log")
        return self

    def stop(self) -> int | None:
        return self.process.stop() if self.process else None

    def alive(self) -> None:
        assert self.process is not None
        self.process.alive()

    def info(self, timeout: float = 3) -> dict | None:
        """The `info` event's data, or None (not listening / no answer)."""
        try:
            with socket.create_connection((LOOPBACK, self.port), timeout=timeout) as s:
                s.sendall(b'{"type": "describe"}\n')
                f = s.makefile("rb")
                header = json.loads(f.readline())
                data = header.get("data") or {}
                if header.get("data_length"):
                    data.update(json.loads(f.read(header["data_length"])))
                if header.get("payload_length"):
                    f.read(header["payload_length"])
                return data if header.get("type") == "info" else None
        except (OSError, ValueError):
            return None

    def listening(self) -> bool:
        try:
            socket.create_connection((LOOPBACK, self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def loaded(self) -> bool:
        """Whether the model is loaded (the log says 'ready on')."""
        return self.process is not None and "ready on" in self.process.log.read_text(errors="replace")

    def wait_loaded(self, timeout: float = 240) -> None:
        wait_until(self.loaded, timeout, f"{self.process.name} loaded", alive=self.alive)

    def log_text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.workdir.glob("server-*.log")))


# --- a Wyoming proxy whose info says: no streaming ---

class OneShotProxy:
    """Forwards a Wyoming connection to the server, but rewrites every `info` to
    supports_synthesize_streaming=False, so Home Assistant uses its one-shot reader
    (`synthesize` ... first `audio-stop`) for the entity set up through it. Everything else
    passes unchanged. Runs its own event loop on a thread."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.client_events: list[str] = []  # what HA sent through it, in order
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, name="one-shot-proxy", daemon=True)

    def start(self) -> OneShotProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._client, LOOPBACK, self.port), self.loop).result(10)
        return self

    def stop(self) -> None:
        async def close() -> None:
            self._server.close()
            for task in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                task.cancel()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(LOOPBACK, self.target_port)
        except OSError:
            writer.close()
            return

        async def read(stream: asyncio.StreamReader) -> tuple[dict, bytes, bytes] | None:
            line = await stream.readline()
            if not line:
                return None
            header = json.loads(line)
            data = await stream.readexactly(header["data_length"]) if header.get("data_length") else b""
            payload = await stream.readexactly(header["payload_length"]) if header.get("payload_length") else b""
            return header, data, payload

        async def upstream() -> None:  # client -> server: unchanged (the types are noted)
            try:
                while (event := await read(reader)) is not None:
                    header, data, payload = event
                    self.client_events.append(header.get("type"))
                    up_writer.write(json.dumps(header).encode() + b"\n" + data + payload)
                    await up_writer.drain()
            finally:
                if up_writer.can_write_eof():
                    up_writer.write_eof()

        async def downstream() -> None:  # server -> client: info rewritten
            while (event := await read(up_reader)) is not None:
                header, data, payload = event
                if header.get("type") == "info":
                    info = {**(header.get("data") or {}), **(json.loads(data) if data else {})}
                    for program in info.get("tts") or []:
                        program["supports_synthesize_streaming"] = False
                    data = json.dumps(info).encode()
                    header = {k: v for k, v in header.items() if k != "data"} | {"data_length": len(data)}
                writer.write(json.dumps(header).encode() + b"\n" + data + payload)
                await writer.drain()

        tasks = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            await tasks[1]  # the server's side ends the exchange
        except Exception:
            pass
        finally:
            for task in tasks:
                task.cancel()
            up_writer.close()
            writer.close()


# --- HTTP and websocket clients ---

@dataclass
class Response:
    status: int
    body: bytes
    headers: dict[str, str]
    seconds: float

    def json(self) -> Any:
        return json.loads(self.body)


def http(method: str, url: str, body: Any = None, token: str | None = None, timeout: float = 30,
         form: dict[str, str] | None = None) -> Response:
    headers = {}
    data = None
    if form is not None:
        data = urllib.parse.urlencode(form).encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    elif body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return Response(reply.status, reply.read(), dict(reply.headers), time.monotonic() - started)
    except urllib.error.HTTPError as e:
        return Response(e.code, e.read(), dict(e.headers), time.monotonic() - started)


class WebSocket:
    """A minimal RFC 6455 client for HA's /api/websocket: JSON text frames."""

    def __init__(self, host: str, port: int, path: str = "/api/websocket", timeout: float = 10) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                           ).encode())
        self._buf = b""
        while b"\r\n\r\n" not in self._buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("websocket handshake: connection closed")
            self._buf += chunk
        head, self._buf = self._buf.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"websocket handshake refused: {head[:200]!r}")
        self._pending: list[Any] = []

    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("websocket closed")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def _frame(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def send(self, message: dict) -> None:
        self._frame(0x1, json.dumps(message).encode())

    def recv(self, timeout: float) -> Any:
        """The next JSON message (HA may send a list of them in one frame)."""
        if self._pending:
            return self._pending.pop(0)
        self.sock.settimeout(timeout)
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise ConnectionError("websocket closed by the server")
            if opcode == 0x9:
                self._frame(0xA, payload)
                continue
            if opcode in (0x1, 0x2, 0x0):
                message += payload
                if b0 & 0x80:
                    break
        data = json.loads(message)
        if isinstance(data, list):
            self._pending.extend(data[1:])
            return data[0]
        return data

    def close(self) -> None:
        try:
            self._frame(0x8, b"")
        except OSError:
            pass
        self.sock.close()


class HaWebSocket:
    """An authenticated HA websocket session: call() for commands, events() for subscriptions."""

    def __init__(self, port: int, token: str, timeout: float = 10) -> None:
        self.ws = WebSocket(LOOPBACK, port, timeout=timeout)
        hello = self.ws.recv(timeout)
        assert hello["type"] == "auth_required", hello
        self.ws.send({"type": "auth", "access_token": token})
        reply = self.ws.recv(timeout)
        assert reply["type"] == "auth_ok", reply
        self._id = 0

    def send(self, message: dict) -> int:
        self._id += 1
        self.ws.send({"id": self._id, **message})
        return self._id

    def call(self, message: dict, timeout: float = 30) -> Any:
        """A command's result; AssertionError when it failed."""
        ident = self.send(message)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no result for {message['type']} after {timeout} s")
            reply = self.ws.recv(left)
            if reply.get("id") == ident and reply.get("type") == "result":
                assert reply["success"], f"{message['type']}: {reply.get('error')}"
                return reply["result"]

    def close(self) -> None:
        self.ws.close()


# --- Home Assistant ---

CONFIGURATION = """\
homeassistant:
  name: Qwen3-TTS e2e
  latitude: 52.37
  longitude: 4.89
  elevation: 0
  unit_system: metric
  currency: EUR
  country: NL
  time_zone: UTC
  language: en
  internal_url: "http://127.0.0.1:{port}"
  auth_providers:
    - type: homeassistant
http:
  server_host: 127.0.0.1
  server_port: {port}
logger:
  default: warning
  logs:
    homeassistant.components.wyoming: debug
    homeassistant.components.tts: debug
    homeassistant.components.assist_pipeline: debug
    homeassistant.config_entries: info
    homeassistant.setup: info
    custom_components.e2e_agent: debug
ffmpeg:
  ffmpeg_bin: "{ffmpeg}"
api:
websocket_api:
config:
onboarding:
assist_pipeline:
conversation:
"""
# `python -m homeassistant`, except that HA's patch-level Python floor (3.13.2) is lowered to the
# running 3.13 (pyenv's 3.13.0 here; see install_ha.py): the only check that refuses it.
LAUNCHER = ("import sys, homeassistant.const as c; c.REQUIRED_PYTHON_VER = min(c.REQUIRED_PYTHON_VER, "
            "tuple(sys.version_info[:3])); sys.argv[0] = 'hass'; from homeassistant.__main__ import main; "
            "sys.exit(main())")
CLIENT_ID = "http://127.0.0.1/"  # onboarding and the token endpoint want a URL
OWNER = {"name": "E2E Owner", "username": "owner", "password": "e2e-owner-password", "language": "en"}


@dataclass
class HomeAssistant:
    python: Path
    ffmpeg: Path
    config_dir: Path
    port: int = field(default_factory=free_port)
    process: Process | None = None
    token: str | None = None
    refresh_token: str | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self, timeout: float = 300) -> HomeAssistant:
        """Start (the first time: write the configuration, onboard the owner) and wait until
        HA runs."""
        first = self.starts == 0
        if first:
            self.config_dir.mkdir(parents=True, exist_ok=True)
            (self.config_dir / "configuration.yaml").write_text(
                CONFIGURATION.format(port=self.port, ffmpeg=self.ffmpeg))
            shutil.copytree(CUSTOM_COMPONENTS, self.config_dir / "custom_components", dirs_exist_ok=True)
        self.starts += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        env["PATH"] = f"{self.python.parent}:{env.get('PATH', '/usr/bin:/bin')}"
        self.process = Process(f"Home Assistant :{self.port}",
                               [str(self.python), "-c", LAUNCHER, "--config", str(self.config_dir),
                                "--log-file", str(self.config_dir / f"ha-{self.starts}.log")],
                               self.config_dir / f"ha-stdout-{self.starts}.log", env=env, cwd=self.config_dir)
        wait_until(lambda: http("GET", f"{self.url}/api/onboarding", timeout=5).status in (200, 401),
                   timeout, "Home Assistant's HTTP server", interval=1, alive=self.process.alive)
        if self.token is None:
            self._onboard()
        else:
            self._refresh()
        wait_until(lambda: self.get("/api/config").json().get("state") == "RUNNING", timeout,
                   "Home Assistant running", interval=1, alive=self.process.alive)
        return self

    def _onboard(self) -> None:
        """Create the owner as a new user does on the first page, and get a token."""
        steps = http("GET", f"{self.url}/api/onboarding").json()
        assert any(s["step"] == "user" and not s["done"] for s in steps), steps
        reply = http("POST", f"{self.url}/api/onboarding/users", {"client_id": CLIENT_ID, **OWNER})
        assert reply.status == 200, reply.body
        token = http("POST", f"{self.url}/auth/token", form={
            "grant_type": "authorization_code", "code": reply.json()["auth_code"], "client_id": CLIENT_ID})
        assert token.status == 200, token.body
        self.token, self.refresh_token = token.json()["access_token"], token.json()["refresh_token"]
        # The other onboarding steps are left undone: core_config would add the weather
        # integration, which reaches out to the internet.

    def _refresh(self) -> None:
        token = http("POST", f"{self.url}/auth/token", form={
            "grant_type": "refresh_token", "refresh_token": self.refresh_token, "client_id": CLIENT_ID})
        assert token.status == 200, token.body
        self.token = token.json()["access_token"]

    def stop(self) -> int | None:
        return self.process.stop(60) if self.process else None

    def alive(self) -> None:
        self.process.alive()

    def get(self, path: str, timeout: float = 30) -> Response:
        return http("GET", f"{self.url}{path}", token=self.token, timeout=timeout)

    def post(self, path: str, body: Any = None, timeout: float = 30) -> Response:
        return http("POST", f"{self.url}{path}", body if body is not None else {}, token=self.token, timeout=timeout)

    def ws(self) -> HaWebSocket:
        return HaWebSocket(self.port, self.token)

    def log_text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.config_dir.glob("ha-*.log")))

    # --- what a user does in the UI ---

    def config_flow(self, handler: str, user_input: dict | None) -> dict:
        """Start a config flow and submit its first form (if it shows one)."""
        start = self.post("/api/config/config_entries/flow", {"handler": handler, "show_advanced_options": False})
        assert start.status == 200, start.body
        result = start.json()
        if result["type"] == "form" and user_input is not None:
            reply = self.post(f"/api/config/config_entries/flow/{result['flow_id']}", user_input)
            assert reply.status == 200, reply.body
            result = reply.json()
        return result

    def entries(self, domain: str) -> list[dict]:
        reply = self.get(f"/api/config/config_entries/entry?domain={domain}")
        assert reply.status == 200, reply.body
        return reply.json()

    def entry(self, entry_id: str) -> dict:
        (entry,) = [e for e in self.get("/api/config/config_entries/entry").json() if e["entry_id"] == entry_id]
        return entry

    def entity_of(self, entry_id: str, domain: str) -> str | None:
        ws = self.ws()
        try:
            entities = ws.call({"type": "config/entity_registry/list"})
        finally:
            ws.close()
        ids = [e["entity_id"] for e in entities if e["config_entry_id"] == entry_id and
               e["entity_id"].startswith(f"{domain}.")]
        return ids[0] if ids else None

    def tts_url(self, engine_id: str, message: str, options: dict | None = None, language: str | None = None,
                cache: bool = False) -> Response:
        body: dict[str, Any] = {"engine_id": engine_id, "message": message, "cache": cache}
        if options:
            body["options"] = options
        if language:
            body["language"] = language
        return self.post("/api/tts_get_url", body)


# --- audio ---

def decode_seconds(ffmpeg: Path, data: bytes, rate: int = 24000, timeout: float = 60) -> float:
    """Seconds of audio ffmpeg decodes from `data` (any container it knows); ValueError if it
    decodes nothing."""
    run = subprocess.run([str(ffmpeg), "-hide_banner", "-loglevel", "error", "-i", "pipe:0", "-f", "s16le",
                          "-ac", "1", "-ar", str(rate), "pipe:1"], input=data, capture_output=True, timeout=timeout)
    if run.returncode != 0 and not run.stdout:
        raise ValueError(f"ffmpeg could not decode {len(data)} bytes: {run.stderr.decode(errors='replace')[-500:]}")
    return len(run.stdout) / 2 / rate


def wav_seconds(data: bytes) -> tuple[float, int]:
    """(seconds, rate) of a PCM WAV, counting every byte after the data chunk's header (HA
    streams WAVs whose header says 0 frames)."""
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE", data[:16]
    pos, rate, block = 12, 0, 0
    while pos + 8 <= len(data):
        tag, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        if tag == b"fmt ":
            _fmt, channels, rate, _byte_rate, block, _bits = struct.unpack("<HHIIHH", data[pos + 8:pos + 24])
        if tag == b"data":
            return (len(data) - pos - 8) // block / rate, rate
        pos += 8 + size
    raise AssertionError("no data chunk in the WAV")
