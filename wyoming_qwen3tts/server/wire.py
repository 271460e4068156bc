"""Reading Wyoming events with bounds. The library's reader trusts the peer's lengths and
waits forever; a text-to-speech server only ever receives small JSON events, so every part
of an event has a size limit, and a connection that says nothing for too long is closed."""
from __future__ import annotations

import asyncio
import json

from wyoming.event import Event

MAX_LINE = 64 * 1024  # header line; the stream reader's own limit is set to this too
MAX_DATA = 1024 * 1024  # additional JSON data (text arrives here: far above server.max_text_chars)
MAX_PAYLOAD = 1024 * 1024  # binary payload (a TTS server expects none)
PART_TIMEOUT_S = 60.0  # the data and payload of an event whose header arrived


class BadEvent(ValueError):
    """The peer sent something that is not a well-formed, reasonably sized event."""


def _length(header: dict, key: str, limit: int) -> int:
    value = header.get(key)
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadEvent(f"{key} must be a non-negative integer, got {value!r}")
    if value > limit:
        raise BadEvent(f"{key} {value} exceeds the limit of {limit} bytes")
    return value


async def read_event(reader: asyncio.StreamReader, idle_timeout: float | None) -> Event | None:
    """The next event; None when the peer closed the connection. Raises BadEvent on a
    malformed or oversized event and TimeoutError when nothing arrives for `idle_timeout` s
    (None: wait; the rest of an event started must still come within the timeout)."""
    try:
        line = await asyncio.wait_for(reader.readline(), idle_timeout)
    except ValueError as e:  # the reader's line limit
        raise BadEvent(f"event header longer than {MAX_LINE} bytes") from e
    if not line:
        return None
    try:
        header = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise BadEvent(f"event header is not JSON: {e}") from None
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise BadEvent("event header has no type")
    data = header.get("data") or {}
    if not isinstance(data, dict):
        raise BadEvent("event data must be a JSON object")
    data_length = _length(header, "data_length", MAX_DATA)
    payload_length = _length(header, "payload_length", MAX_PAYLOAD)
    try:
        if data_length:
            extra = json.loads(await asyncio.wait_for(reader.readexactly(data_length), PART_TIMEOUT_S))
            if not isinstance(extra, dict):
                raise BadEvent("event data must be a JSON object")
            data.update(extra)
        payload = await asyncio.wait_for(reader.readexactly(payload_length), PART_TIMEOUT_S) if payload_length else None
    except asyncio.IncompleteReadError:
        return None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise BadEvent(f"event data is not JSON: {e}") from None
    return Event(type=header["type"], data=data, payload=payload)
