"""Who may use the HTTP side (server/http_auth.py), the page and its static files, and the
settings that turn it on."""
from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from http_app import with_app
from yarl import URL

from wyoming_qwen3tts.config import ConfigError, ServerConfig, apply_overrides
from wyoming_qwen3tts.server.app import config_from_args, parse_args
from wyoming_qwen3tts.server.http_auth import INGRESS_PEERS_ENV, TOKEN_COOKIE


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def status(session: aiohttp.ClientSession, url: str, **kwargs) -> int:
    async with session.get(url, **kwargs) as response:
        await response.read()
        return response.status


@pytest.fixture
def page_dir(tmp_path):
    page = tmp_path / "page"
    (page / "static").mkdir(parents=True)
    (page / "index.html").write_text("<!doctype html><title>Voices</title>")
    (page / "static" / "app.js").write_text("console.log('lab')")
    (page / "static" / ".secret").write_text("hidden")
    (tmp_path / "outside.txt").write_text("OUTSIDE-CONTENT")
    return page


def test_a_token_is_required_and_the_page_sets_its_cookie(tmp_path, page_dir):
    async def check(url: str) -> None:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:  # an IP's cookies
            assert await status(session, f"{url}/api/voices") == 401
            assert await status(session, f"{url}/api/voices", headers={"Authorization": "Bearer nope"}) == 401
            assert await status(session, f"{url}/api/voices", headers={"Authorization": "Bearer s3cret"}) == 200
            assert await status(session, f"{url}/") == 200  # the page (no data): it asks for the token
            assert await status(session, f"{url}/static/app.js") == 200
            assert TOKEN_COOKIE not in session.cookie_jar.filter_cookies(URL(url))
            async with session.get(f"{url}/?token=s3cret") as r:
                assert r.status == 200 and "Voices" in await r.text()
                cookie = r.cookies[TOKEN_COOKIE]
                assert cookie["httponly"] and cookie["samesite"] == "Strict"
            assert await status(session, f"{url}/api/voices") == 200  # the cookie now
            assert await status(session, f"{url}/api/health") == 503  # open to loopback; no model loaded
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as fresh:
            assert await status(fresh, f"{url}/?token=wrong") == 200  # the page, and no cookie
            assert TOKEN_COOKIE not in fresh.cookie_jar.filter_cookies(URL(url))
            assert await status(fresh, f"{url}/api/voices") == 401

    run(with_app(tmp_path, check, page_dir, http_token="s3cret"))


@pytest.mark.parametrize("peers,expected", [("127.0.0.1", 200), ("10.9.8.7", 403), ("10.9.8.7, 127.0.0.1", 200)])
def test_ingress_answers_only_the_proxy(tmp_path, page_dir, monkeypatch, peers, expected):
    monkeypatch.setenv(INGRESS_PEERS_ENV, peers)

    async def check(url: str) -> None:
        async with aiohttp.ClientSession() as session:
            assert await status(session, f"{url}/") == expected
            assert await status(session, f"{url}/api/voices") == expected
            assert await status(session, f"{url}/api/health") == 503  # loopback health checks, always

    run(with_app(tmp_path, check, page_dir, http_ingress=True))


def test_ingress_with_a_token_lets_token_holders_in(tmp_path, page_dir, monkeypatch):
    monkeypatch.setenv(INGRESS_PEERS_ENV, "10.9.8.7")

    async def check(url: str) -> None:
        async with aiohttp.ClientSession() as session:
            assert await status(session, f"{url}/api/voices") == 401
            assert await status(session, f"{url}/api/voices", headers={"Authorization": "Bearer t"}) == 200

    run(with_app(tmp_path, check, page_dir, http_ingress=True, http_token="t"))


def test_the_ingress_proxy_is_the_supervisor_by_default(monkeypatch):
    from wyoming_qwen3tts.server.http_auth import ingress_peers
    monkeypatch.delenv(INGRESS_PEERS_ENV, raising=False)
    assert ingress_peers() == {"172.30.32.2"}


