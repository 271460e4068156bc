"""Which text normaliser a request gets (wyoming_qwen3tts/normalize, docs/TEXT.md): the mode is
server.normalize_text; the language is the one the model is told to speak, the request's when a
client names one, else the voice's configured language; for "auto" (the preset voices, and every
request from Home Assistant, which names none) each sentence's detected language.
"""
from __future__ import annotations

import logging

from ..normalize import SentenceNormalizer, language_code
from .service import ServiceSlot

log = logging.getLogger(__name__)


def request_normalizer(slot: ServiceSlot, voice: str | None, language: str | None, label: str) -> SentenceNormalizer:
    """The normaliser for one request in `voice` (None: the default one) with the request's
    `language` (None: not given). An unknown voice or language fails elsewhere (the response's
    own checks); here it only means "detect"."""
    chosen = language
    if slot.directory is not None:
        try:
            chosen = slot.directory.resolve(voice, language)[2]
        except ValueError:
            pass
    return SentenceNormalizer(slot.settings.normalize_text, language_code(chosen), label, wait=False)
