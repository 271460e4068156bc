"""The HTTP side alone, without a model (the slot never loads one): for access rules, static
files, transcription and the other routes that need no engine."""
from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from lab_server import free_port

from wyoming_qwen3tts.config import ServerConfig, ServerSettings
from wyoming_qwen3tts.server.http_api import build_app, start_http
from wyoming_qwen3tts.server.service import ServiceSlot
from wyoming_qwen3tts.server.transcribe import AsrClient
from wyoming_qwen3tts.server.voice_lab import VoiceLab

T = TypeVar("T")


async def with_app(data_dir: Path, fn: Callable[[str], Awaitable[T]], page_dir: Path | None = None,
                   asr: AsrClient | None = None, **settings: Any) -> T:
    """fn(base URL) while an app with these server settings listens on loopback."""
    server = dataclasses.replace(ServerSettings(), **settings)
    config = ServerConfig(server=server)
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, data_dir=str(data_dir)))
    slot = ServiceSlot(settings=server)
    extra = {"page_dir": page_dir} if page_dir is not None else {}
    port = free_port()
    http = await start_http(build_app(slot, server, VoiceLab(slot, config), asr, **extra), f"127.0.0.1:{port}")
    try:
        return await fn(f"http://127.0.0.1:{port}")
    finally:
        await http.stop()
