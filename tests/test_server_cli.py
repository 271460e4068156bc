"""`wyoming-qwen3tts` as a process: starts, serves, stops on SIGTERM; bad settings exit cleanly."""
from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

from test_server import free_port
from wyoming.client import AsyncClient
from wyoming.info import Describe, Info
from wyoming.tts import SynthesizeChunk, SynthesizeStart

from wyoming_qwen3tts import __version__
from wyoming_qwen3tts.client import synthesize
from wyoming_qwen3tts.config import apply_overrides, load_config
from wyoming_qwen3tts.server.app import parse_args


def describe(uri: str) -> Info | None:
    """The server's info; None while it does not answer with one (not listening yet, or the
    voice list not known yet: then it closes the connection)."""
    async def ask() -> Info | None:
        async with AsyncClient.from_uri(uri, connect_timeout=1, read_timeout=5) as client:
            await client.write_event(Describe().event())
            event = await client.read_event()
            return None if event is None else Info.from_event(event)

    try:
        return asyncio.run(ask())
    except OSError:
        return None


def first_info(proc: subprocess.Popen, uri: str, bound_s: float = 120.0) -> Info:
    """The server process's first answer to describe (it listens, and knows its voices)."""
    deadline = time.monotonic() + bound_s
    while (info := describe(uri)) is None:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else proc.returncode
        assert time.monotonic() < deadline, "the server did not come up"
        time.sleep(0.1)
    return info


async def refused_soon(port: int, within_s: float = 2.0) -> None:
    """The port refuses connections within `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except ConnectionRefusedError:
            return
        except ConnectionResetError:  # queued while the listener closed, then reset: look again
            writer = None
        if writer is not None:
            writer.close()
        assert time.monotonic() < deadline, f"port {port} still accepts connections {within_s} s after SIGTERM"
        await asyncio.sleep(0.02)


def test_the_server_process_serves_and_stops(converted_factory, tmp_path):
    port = free_port()
    uri = f"tcp://127.0.0.1:{port}"
    config = tmp_path / "config.yaml"
    config.write_text("engine:\n  max_frames: 12\nserver:\n  default_voice: ryan\n", encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-m", "wyoming_qwen3tts", "--model",
                             str(converted_factory("tiny", "custom_voice", "int8")), "--uri", uri, "--config",
                             str(config), "--greedy", "--data-dir", str(tmp_path / "data")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        info = first_info(proc, uri)  # the first info already lists every voice
        (program,) = info.tts
        assert len(program.voices) == 9 and program.description.endswith("on OpenVINO")
        # sent at once, probably while the model compiles: it waits for it (server.loading_wait)
        reply = asyncio.run(synthesize(uri, "Hello from a process."))  # no voice: the configured default
        assert len(reply.audio) == 12 * 1920 * 2
        assert describe(uri).to_dict() == info.to_dict()

        async def stop_while_speaking() -> None:
            async with AsyncClient.from_uri(uri, read_timeout=30) as client:
                await client.write_event(SynthesizeStart().event())
                await client.write_event(SynthesizeChunk(text="One. Two. Three. Four. Five. Six.").event())
                while (await client.read_event()).type != "audio-chunk":
                    pass
                proc.send_signal(signal.SIGTERM)
                await refused_soon(port)  # new connections go elsewhere (docs/HAPROXY.md) while this one drains
                events = []
                while (event := await client.read_event()) is not None:  # the server ends the connection
                    events.append(event.type)
                # no synthesize-stop was sent: after the grace period the stream is cancelled, and ends
                assert events[-3:] == ["error", "audio-stop", "synthesize-stopped"]

        asyncio.run(stop_while_speaking())
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = proc.stdout.read()
    assert "voice ryan" in log and "Traceback" not in log
    for phase in ("listening on", "voice list from the models' config.json:", "model files", "compilation:",
                  "warm-up:", ") loaded in ", "ready on"):
        assert phase in log, phase
    assert log.index("listening on") < log.index("voice list from") < log.index("compilation:") < log.index("ready on")
    assert "stopping on SIGTERM: 1 requests in flight" in log
    assert "stopped: 0 requests finished, 1 cancelled" in log
    assert "failed: the server is shutting down (ShuttingDown)" in log


def test_version_and_bad_settings(tmp_path):
    version = subprocess.run([sys.executable, "-m", "wyoming_qwen3tts", "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.strip() == __version__
    bad = tmp_path / "config.yaml"
    bad.write_text("engine:\n  max_batchh: 4\n", encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "wyoming_qwen3tts", "--config", str(bad)], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2 and "engine.max_batchh: unknown key" in run.stderr
    run = subprocess.run([sys.executable, "-m", "wyoming_qwen3tts", "--model", str(tmp_path / "nothing-here")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "neither a directory nor a hub repo id" in run.stderr


def test_precision_is_auto_unless_a_flag_pins_it():
    def precision(argv: list[str]) -> str:
        args = parse_args(argv)
        return apply_overrides(load_config(None), precision=args.precision).precision.inference

    assert precision([]) == "auto"
    assert [precision(["--precision", p]) for p in ("f32", "bf16", "f16", "auto")] == ["f32", "bf16", "f16", "auto"]
