"""A server as `wyoming-qwen3tts --http` runs it, for the voice lab tests: Wyoming and the HTTP
side on one event loop thread, over one ServiceSlot and a VoiceLab; plus recordings made with
PyAV in every container the lab takes."""
from __future__ import annotations

import asyncio
import io
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import av
import numpy as np
from signals import speech_like
from wyoming.client import AsyncClient
from wyoming.info import Describe, Info
from wyoming.server import AsyncTcpServer

from wyoming_qwen3tts.config import ServerConfig, VoiceConfig, apply_overrides
from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.server.handler import ServiceSlot, TtsHandler
from wyoming_qwen3tts.server.http_api import HttpServer, build_app, start_http
from wyoming_qwen3tts.server.loading import build_service
from wyoming_qwen3tts.server.transcribe import AsrClient
from wyoming_qwen3tts.server.voice_lab import VoiceLab

REF_TEXT = "This is the reference recording of the voice."
MAX_FRAMES = 8
FRAME_BYTES = 1920 * 2

# (container, codec, file name) of every upload format the lab takes
FORMATS = [("wav", "pcm_s16le", "clip.wav"), ("flac", "flac", "clip.flac"), ("mp3", "libmp3lame", "clip.mp3"),
           ("ogg", "libopus", "clip.ogg"), ("ipod", "aac", "clip.m4a"), ("adts", "aac", "clip.aac"),
           ("webm", "libopus", "clip.webm"), ("mp4", "aac", "clip.mp4")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def encode(container: str, codec: str, pcm: np.ndarray, rate: int = 48000, stereo: bool = False,
           options: dict[str, str] | None = None) -> bytes:
    """`pcm` (float32 mono at `rate`) as a file of that container and codec, made by PyAV."""
    layout = "stereo" if stereo else "mono"
    buf = io.BytesIO()
    with av.open(buf, "w", format=container, options=options or {}) as out:
        stream = out.add_stream(codec, rate=rate, layout=layout)
        for begin in range(0, pcm.shape[0], 960):
            part = np.tile(pcm[begin:begin + 960], (2 if stereo else 1, 1)).astype(np.float32)
            frame = av.AudioFrame.from_ndarray(part, format="fltp", layout=layout)
            frame.sample_rate = rate
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def recording(seconds: float, seed: int = 1, rate: int = 48000) -> np.ndarray:
    return speech_like(int(seconds * rate), seed, rate=rate)


def lab_config(model_dir: Path, data_dir: Path, voices: tuple[VoiceConfig, ...], **server: Any) -> ServerConfig:
    config = apply_overrides(ServerConfig(engine=EngineConfig(max_frames=MAX_FRAMES, kv_blocks=64)),
                             model=str(model_dir), data_dir=str(data_dir), greedy=True, threads=1, precision="f32")
    return replace(config, voices=voices, server=replace(config.server, **server))


class LabServer:
    """Wyoming at self.uri and HTTP at self.url, on a loop thread; close() stops both and the engine."""

    def __init__(self, config: ServerConfig, page_dir: Path | None = None, on_change: Callable[[], None] | None = None,
                 asr: str | None = None) -> None:
        self.config = config
        self.slot = ServiceSlot(settings=config.server)
        self.lab = VoiceLab(self.slot, config, on_change)
        self.lab.prepare_catalogue(None)
        self.service = self.lab.attach(build_service(config))
        self.slot.load(self.service)
        self.port, self.http_port = free_port(), free_port()
        self.uri, self.url = f"tcp://127.0.0.1:{self.port}", f"http://127.0.0.1:{self.http_port}"
        self.loop = asyncio.new_event_loop()
        self._wyoming = AsyncTcpServer("127.0.0.1", self.port)
        self._http: HttpServer | None = None
        started = threading.Event()
        kwargs = {"page_dir": page_dir} if page_dir is not None else {}
        app_args = (self.slot, config.server, self.lab, AsrClient(asr) if asr else None)

        async def start() -> None:
            await self._wyoming.start(partial(TtsHandler, self.slot))
            self._http = await start_http(build_app(*app_args, **kwargs), f"127.0.0.1:{self.http_port}")

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(start())
            started.set()
            self.loop.run_forever()
            try:
                self.loop.run_until_complete(self.loop.shutdown_default_executor())
            finally:
                self.loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert started.wait(20)

    @property
    def engine(self):  # type: ignore[no-untyped-def]
        return self.slot.service.engine if self.slot.service is not None else self.service.engine

    def call(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        """Run a coroutine on the server's loop (its own objects live there)."""
        return asyncio.run_coroutine_threadsafe(fn(), self.loop).result(60)

    def kv_idle(self, timeout: float = 20.0) -> bool:
        """Every KV block free and no sequence left, within `timeout` s."""
        pool = self.engine.batch.pool
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pool.free == pool.num_blocks and not pool.tables and not self.slot.in_flight():
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        async def stop() -> None:
            if self._http is not None:
                await self._http.stop()
            await self._wyoming.stop()

        try:
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(20)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(20)
        finally:
            self.engine.close()


async def describe(uri: str) -> Info:
    async with AsyncClient.from_uri(uri) as client:
        await client.write_event(Describe().event())
        event = await client.read_event()
        assert event is not None
        return Info.from_event(event)


def voice_names(uri: str) -> list[str]:
    info = asyncio.run(asyncio.wait_for(describe(uri), 30))
    return [v.name for v in info.tts[0].voices]
