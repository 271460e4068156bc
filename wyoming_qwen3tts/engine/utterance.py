"""An utterance whose text is still being written: the caller's handle on a request opened
with `Scheduler.open`.

Text is appended as it arrives (an LLM's reply, word by word) and tokenized here, on the
caller's thread; only ids that the whole text's tokenization will also have are handed to
the engine (model/token_stream.py), so the result is exactly that of the whole text in the
streaming layout. The talker needs text token k+2 only when it makes frame k, so speech
starts with the first word and a sequence whose next token has not arrived sits out steps.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

from ..model.token_stream import TextTokenStream
from .stream import AudioStream


class Utterance:
    """append(text) as it arrives, finish() at its end; audio comes from `stream`, as for a
    submitted request. cancel() ends it wherever it is. Thread-safe."""

    def __init__(self, request_id: int, stream: AudioStream, tokens: TextTokenStream,
                 feed: Callable[[int, list[int], bool], None]) -> None:
        self.id, self.stream = request_id, stream
        self._tokens, self._feed = tokens, feed
        self._lock = threading.Lock()
        self._started = False  # leading whitespace is dropped: the prompt's role ends in a line break
        self._finished = False

    @property
    def finished(self) -> bool:
        """finish() was called: the text is complete."""
        return self._finished

    def append(self, text: str) -> None:
        """More text (any piece: a word, part of one, several sentences)."""
        with self._lock:
            if self._finished:
                raise RuntimeError(f"utterance {self.id} is already finished")
            if not self._started:
                text = text.lstrip()
                self._started = bool(text)
            ids = self._tokens.push(text) if text else []
            if ids:
                self._feed(self.id, ids, False)

    def finish(self) -> None:
        """The text is complete (idempotent); an empty text ends the request with an error."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
            self._feed(self.id, self._tokens.finish(), True)

    def cancel(self) -> None:
        self.stream.cancel()
