"""Say what a sentence means: numbers, times, dates, units, money and abbreviations in words,
in the sentence's language (docs/TEXT.md).

The public API:

- `LANGUAGES`: the ten ISO codes Qwen3-TTS speaks; `language_code(name)` maps a model language
  name or tag ("english", "en-US", "German") to one of them (None for "auto" or an unknown one).
- `speak(sentence, language)`: one clean sentence (server/text.py's `normalize` output) in, its
  spoken form out, by the module `wyoming_qwen3tts.normalize.<language>` (each has
  `def normalize(sentence: str) -> str`); a language without a module leaves the text unchanged
  (logged once).
- `SentenceNormalizer`: what one request uses (the server's `normalize_text` mode and the
  request's language, else detection per sentence, detect.py); it logs each sentence before and
  after at debug level. `prefix()` is its streaming side (below).
- `warm_up()`: import the language modules and load the detector in the background at
  start-up, so that no request waits for them.

The contract every language module keeps, which lets a sentence still being written be spoken
word by word (server/text_stream.py):

1. Text without a *trigger* character (`is_trigger`: a digit, a symbol, a "." or ":" or "/"
   — anything but letters, whitespace and plain punctuation) comes out unchanged.
2. A rewrite (what one rule replaces, with what it reads ahead to decide) holds a trigger,
   starts no earlier than the token of its first trigger, and each of its tokens is a trigger
   token or one of the `LOOKAHEAD - 1` tokens after one (a token is a run of characters between
   whitespace, or one CJK character): "21,5 °C", "5. Dezember 2026", "2:30 PM", "No. 5". It may
   look back freely. Lookarounds treat the end of the text as whitespace.
3. What a rewrite puts in holds no trigger (num2words' hyphens become spaces), so a module may
   apply its rules one after the other.

So if the last `LOOKAHEAD` tokens of a clean prefix hold no trigger, every rewrite that touches
that prefix lies inside it, and `speak(prefix)` is a prefix of `speak(sentence)`: `held_back`
finds the longest such prefix. A streamed sentence's language is chosen once, when its first
trigger is given out (before that, every language reads it the same, by 1.).
"""
from __future__ import annotations

import importlib
import logging
import re
import threading
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType

from . import detect as _detect

log = logging.getLogger(__name__)

LANGUAGES = ("en", "de", "fr", "es", "it", "pt", "ru", "zh", "ja", "ko")
LOOKAHEAD = 3  # a rewrite's tokens lie within this many from one of its trigger tokens (rule 2 above)
UNKNOWN = ""  # a streamed sentence's language once decided as none (left as written)

_NAMES = {"english": "en", "german": "de", "french": "fr", "spanish": "es", "italian": "it",
          "portuguese": "pt", "russian": "ru", "chinese": "zh", "japanese": "ja", "korean": "ko"}
# plain punctuation that no module rewrites (ASCII and CJK); "." ":" "/" "-" are triggers
_PLAIN = frozenset(",;!?'\"()[]«»“”‘’„‚–—…、，。！？；（）「」『』【】《》・")
_LETTER_SYMBOLS = frozenset("ºªµμ")  # letters to Unicode, symbols to the rules ("1º", "nº", "µg")
_TOKEN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff]"
                    r"|[^\s\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff]+")

_modules: dict[str, ModuleType | None] = {}


def language_code(name: str | None) -> str | None:
    """"english", "English", "en", "en-US", "pt_BR" → "en"/"pt"; None for "auto", None or unknown."""
    if not name:
        return None
    key = name.strip().lower().replace("_", "-")
    code = _NAMES.get(key, key.split("-", 1)[0])
    return code if code in LANGUAGES else None


def is_trigger(ch: str) -> bool:
    """A character some rule may rewrite: not a letter, whitespace or plain punctuation."""
    if ch in _LETTER_SYMBOLS:
        return True
    return not (ch.isspace() or ch in _PLAIN or unicodedata.category(ch).startswith(("L", "M")))


