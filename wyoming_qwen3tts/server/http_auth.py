"""Who may use the HTTP side (docs/HTTP.md, "Access").

- A token (server.http_token) is presented as `Authorization: Bearer TOKEN`, or as the
  cookie TOKEN_COOKIE, which the page gets by being opened once as `/?token=TOKEN`.
- Under Home Assistant ingress (server.http_ingress) the Supervisor's ingress proxy is the
  only peer answered without a token: it has signed the user in. Its address on the add-on
  network is 172.30.32.2; QWEN3TTS_INGRESS_PEERS (comma-separated) replaces it in tests.
- `GET /api/health` is open to loopback peers too (a container's own health check).
The peer is the TCP peer, never a forwarded-for header, which anyone can send.
"""
from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

log = logging.getLogger(__name__)

TOKEN_COOKIE = "qwen3tts_token"
INGRESS_PEERS_ENV = "QWEN3TTS_INGRESS_PEERS"
INGRESS_PROXY = "172.30.32.2"  # the Supervisor on the add-on network (docs/HTTP.md, "Access")
OPEN_TO_LOOPBACK = frozenset({"/api/health"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def ingress_peers() -> frozenset[str]:
    value = os.environ.get(INGRESS_PEERS_ENV)
    if value is None:
        return frozenset({INGRESS_PROXY})
    return frozenset(p.strip() for p in value.split(",") if p.strip())


def peer_address(request: web.Request) -> str:
    """The TCP peer's address ("" when unknown), IPv4-mapped IPv6 shown as IPv4."""
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    host = peer[0] if isinstance(peer, tuple) and peer else ""
    return host.removeprefix("::ffff:") if isinstance(host, str) else ""


def presented_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip()
    return request.cookies.get(TOKEN_COOKIE) or request.query.get("token")


def _loopback(host: str) -> bool:
    return host == "::1" or host.startswith("127.")


def refusal(request: web.Request, status: int, message: str) -> web.Response:
    """A refused request: {"error": message}, and under /v1/ (OpenAI's API, docs/OPENAI.md) in
    OpenAI's error shape, which its clients read."""
    body: dict = {"error": message}
    if request.path.startswith("/v1/"):
        code = "invalid_api_key" if status == 401 else "forbidden"
        body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
    return web.json_response(body, status=status, headers={"WWW-Authenticate": "Bearer"} if status == 401 else None)


def access_guard(token: str | None, ingress: bool) -> Middleware:
    """The middleware that refuses everyone these rules do not let in (403, or 401 for a
    missing or wrong token)."""
    peers = ingress_peers() if ingress else frozenset()

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        peer = peer_address(request)
        if peer in peers or (request.path in OPEN_TO_LOOPBACK and _loopback(peer)):
            return await handler(request)
        if token is None:
            if ingress:
                log.warning("HTTP request from %s refused: only the ingress proxy is answered", peer or "?")
                return refusal(request, 403, "only Home Assistant's ingress proxy may connect")
            return await handler(request)  # no token configured: loopback only (config.py checks the bind)
        given = presented_token(request)
        if given is None or not hmac.compare_digest(given.encode(), token.encode()):
            return refusal(request, 401, "a valid token is required (Authorization: Bearer TOKEN)")
        return await handler(request)

    return guard
