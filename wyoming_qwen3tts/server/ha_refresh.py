"""Ask Home Assistant to reload its Wyoming entry for this server after the voices changed, so
a saved voice appears in HA without a manual reload (docs/HTTP.md, "Home Assistant refresh").

Released HA builds a Wyoming TTS entity's voices from the `info` it read when the entry was
set up, and reads it again only when the entry is reloaded. Through HA's REST API:
1. POST /api/template finds the entities of the wyoming integration that are TTS entities of
   this server: HA names a Wyoming TTS entity after the program in `info` (PROGRAM_NAME), so
   its entity id or friendly name holds that name (a user who renamed the entity must reload
   by hand);
2. POST /api/services/homeassistant/reload_config_entry with those entity ids reloads their
   config entries (the service takes an entity_id; HA reloads the entry that owns it).
The add-on calls HA at http://supervisor/core with SUPERVISOR_TOKEN (homeassistant_api); a
pip or container user gives server.ha_url and a long-lived token. Changes in quick
succession cause one reload; failures are logged, never raised.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os

import aiohttp

from .voices import PROGRAM_NAME

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0
MAX_RESPONSE_BYTES = 256 * 1024
SETTLE_S = 1.0  # changes within this time are one reload
TOKEN_ENV = ("SUPERVISOR_TOKEN", "HA_TOKEN")

TEMPLATE = """{%- set ns = namespace(found=[]) -%}
{%- for e in integration_entities('wyoming') if e.startswith('tts.') -%}
{%- if '@NAME@' in (e ~ ' ' ~ (state_attr(e, 'friendly_name') or '')) | lower -%}
{%- set ns.found = ns.found + [e] -%}
{%- endif -%}
{%- endfor -%}
{{ ns.found | tojson }}"""


class RefreshError(Exception):
    """Home Assistant could not be asked (unreachable, refused, an unexpected answer)."""


def ha_token(configured: str | None) -> str | None:
    """server.ha_token, else the environment's SUPERVISOR_TOKEN or HA_TOKEN."""
    return configured or next((os.environ[k] for k in TOKEN_ENV if os.environ.get(k)), None)


class HaRefresher:
    """Reloads HA's Wyoming entries of this server; `request()` schedules it."""

    def __init__(self, url: str, token: str, program: str = PROGRAM_NAME, settle_s: float = SETTLE_S) -> None:
        self.url, self._token, self.program, self.settle_s = url.rstrip("/"), token, program, settle_s
        self._task: asyncio.Task | None = None
        self._again = False
        self.reloaded: list[str] = []  # the entity ids of the last reload (for logs and tests)

    def request(self) -> None:
        """Reload soon (once for changes in quick succession)."""
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.create_task(self._run())

    async def idle(self) -> None:
        """Until the scheduled reloads are done."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            self._again = False
            await asyncio.sleep(self.settle_s)
            try:
                self.reloaded = await self.refresh()
            except RefreshError as e:
                log.warning("could not ask Home Assistant to reload its Wyoming entry (%s); reload the "
                            "Wyoming integration's entry by hand to see the new voices", e)
            except Exception:
                log.exception("asking Home Assistant to reload its Wyoming entry failed")
            if not self._again:
                return

    async def refresh(self) -> list[str]:
        """Reload the config entries of this server's TTS entities; their ids."""
        timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
        headers = {"Authorization": f"Bearer {self._token}"}
        async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
            template = TEMPLATE.replace("@NAME@", self.program.lower())
            found = await self._post(session, "/api/template", {"template": template})
            try:
                entities = json.loads(found)
            except json.JSONDecodeError:
                raise RefreshError(f"unexpected answer to the template: {found[:200]!r}") from None
            if not isinstance(entities, list) or not all(isinstance(e, str) for e in entities):
                raise RefreshError(f"unexpected answer to the template: {found[:200]!r}")
            if not entities:
                raise RefreshError(f"Home Assistant has no Wyoming text-to-speech entity named {self.program!r}")
            await self._post(session, "/api/services/homeassistant/reload_config_entry", {"entity_id": entities})
        log.info("asked Home Assistant to reload the Wyoming entry of %s", ", ".join(entities))
        return entities

    async def _post(self, session: aiohttp.ClientSession, path: str, body: dict) -> str:
        try:
            async with session.post(self.url + path, json=body) as response:
                data = bytearray()
                while chunk := await response.content.read(64 * 1024):
                    data += chunk
                    if len(data) > MAX_RESPONSE_BYTES:
                        raise RefreshError(f"{path}: answer over {MAX_RESPONSE_BYTES // 1024} KB")
                if response.status != 200:
                    raise RefreshError(f"{path}: HTTP {response.status} {data[:200].decode('utf-8', 'replace')}")
                return bytes(data).decode("utf-8", "replace")
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            raise RefreshError(f"{self.url}{path}: {type(e).__name__}: {e}") from None
