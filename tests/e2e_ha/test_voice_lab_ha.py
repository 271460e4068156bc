"""The voice lab against a real Home Assistant (issue 36's acceptance): a voice saved through
the HTTP API appears among the Wyoming TTS entity's voices without the test reloading
anything (the server asks HA to reload its entry: server/ha_refresh.py), tts_get_url speaks
with it, and a rename and a delete reach HA the same way.

Opt-in: `python -m pytest -m e2e tests/e2e_ha/test_voice_lab_ha.py`. A tiny synthetic Base
model (a clone needs one) with `--http` and `--ha-url` pointed at HA, HA_TOKEN the owner's
token, as a pip user sets it up; HA installed and started by the harness (ha_harness.py).
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import aiohttp
import install_ha
import pytest
from ha_harness import LOOPBACK, HomeAssistant, Process, free_port, wait_until
from test_home_assistant import add_wyoming, fetch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the recordings and signals
from lab_server import encode, recording
from signals import speech_like

pytestmark = pytest.mark.e2e

REF_TEXT = "This is the reference recording of the voice."
LANGUAGE = "en"


@pytest.fixture(scope="module")
def workdir(request: pytest.FixtureRequest):
    path = Path(tempfile.mkdtemp(prefix="qwen3tts-e2e-lab-"))
    failed = request.session.testsfailed
    yield path
    if request.session.testsfailed == failed:
        shutil.rmtree(path, ignore_errors=True)
    else:
        print(f"\nlogs of the server and of Home Assistant: {path}")


@pytest.fixture(scope="module")
def ha_install() -> install_ha.HaInstall:
    return install_ha.ensure()


@pytest.fixture(scope="module")
def home_assistant(ha_install, workdir: Path):
    ha = HomeAssistant(ha_install.python, ha_install.ffmpeg, workdir / "ha-config")
    try:
        ha.start()
        yield ha
    finally:
        ha.stop()


class LabServer:
    """`wyoming-qwen3tts --http --ha-url` with a tiny Base model and one configured clone."""

    def __init__(self, workdir: Path, ha: HomeAssistant) -> None:
        from qwen3tts_tools.synthetic.writer import write_checkpoint
        from wyoming_qwen3tts.convert.pipeline import convert
        from wyoming_qwen3tts.engine.audio import write_wav

        model = convert(write_checkpoint(workdir / "checkpoint", "tiny", "base"), workdir / "converted",
                        weights="int8")
        write_wav(workdir / "anna.wav", speech_like(3 * 24000, 0))
        config = workdir / "config.yaml"
        config.write_text(f"engine:\n  max_frames: 12\nvoices:\n  - name: anna\n    ref_audio: {workdir / 'anna.wav'}"
                          f"\n    ref_text: {REF_TEXT}\n", encoding="utf-8")
        self.port, self.http_port = free_port(), free_port()
        self.url = f"http://{LOOPBACK}:{self.http_port}"
        argv = [sys.executable, "-m", "wyoming_qwen3tts", "--model", str(model), "--uri",
                f"tcp://{LOOPBACK}:{self.port}", "--config", str(config), "--data-dir", str(workdir / "data"),
                "--precision", "f32", "--greedy", "--threads", "1", "--http", f"{LOOPBACK}:{self.http_port}",
                "--ha-url", ha.url]
        self.process = Process("wyoming-qwen3tts --http", argv, workdir / "server.log",
                               env={**os.environ, "HA_TOKEN": ha.token or ""})

    def request(self, method: str, path: str, **kwargs) -> tuple[int, bytes]:
        async def go() -> tuple[int, bytes]:
            async with aiohttp.ClientSession() as session, session.request(method, self.url + path,
                                                                           **kwargs) as r:
                return r.status, await r.read()
        return asyncio.run(asyncio.wait_for(go(), 120))

    def loaded(self) -> bool:
        return "ready on" in self.process.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def lab(home_assistant, workdir: Path):
    (workdir / "server").mkdir()
    server = LabServer(workdir / "server", home_assistant)
    try:
        wait_until(server.loaded, 240, "the server loaded", alive=server.process.alive)
        yield server
    finally:
        server.process.stop()


def ha_voices(ha: HomeAssistant, entity: str) -> list[tuple[str, str]]:
    ws = ha.ws()
    try:
        reply = ws.call({"type": "tts/engine/voices", "engine_id": entity, "language": LANGUAGE})
    finally:
        ws.close()
    return [(v["voice_id"], v["name"]) for v in reply["voices"]]


def test_a_saved_voice_reaches_home_assistant_without_a_reload(home_assistant, lab, ha_install):
    speaker = add_wyoming(home_assistant, lab.port)
    assert ha_voices(home_assistant, speaker.entity_id) == [("anna", "anna")]
    form = aiohttp.FormData()
    for key, value in (("name", "Zoe"), ("transcript", REF_TEXT), ("description", "Zoe from the lab"),
                       ("language", "en")):
        form.add_field(key, value)
    form.add_field("audio", encode("mp3", "libmp3lame", recording(4.0)), filename="zoe.mp3")
    status, body = lab.request("POST", "/api/voices", data=form)
    assert status == 201, body
    wait_until(lambda: ("Zoe", "Zoe from the lab") in ha_voices(home_assistant, speaker.entity_id), 60,
               "Home Assistant listing the saved voice")
    status, audio, _, _ = fetch(home_assistant, speaker.entity_id, "Hello from the voice lab.", {"voice": "Zoe"},
                                timeout=90)
    assert status == 200 and len(audio) > 1000, (status, audio[:200])

    status, body = lab.request("PATCH", "/api/voices/Zoe", json={"name": "Zoey", "description": "Zoey"})
    assert status == 200, body
    wait_until(lambda: ("Zoey", "Zoey") in ha_voices(home_assistant, speaker.entity_id), 60,
               "Home Assistant listing the renamed voice")
    assert lab.request("DELETE", "/api/voices/Zoey")[0] == 204
    wait_until(lambda: ha_voices(home_assistant, speaker.entity_id) == [("anna", "anna")], 60,
               "Home Assistant forgetting the deleted voice")
    log = lab.process.log.read_text(errors="replace")
    assert "asked Home Assistant to reload the Wyoming entry" in log and "Traceback" not in log
    assert json.loads(lab.request("GET", "/api/voices")[1])[0]["name"] == "anna"
