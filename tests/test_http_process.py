"""`wyoming-qwen3tts --http` as a process: saved voices load at start, the HTTP side answers
next to Wyoming, a saved voice is described at once and Home Assistant is asked to reload,
and SIGTERM stops both."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time

import aiohttp
from lab_server import REF_TEXT, encode, free_port, recording, voice_names
from signals import speech_like, write_float_wav
from test_ha_refresh import FakeHa
from test_server_cli import first_info

from wyoming_qwen3tts.client import synthesize


class FakeHaThread:
    """FakeHa on its own loop thread, for a server in another process."""

    def __init__(self) -> None:
        self.ha, self.url = FakeHa(), ""
        started, self._stop = threading.Event(), threading.Event()

        async def serve(url: str) -> None:
            self.url = url
            started.set()
            while not self._stop.is_set():
                await asyncio.sleep(0.05)

        self._thread = threading.Thread(target=lambda: asyncio.run(self.ha.serve(serve)), daemon=True)
        self._thread.start()
        assert started.wait(10)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


async def fetch(method: str, url: str, **kwargs) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as session, session.request(method, url, **kwargs) as response:
        return response.status, await response.read()


def test_the_http_side_in_the_server_process(converted_factory, tmp_path):
    ref = write_float_wav(tmp_path / "anna.wav", speech_like(3 * 24000, 0))
    config = tmp_path / "config.yaml"
    config.write_text(f"engine:\n  max_frames: 8\nvoices:\n  - name: anna\n    ref_audio: {ref}\n"
                      f"    ref_text: {REF_TEXT}\n", encoding="utf-8")
    port, http_port, ha = free_port(), free_port(), FakeHaThread()
    uri, url = f"tcp://127.0.0.1:{port}", f"http://127.0.0.1:{http_port}"
    data = tmp_path / "data"
    (data / "voices" / ".partial-12345678").mkdir(parents=True)  # a save interrupted by a crash
    proc = subprocess.Popen([sys.executable, "-m", "wyoming_qwen3tts", "--model",
                             str(converted_factory("tiny", "base", "int8")), "--uri", uri, "--config", str(config),
                             "--greedy", "--data-dir", str(data), "--http", f"127.0.0.1:{http_port}",
                             "--ha-url", ha.url], env={**os.environ, "HA_TOKEN": "long-lived"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while asyncio.run(fetch("GET", f"{url}/api/health"))[0] != 200 if _listening(http_port) else True:
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.2)
        assert not (data / "voices" / ".partial-12345678").exists()
        form = aiohttp.FormData()
        form.add_field("name", "Zoe")
        form.add_field("transcript", REF_TEXT)
        form.add_field("audio", encode("mp3", "libmp3lame", recording(4.0)), filename="zoe.mp3")
        status, body = asyncio.run(fetch("POST", f"{url}/api/voices", data=form))
        assert status == 201, body
        assert voice_names(uri) == ["anna", "Zoe"]
        deadline = time.monotonic() + 20
        while not ha.ha.calls:
            assert time.monotonic() < deadline, "Home Assistant was not asked to reload"
            time.sleep(0.1)
        assert ha.ha.calls == [{"entity_id": ["tts.qwen3tts", "tts.kitchen_voice"]}]
        assert set(ha.ha.auth) == {"Bearer long-lived"}
        status, body = asyncio.run(fetch("POST", f"{url}/api/speak", json={"voice": "Zoe", "text": "Hi there."}))
        assert status == 200 and len(body) == 44 + 8 * 1920 * 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        ha.close()
    log = proc.stdout.read()
    assert "Traceback" not in log and f"HTTP (voice lab) on http://127.0.0.1:{http_port}" in log
    assert "asked Home Assistant to reload the Wyoming entry" in log
    # the next start serves the saved voice from the first answer to describe on
    proc = subprocess.Popen([sys.executable, "-m", "wyoming_qwen3tts", "--model",
                             str(converted_factory("tiny", "base", "int8")), "--uri", uri, "--config", str(config),
                             "--greedy", "--data-dir", str(data)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        info = first_info(proc, uri)
        assert [v.name for v in info.tts[0].voices] == ["anna", "Zoe"]  # before the model has loaded
        saved = json.loads(next((data / "voices").glob("zoe-*/voice.json")).read_text())
        assert saved["name"] == "Zoe"
        assert len(asyncio.run(synthesize(uri, "Hi there.", voice="Zoe")).audio) == 8 * 1920 * 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _listening(port: int) -> bool:
    import socket
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0
