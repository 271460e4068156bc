"""Per-request audio streams: what the scheduler thread hands to a caller, chunk by chunk.

The scheduler thread only ever calls `put`/`finish`/`fail` (never blocks); a caller reads
with plain iteration (a thread) or `async for` (an asyncio loop — chunks are handed over
with `call_soon_threadsafe`, so the loop never waits on a lock held across inference).
"""
from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import numpy as np


class EngineError(Exception):
    """A request could not be served; the message says why."""


class EngineBusy(EngineError):
    """The waiting queue is full: try again later."""


class RequestTimeout(EngineError):
    """The request ran past its deadline; its blocks are already free."""


class RequestAborted(EngineError):
    """The request was aborted (client gone, server stopping)."""


@dataclass(frozen=True)
class AudioChunk:
    """24 kHz mono float32 PCM of consecutive frames; `final` marks the stream's last chunk."""

    pcm: np.ndarray
    final: bool = False


@dataclass(frozen=True)
class StreamResult:
    """How a request ended, for logs and the benchmark."""

    reason: str  # "eos", "length" (frame cap), "timeout", "aborted", or an error message
    frames: int
    samples: int
    queued_s: float  # submit → admitted
    ttfa_s: float | None  # submit → first audio chunk (None: no audio)
    total_s: float  # submit → end
    codes: np.ndarray | None = None  # [frames, 16] generated codes (None if never admitted)


_END = object()


class AudioStream:
    """Iterator of AudioChunk for one request, ending after the final chunk or raising the
    request's error once the chunks before it have been read. Single consumer."""

    def __init__(self, request_id: int, cancel: Callable[[int], None]) -> None:
        self.id = request_id
        self._cancel = cancel
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._items: collections.deque = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._async: asyncio.Queue | None = None
        self.result: StreamResult | None = None
        self.error: EngineError | None = None
        self._abandoned = False  # the async reader's loop is gone: drop everything
        # time.monotonic() of what the engine did, as it happens: "queued" (prompt built),
        # "admitted" (prompt embedded, blocks reserved), "first_audio" (first PCM decoded)
        self.marks: dict[str, float] = {}
        self.frames = 0  # frames made so far, decoded or not (the scheduler's, after each step)
        self.text_tokens = 0  # text ids the sequence has been given so far
        self.chunk_frames = 1  # frames per codec chunk from here on (Batch.chunk_frames)
        self.rate_hint: float | None = None  # frames/s the engine expects to make for it (Batch.frame_rate)

    # --- producer side (scheduler thread) ---
    def _push(self, item: object) -> None:
        """Never raises: a consumer whose event loop has closed abandoned the stream, and the
        request is aborted (the engine thread must not die of a reader's mistake)."""
        with self._lock:
            if self._abandoned:
                return
            if self._async is None or self._loop is None:  # (both are set by __aiter__)
                self._items.append(item)
                self._ready.notify_all()
                return
            try:
                self._loop.call_soon_threadsafe(self._async.put_nowait, item)
                return
            except RuntimeError:  # the loop is closed
                self._abandoned = True
        if item is not _END and not isinstance(item, EngineError):
            self._cancel(self.id)

    def put(self, chunk: AudioChunk) -> None:
        self._push(chunk)

    def finish(self, result: StreamResult, error: EngineError | None = None) -> None:
        """End the stream: after the chunks already put, raise `error` or stop."""
        self.result, self.error = result, error
        self._push(error if error is not None else _END)

    @property
    def done(self) -> bool:
        return self.result is not None

    def cancel(self) -> None:
        """Abort the request (idempotent); the stream then ends with RequestAborted."""
        if not self.done:
            self._cancel(self.id)

    # --- consumer side ---
    def _deliver(self, item: object) -> AudioChunk:
        """The chunk, or the end (kept, so that reading again ends again)."""
        if item is _END or isinstance(item, EngineError):
            if self._async is not None:
                self._async.put_nowait(item)
            else:
                self._items.appendleft(item)
        if item is _END:
            raise StopIteration
        if isinstance(item, EngineError):
            raise item
        return item  # type: ignore[return-value]

    def __iter__(self) -> Iterator[AudioChunk]:
        return self

    def __next__(self) -> AudioChunk:
        return self.get(timeout=None)

    def get(self, timeout: float | None = None) -> AudioChunk:
        """Next chunk; raises StopIteration at the end, TimeoutError if none came in time."""
        with self._ready:
            if self._async is not None:
                raise RuntimeError("this stream is being read with async for")
            if not self._ready.wait_for(lambda: self._items, timeout):
                raise TimeoutError(f"no audio from request {self.id} within {timeout} s")
            item = self._items.popleft()
            return self._deliver(item)

    def __aiter__(self) -> AsyncIterator[AudioChunk]:
        with self._lock:
            if self._async is None:
                self._loop = asyncio.get_running_loop()
                self._async = asyncio.Queue()
                while self._items:
                    self._async.put_nowait(self._items.popleft())
        return self

    async def __anext__(self) -> AudioChunk:
        if self._async is None:
            raise RuntimeError("read this stream with async for")
        item = await self._async.get()
        try:
            return self._deliver(item)
        except StopIteration:
            raise StopAsyncIteration from None

    def read_all(self, timeout: float | None = None) -> np.ndarray:
        """Every chunk concatenated (blocking); raises the request's error."""
        parts = []
        while True:
            try:
                parts.append(self.get(timeout).pcm)
            except StopIteration:
                return np.concatenate(parts) if parts else np.zeros(0, np.float32)
