"""The agent: the user's text picks a scripted reply, which is streamed as deltas through the
chat log (the way LLM agents stream), so that the assist pipeline streams it into the TTS
entity once more than STREAM_RESPONSE_CHARS (60) characters have arrived.

Scripts (the text sent to the pipeline):
- "stream": one 70-character sentence at once, then five more sentences in pieces
  (mid-word splits too), a pause before each piece, about 6 s in all;
- "emoji-stream": 70 emoji in pieces (streamed: nothing speakable on the streaming path);
- "emoji": a single emoji (short: not streamed);
- anything else: "You said: <text>".
Each run logs when the reply started and finished (logger custom_components.e2e_agent).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Literal

from homeassistant.components import conversation
from homeassistant.config_entries import ConfigEntry
from homeassistant.const import MATCH_ALL
from homeassistant.core import HomeAssistant
from homeassistant.helpers.entity_platform import AddConfigEntryEntitiesCallback

_LOGGER = logging.getLogger(__name__)

FIRST = "Here is the first sentence of a long answer, streamed as it is written. "  # > 60 characters
REST = ["The sec", "ond sentence arr", "ives in pieces. ",
        "A third one fol", "lows a moment later. ",
        "Then a fourth, ", "still streaming. ",
        "And the fifth sen", "tence ends it all. ",
        "Goodbye", " for now."]
PAUSE_S = 0.5


def script(text: str) -> list[tuple[float, str]]:
    """(pause before, piece) pairs of the reply to `text`."""
    text = text.strip().lower()
    if text == "stream":
        return [(0.0, FIRST)] + [(PAUSE_S, piece) for piece in REST]
    if text == "emoji-stream":
        return [(0.2, "🙂" * 10) for _ in range(7)]
    if text == "emoji":
        return [(0.0, "🙂")]
    return [(0.0, f"You said: {text}")]


async def async_setup_entry(hass: HomeAssistant, entry: ConfigEntry,
                            async_add_entities: AddConfigEntryEntitiesCallback) -> None:
    async_add_entities([E2EAgent(entry)])


class E2EAgent(conversation.ConversationEntity):
    _attr_supports_streaming = True
    _attr_has_entity_name = True
    _attr_name = None

    def __init__(self, entry: ConfigEntry) -> None:
        self._attr_unique_id = entry.entry_id
        self._attr_device_info = None
        self._attr_name = "E2E streaming agent"
        self._attr_has_entity_name = False

    @property
    def supported_languages(self) -> list[str] | Literal["*"]:
        return MATCH_ALL

    async def _async_handle_message(self, user_input: conversation.ConversationInput,
                                    chat_log: conversation.ChatLog) -> conversation.ConversationResult:
        pieces = script(user_input.text)
        started = time.time()
        _LOGGER.info("reply to %r started at %.3f", user_input.text, started)

        async def deltas() -> AsyncIterator[dict]:
            yield {"role": "assistant"}
            for pause, piece in pieces:
                if pause:
                    await asyncio.sleep(pause)
                yield {"content": piece}

        async for _content in chat_log.async_add_delta_content_stream(self.entity_id, deltas()):
            pass
        finished = time.time()
        _LOGGER.info("reply to %r finished at %.3f (%.2f s)", user_input.text, finished, finished - started)
        return conversation.async_get_result_from_chat_log(user_input, chat_log)