def test_static_files_without_traversal_or_listing(tmp_path, page_dir):
    async def check(url: str) -> None:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/static/app.js") as r:
                assert r.status == 200 and "javascript" in r.headers["Content-Type"] and "lab" in await r.text()
            for path in ("/static/.secret", "/static/..%2Foutside.txt", "/static/..%2F..%2Foutside.txt",
                         "/static/", "/static/nothing.js", "/static/%2e%2e"):
                async with session.get(URL(url + path, encoded=True)) as r:  # sent as written
                    body = await r.text()
                    assert r.status == 404 and "OUTSIDE-CONTENT" not in body and "hidden" not in body, path
            async with session.get(f"{url}/api/nothing") as r:
                assert r.status == 404 and "error" in await r.json()

    run(with_app(tmp_path, check, page_dir))


def test_without_the_page_installed_the_api_still_answers(tmp_path):
    async def check(url: str) -> None:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/") as r:
                assert r.status == 404 and "not installed" in (await r.json())["error"]
            async with session.get(f"{url}/api/info") as r:
                info = await r.json()
                assert r.status == 200 and not info["can_clone"] and info["limits"]["max_clip_s"] == 30
            async with session.post(f"{url}/api/speak", json={"voice": "x", "text": "Hi."}) as r:
                assert r.status == 503 and "still loading" in (await r.json())["error"]

    run(with_app(tmp_path, check, tmp_path / "nowhere", loading_wait=0.1))


def test_http_settings_and_flags():
    config = config_from_args(parse_args(["--http", "127.0.0.1:8099", "--asr", "tcp://core-whisper:10300",
                                          "--ha-url", "http://supervisor/core"]))
    assert config.server.http == "127.0.0.1:8099" and config.server.asr == "tcp://core-whisper:10300"
    assert config.server.ha_url == "http://supervisor/core" and not config.server.http_ingress
    config = config_from_args(parse_args(["--http", "0.0.0.0:8099", "--http-ingress"]))
    assert config.server.http_ingress and config.server.http_token is None
    config = config_from_args(parse_args(["--http", "[::]:8099", "--http-token", "t"]))
    assert config.server.http_token == "t"
    env = {"QWEN3TTS_HTTP_TOKEN": " from-env "}  # the token from the environment, below the flag
    assert config_from_args(parse_args(["--http", "[::]:8099"]), env).server.http_token == "from-env"
    assert config_from_args(parse_args(["--http", "[::]:8099", "--http-token", "t"]), env).server.http_token == "t"
    assert config_from_args(parse_args(["--http", "127.0.0.1:8099"]), {}).server.http_token is None
    for flags, message in [({"http": "0.0.0.0:8099"}, "set server.http_token"),
                           ({"http": "8099"}, "not HOST:PORT"), ({"http": "localhost:0"}, "not HOST:PORT"),
                           ({"asr": "core-whisper:10300"}, "not tcp://HOST:PORT"),
                           ({"ha_url": "supervisor/core"}, "not an http://"), ({"http_token": " "}, "empty")]:
        with pytest.raises(ConfigError, match=message):
            apply_overrides(ServerConfig(), **flags)


def test_a_client_that_stops_sending_its_body_is_answered_408(tmp_path, monkeypatch):
    monkeypatch.setattr("wyoming_qwen3tts.server.http_forms.READ_TIMEOUT_S", 0.5)

    async def stall(url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /api/speak HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"voice\": ")
        await writer.drain()
        start = asyncio.get_running_loop().time()
        head = await asyncio.wait_for(reader.readline(), 10)
        assert head.startswith(b"HTTP/1.1 408") and asyncio.get_running_loop().time() - start < 5
        writer.close()

    run(with_app(tmp_path, stall))


def test_the_openapi_file_lists_exactly_the_routes(tmp_path):
    """docs/openapi.yaml describes the app's routes, no more and no fewer."""
    import yaml

    from wyoming_qwen3tts.config import ServerSettings
    from wyoming_qwen3tts.server.http_api import build_app
    from wyoming_qwen3tts.server.service import ServiceSlot
    from wyoming_qwen3tts.server.voice_lab import VoiceLab

    spec = yaml.safe_load((Path(__file__).resolve().parents[1] / "docs" / "openapi.yaml").read_text())
    documented = {(method.upper(), path) for path, item in spec["paths"].items() for method in item
                  if method != "parameters"}
    slot = ServiceSlot()
    app = build_app(slot, ServerSettings(), VoiceLab(slot, ServerConfig()))
    served = {(r.method, r.resource.canonical) for r in app.router.routes() if r.method != "HEAD"}
    assert documented == served