def has_trigger(text: str) -> bool:
    """Whether any rule of any language may rewrite something in `text`."""
    return any(is_trigger(ch) for ch in text)


def _module(language: str) -> ModuleType | None:
    if language not in _modules:
        try:
            _modules[language] = importlib.import_module(f"{__name__}.{language}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{language}":
                raise
            log.warning("no text normaliser for language %r yet: its text is spoken as written", language)
            _modules[language] = None
    return _modules[language]


def speak(sentence: str, language: str) -> str:
    """The spoken form of one clean sentence in `language` (an ISO code of LANGUAGES). A module
    that fails (a bug) leaves the sentence as written rather than fail the request."""
    module = _module(language)
    if module is None or not has_trigger(sentence):
        return sentence
    try:
        spoken: str = module.normalize(sentence)
    except Exception:
        log.exception("the %s normaliser failed on %r: spoken as written", language, sentence)
        return sentence
    return spoken


def held_back(text: str) -> str:
    """The longest start of `text` (a clean prefix of a sentence still being written), cut at
    whitespace or a CJK character, whose last LOOKAHEAD tokens hold no trigger: what can be
    spoken already, whatever comes next. Whitespace at its end is dropped."""
    tokens = list(_TOKEN.finditer(text))
    i = len(tokens)
    while i > 0:
        start = max(0, i - LOOKAHEAD)
        hit = next((k for k in range(start, i) if has_trigger(tokens[k].group())), None)
        if hit is None:
            break
        i = hit  # cut before that token, and look again at the tokens before it
    return text[: tokens[i].start()].rstrip() if i < len(tokens) else text.rstrip()


def warm_up() -> None:
    """Import every language's module (6-100 ms each: num2words, the compiled patterns) and load
    the language detector (a second or more), in the background, so that no request waits."""

    def load() -> None:
        for language in LANGUAGES:
            _module(language)
        _detect.warm_up()

    threading.Thread(target=load, name="normalize-warm-up", daemon=True).start()


@dataclass
class SentenceNormalizer:
    """The spoken form of a request's sentences. `mode`: server.normalize_text ("auto" or "off");
    `language`: an ISO code (the voice's configured language or the request's), else None:
    each sentence's own, detected. One instance per request (it keeps the last detected
    language, used when a sentence is too short to tell). `wait`: whether detection may wait
    for the detector to load (not on the server's event loop: there the sentence is left as
    written until it has)."""

    mode: str = "auto"
    language: str | None = None
    label: str = "text"
    wait: bool = True
    _last: str | None = field(default=None, repr=False)
    _detector: Callable[[str, bool], str | None] = field(default=_detect.detect, repr=False)

    def choose(self, text: str) -> str | None:
        """The language to read `text` in: the fixed one, else detected (else the last one)."""
        if self.language is not None:
            return self.language
        found = self._detector(text, self.wait)
        if found is not None:
            self._last = found
        return found or self._last

    def sentence(self, text: str, language: str | None = None) -> str:
        """A whole sentence's spoken form (in `language` if given: a streamed sentence's choice)."""
        if self.mode == "off" or not text:
            return text
        if not has_trigger(text):
            log.debug("%s: nothing to read out: %r", self.label, text)
            return text
        if language is None:
            language = self.choose(text)
        spoken = speak(text, language) if language else text
        log.debug("%s: normalised (%s): %r → %r", self.label, language or "unknown language", text, spoken)
        return spoken

    def prefix(self, text: str, language: str | None) -> tuple[str, str | None]:
        """For the start of a sentence still being written (clean, server/text.py): the part that
        is final, spoken, and the language it was read in (None while no trigger has been given
        out, UNKNOWN when none could be told: the caller passes it back in, and to `sentence`
        at the end)."""
        if self.mode == "off":
            return text.rstrip(), language
        safe = held_back(text)
        if language is None and has_trigger(safe):
            language = self.choose(text) or UNKNOWN
        return (speak(safe, language) if language else safe), language
