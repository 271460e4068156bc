"""Which of the ten languages a sentence is in, when neither the voice nor the request says
(Home Assistant never sends a language): py3langid, its bundled model restricted to Qwen3-TTS's
languages (docs/TEXT.md says why this library). Loading the model takes a second or more, so
the server starts it in the background at start-up (`warm_up`); a sentence that needs it first
waits for it.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

LANGUAGES = ("en", "de", "fr", "es", "it", "pt", "ru", "zh", "ja", "ko")
MIN_CONFIDENCE = 0.5  # below this (normalised probability over the ten) the sentence is "unsure"
MIN_LETTERS = 4  # fewer letters than this say nothing about the language

_lock = threading.Lock()
_identifier: Any = None
_loader: threading.Thread | None = None  # the background load, once started


def _load() -> Any:
    global _identifier
    with _lock:
        if _identifier is None:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier

            identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
            identifier.set_languages(list(LANGUAGES))
            _identifier = identifier
            log.debug("language detector loaded (%d languages)", len(LANGUAGES))
    return _identifier


def warm_up() -> None:
    """Load the model in a background thread (no-op once loaded or loading)."""
    global _loader
    with _lock:
        if _identifier is not None or _loader is not None:
            return
        _loader = threading.Thread(target=_load, name="langid-load", daemon=True)
    _loader.start()


def detect(text: str, wait: bool = True) -> str | None:
    """The ISO code of `text`'s language, or None when it is too short or the model unsure; and,
    with wait=False (the server's event loop, which must not stall), while it is still loading."""
    if sum(ch.isalpha() for ch in text) < MIN_LETTERS:
        return None
    identifier = _identifier
    if identifier is None:
        if not wait:
            warm_up()
            log.debug("the language detector is still loading: a sentence is read as written")
            return None
        identifier = _load()
    language, confidence = identifier.classify(text)
    return str(language) if confidence >= MIN_CONFIDENCE else None
