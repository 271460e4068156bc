"""Request bodies of the HTTP side, read with bounds: a JSON object, or a multipart form with
text fields and at most one audio file (docs/HTTP.md). Every part has a size limit, checked
while it is read, so an oversized upload is refused after MAX bytes, not after all of it."""
from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qs

from aiohttp import BodyPartReader, web

from .api_error import ApiError

T = TypeVar("T")

MAX_JSON_BYTES = 64 * 1024  # a JSON body: names, a description, a sentence or a few of them
MAX_FIELD_BYTES = 32 * 1024  # one text field of a form (max_text_chars is checked later, in characters)
MAX_PARTS = 16  # parts of a form
READ_CHUNK = 64 * 1024
READ_TIMEOUT_S = 60.0  # the longest a client may send nothing while its body is read
TEXT_FIELDS = ("name", "language", "description", "transcript", "text", "instruct", "voice", "speaker")


@dataclass
class VoiceForm:
    """What a save or a preview sends; empty strings for fields not given."""

    name: str = ""
    language: str = ""
    description: str = ""
    transcript: str = ""
    text: str = ""
    instruct: str = ""
    voice: str = ""
    speaker: str = ""  # a preset speaker to style (1.7B CustomVoice)
    audio: bytes | None = None  # the uploaded file's bytes, when there is one

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VoiceForm:
        form = cls()
        for key in TEXT_FIELDS:
            value = data.get(key)
            if value is None:
                continue
            if not isinstance(value, str):
                raise ApiError(422, f"{key} must be a string")
            setattr(form, key, value.strip())
        return form


async def read_json(request: web.Request) -> dict[str, Any]:
    """The request's JSON object, at most MAX_JSON_BYTES."""
    body = await _read_bounded(request.content, MAX_JSON_BYTES, "the JSON body")
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ApiError(400, f"the body is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the body must be a JSON object")
    return data


async def read_voice_form(request: web.Request, max_audio_bytes: int) -> VoiceForm:
    """A multipart form (fields of VoiceForm, `audio` a file) or a JSON object."""
    if request.content_type == "application/x-www-form-urlencoded":  # a form without a file
        body = await _read_bounded(request.content, MAX_JSON_BYTES, "the form")
        try:
            fields = parse_qs(body.decode("utf-8"), max_num_fields=MAX_PARTS)
        except (UnicodeDecodeError, ValueError) as e:
            raise ApiError(400, f"bad form: {e}") from None
        return VoiceForm.from_json({k: v[-1] for k, v in fields.items() if k in TEXT_FIELDS})
    if request.content_type != "multipart/form-data":
        if request.content_type not in ("application/json", ""):
            raise ApiError(415, f"send multipart/form-data or application/json, not {request.content_type}")
        return VoiceForm.from_json(await read_json(request))
    try:
        reader = await request.multipart()
    except (ValueError, AssertionError) as e:
        raise ApiError(400, f"bad multipart form: {e}") from None
    form = VoiceForm()
    for _ in range(MAX_PARTS):
        try:
            part = await _timed(reader.next())
        except ValueError as e:
            raise ApiError(400, f"bad multipart form: {e}") from None
        if part is None:
            return form
        if not isinstance(part, BodyPartReader):
            raise ApiError(400, "nested multipart forms are not accepted")
        if part.name == "audio":
            if form.audio is not None:
                raise ApiError(400, "send one audio file")
            form.audio = await _read_bounded(part, max_audio_bytes, "the audio file",
                                             f"the audio file is over {max_audio_bytes // 2**20} MB")
        elif part.name in TEXT_FIELDS:
            raw = await _read_bounded(part, MAX_FIELD_BYTES, f"field {part.name}")
            try:
                setattr(form, part.name, raw.decode("utf-8").strip())
            except UnicodeDecodeError:
                raise ApiError(400, f"field {part.name} is not UTF-8 text") from None
        else:
            await _read_bounded(part, MAX_FIELD_BYTES, f"field {part.name}")  # ignored, still bounded
    raise ApiError(400, f"a form has at most {MAX_PARTS} parts")


async def _read_bounded(source: Any, limit: int, what: str, message: str | None = None) -> bytes:
    """At most `limit` bytes from a stream or a multipart part; 413 past it, 408 for a client
    that stops sending."""
    data = bytearray()
    while True:
        chunk = await _timed(source.read_chunk(READ_CHUNK) if isinstance(source, BodyPartReader)
                             else source.read(READ_CHUNK))
        if not chunk:
            return bytes(data)
        data += chunk
        if len(data) > limit:
            raise ApiError(413, message or f"{what} is over {limit // 1024} KB")


async def _timed(read: Awaitable[T]) -> T:
    try:
        return await asyncio.wait_for(read, READ_TIMEOUT_S)
    except asyncio.TimeoutError:
        raise ApiError(408, f"the client sent nothing for {READ_TIMEOUT_S:.0f} s") from None
