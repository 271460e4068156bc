"""Home Assistant's refresh after voice changes (server/ha_refresh.py), against a fake HA that
renders the template with Jinja as HA does and records the service calls."""
from __future__ import annotations

import asyncio
import json

import jinja2
import pytest
from aiohttp import web
from lab_server import free_port

from wyoming_qwen3tts.server.ha_refresh import TEMPLATE, HaRefresher, ha_token

# entity id -> (integration, friendly name)
ENTITIES = {"tts.qwen3tts": ("wyoming", "qwen3tts"), "tts.piper": ("wyoming", "piper"),
            "stt.faster_whisper": ("wyoming", "faster-whisper"), "tts.kitchen_voice": ("wyoming", "Qwen3TTS kitchen"),
            "tts.google_translate_en_com": ("google_translate", "Google qwen3tts")}


def render(template: str) -> str:
    """The template as HA renders it: its integration_entities and state_attr over ENTITIES."""
    env = jinja2.Environment()
    env.globals["integration_entities"] = lambda domain: [e for e, (d, _) in ENTITIES.items() if d == domain]
    env.globals["state_attr"] = lambda entity, attr: ENTITIES[entity][1] if attr == "friendly_name" else None
    return env.from_string(template).render()


class FakeHa:
    def __init__(self, status: int = 200) -> None:
        self.status, self.calls, self.auth = status, [], []

    async def template(self, request: web.Request) -> web.Response:
        self.auth.append(request.headers.get("Authorization"))
        if self.status != 200:
            return web.json_response({"message": "Unauthorized"}, status=self.status)
        return web.Response(text=render((await request.json())["template"]))

    async def reload(self, request: web.Request) -> web.Response:
        self.auth.append(request.headers.get("Authorization"))
        self.calls.append(await request.json())
        return web.json_response([])

    async def serve(self, fn):
        app = web.Application()
        app.router.add_post("/core/api/template", self.template)
        app.router.add_post("/core/api/services/homeassistant/reload_config_entry", self.reload)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            return await fn(f"http://127.0.0.1:{port}/core")
        finally:
            await runner.cleanup()


def test_the_template_finds_this_servers_wyoming_tts_entities():
    assert json.loads(render(TEMPLATE.replace("@NAME@", "qwen3tts"))) == ["tts.qwen3tts", "tts.kitchen_voice"]


def test_changes_in_quick_succession_reload_once():
    ha = FakeHa()

    async def changes(url: str) -> None:
        refresher = HaRefresher(url + "/", "tok", settle_s=0.2)
        for _ in range(3):
            refresher.request()
        await refresher.idle()
        assert refresher.reloaded == ["tts.qwen3tts", "tts.kitchen_voice"]

    asyncio.run(ha.serve(changes))
    assert ha.calls == [{"entity_id": ["tts.qwen3tts", "tts.kitchen_voice"]}]
    assert set(ha.auth) == {"Bearer tok"}


@pytest.mark.parametrize("status", [401, 500])
def test_a_refusal_is_logged_never_raised(status, caplog):
    ha = FakeHa(status)

    async def refused(url: str) -> None:
        refresher = HaRefresher(url, "tok", settle_s=0)
        refresher.request()
        await refresher.idle()

    asyncio.run(ha.serve(refused))
    assert not ha.calls and f"HTTP {status}" in caplog.text
    assert "reload the Wyoming integration's entry by hand" in caplog.text


def test_an_unreachable_home_assistant_is_logged(caplog):
    async def unreachable() -> None:
        refresher = HaRefresher(f"http://127.0.0.1:{free_port()}", "tok", settle_s=0)
        refresher.request()
        await refresher.idle()

    asyncio.run(unreachable())
    assert "could not ask Home Assistant" in caplog.text


def test_no_entity_of_ours_is_a_clear_warning(caplog):
    ha = FakeHa()

    async def other(url: str) -> None:
        refresher = HaRefresher(url, "tok", program="somethingelse", settle_s=0)
        refresher.request()
        await refresher.idle()

    asyncio.run(ha.serve(other))
    assert not ha.calls and "no Wyoming text-to-speech entity named 'somethingelse'" in caplog.text


def test_the_token_comes_from_the_setting_or_the_environment(monkeypatch):
    monkeypatch.delenv("SUPERVISOR_TOKEN", raising=False)
    monkeypatch.delenv("HA_TOKEN", raising=False)
    assert ha_token(None) is None
    monkeypatch.setenv("HA_TOKEN", "long-lived")
    assert ha_token(None) == "long-lived"
    monkeypatch.setenv("SUPERVISOR_TOKEN", "supervisor")
    assert ha_token(None) == "supervisor" and ha_token("configured") == "configured"
