"""The soak's clients: a mixed workload of Wyoming requests, every read bounded.

Each request opens its own connection (as Home Assistant does) and is one of KINDS. A
response is read until the event that ends it (`audio-stop` for one-shot, `synthesize-stopped`
for streaming), with a bound on the silence before each event and on the whole response; a
bound that runs out is a *hang*, a connection closed before the end is *unended*. The events
read are then checked against the framing every response must have (`check_response`).
"""
from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, async_read_event, async_write_event
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped

# kind -> share of the workload (percent)
KINDS: dict[str, int] = {
    "oneshot": 26,  # one-shot synthesize: audio-start, chunks, audio-stop
    # synthesize-start / text in pieces / compat synthesize / synthesize-stop; half ask describe mid-audio
    "stream": 22,
    "cancel": 10,  # streaming, the client leaves after the first audio (reset or close), before its stop
    "disconnect": 8,  # one-shot, the client leaves at once or after audio-start
    "pipelined": 6,  # two one-shots on one connection, answered in order
    "describe": 10,  # describe -> info with voices
    "unknown_voice": 5,  # one-shot, VoiceNotFound: error, then audio-start/audio-stop
    "too_long": 4,  # one-shot over server.max_text_chars, TextTooLong: error, then audio-start/audio-stop
    "stream_error": 4,  # streaming with an unknown voice: error, then synthesize-stopped
    "empty": 5,  # one-shot with nothing speakable: a short silence, framed as any audio
}
EXPECTED_ERROR = {"unknown_voice": "VoiceNotFound", "too_long": "TextTooLong", "stream_error": "VoiceNotFound"}
WANTS_AUDIO = {"oneshot", "stream", "pipelined", "empty"}

OK, HANG, UNENDED, FRAMING, UNEXPECTED_ERROR, WRONG_ERROR, BUSY = (
    "ok", "hang", "unended", "framing", "unexpected_error", "wrong_error", "busy")
FAILED = {HANG, UNENDED, FRAMING, UNEXPECTED_ERROR, WRONG_ERROR}  # statuses that fail the soak (busy is reported)

SENTENCES = (
    "The kitchen lights are now on.", "It is twenty one degrees in the living room.",
    "Your timer for the pasta has finished.", "Tomorrow will be cloudy with a chance of rain.",
    "The front door is locked.", "I have added milk to the shopping list.",
    "Good morning, the coffee machine is warming up.", "The garage door has been open for ten minutes.",
    "Playing the news on the bedroom speaker.", "The washing machine is done.",
)
NOTHING_SPEAKABLE = ("🙂", "...", "!!!", "🎉 🎉")
UNKNOWN_VOICE = "no-such-voice-soak"
INFO, AUDIO_START, AUDIO_CHUNK, AUDIO_STOP, STOPPED = "info", "audio-start", "audio-chunk", "audio-stop", \
    "synthesize-stopped"


@dataclass(frozen=True)
class RequestSpec:
    index: int
    kind: str
    text: str
    voice: str | None
    variant: int  # which variation of its kind (how a client leaves, whether it asks describe mid-stream)


@dataclass
class Result:
    index: int
    kind: str
    status: str = OK
    detail: str = ""
    events: list[str] = field(default_factory=list)  # event types read, in order
    error_code: str | None = None
    latency_s: float | None = None  # first write -> the event that ended the response
    first_audio_s: float | None = None
    audio_bytes: int = 0
    client: int = -1


@dataclass(frozen=True)
class Limits:
    read_timeout: float = 60.0  # silence before any one event
    response_timeout: float = 600.0  # a whole response
    connect_timeout: float = 10.0
    max_text_chars: int = 1000  # the server's server.max_text_chars (too_long sends more)


class Hang(Exception):
    """A bounded read ran out."""


class Closed(Exception):
    """The server closed the connection before the response ended."""


def plan(requests: int, seed: int, voices: list[str], max_text_chars: int,
         kinds: tuple[str, ...] | None = None) -> list[RequestSpec]:
    """`requests` specs in the shares of KINDS (largest remainder; only `kinds` if given),
    shuffled by `seed`."""
    shares = {k: w for k, w in KINDS.items() if kinds is None or k in kinds}
    total = sum(shares.values())
    exact = {k: requests * w / total for k, w in shares.items()}
    counts = {k: int(v) for k, v in exact.items()}
    for k in sorted(exact, key=lambda k: exact[k] - counts[k], reverse=True)[:requests - sum(counts.values())]:
        counts[k] += 1
    rng = random.Random(seed)
    order = [k for k, n in counts.items() for _ in range(n)]
    rng.shuffle(order)
    specs = []
    for i, kind in enumerate(order):
        sentences = rng.sample(SENTENCES, {"oneshot": rng.randint(1, 2), "pipelined": 1, "cancel": 3}.get(kind, 2))
        text = " ".join(sentences)
        if kind == "empty":
            text = rng.choice(NOTHING_SPEAKABLE)
        elif kind == "too_long":
            text = (" ".join(SENTENCES) + " ") * (max_text_chars // len(" ".join(SENTENCES)) + 2)
        voice = UNKNOWN_VOICE if kind in ("unknown_voice", "stream_error") else voices[i % len(voices)]
        specs.append(RequestSpec(i, kind, text, voice, rng.randrange(2)))
    return specs


def check_response(events: list[Event], streaming: bool, expect_error: str | None = None,
                   want_audio: bool = False, infos: int = 0) -> tuple[str, str, str | None]:
    """(status, detail, error code) of one complete response's events, `info` replies to a
    describe sent meanwhile included. The framing every response must have: at most one
    audio-start, chunks only inside start..stop, one-shot ending with audio-stop (errors
    too: the error, then audio-start/audio-stop), streaming ending with synthesize-stopped."""
    types = [e.type for e in events]
    got_infos = types.count(INFO)
    types = [t for t in types if t != INFO]
    errors = [Error.from_event(e) for e in events if Error.is_type(e.type)]
    code = errors[0].code if errors else None
    end = STOPPED if streaming else AUDIO_STOP
    start_t, stop_t, chunk_t = AUDIO_START, AUDIO_STOP, AUDIO_CHUNK
    problems = []
    if not types or types[-1] != end:
        problems.append(f"does not end with {end}")
    if types.count(end) != 1:
        problems.append(f"{types.count(end)} × {end}")
    starts, stops = types.count(start_t), types.count(stop_t)
    if starts > 1 or stops > 1 or starts != stops:
        problems.append(f"{starts} audio-start, {stops} audio-stop")
    elif starts:
        first, last = types.index(start_t), types.index(stop_t)
        if any(t == chunk_t and not first < i < last for i, t in enumerate(types)):
            problems.append("audio-chunk outside audio-start..audio-stop")
        if streaming and last != len(types) - 2:
            problems.append("audio-stop is not right before synthesize-stopped")
    elif chunk_t in types:
        problems.append("audio-chunk without audio-start")
    if not streaming and not starts:
        problems.append("no audio framing (a one-shot reader waits for audio-stop)")
    if len(errors) > 1:
        problems.append(f"{len(errors)} error events")
    if got_infos != infos:
        problems.append(f"{got_infos} info events for {infos} describe")
    if problems:
        return FRAMING, "; ".join(problems) + f" [{' '.join(types[:12])}{' ...' if len(types) > 12 else ''}]", code
    if expect_error is not None:
        if code is None:
            return WRONG_ERROR, f"no error, {expect_error} expected", None
        if code != expect_error:
            return WRONG_ERROR, f"{code} ({errors[0].text}), {expect_error} expected", code
        return OK, "", code
    if errors:
        return (BUSY if code == "Busy" else UNEXPECTED_ERROR), f"{code}: {errors[0].text}", code
    if want_audio and chunk_t not in types:
        return FRAMING, "no audio-chunk", None
    return OK, "", None


class Connection:
    """One client connection: serialised writes, bounded reads."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limits: Limits) -> None:
        self.reader, self.writer, self.limits = reader, writer, limits
        self._lock = asyncio.Lock()
        self._deadline = time.monotonic() + limits.response_timeout

    @classmethod
    async def open(cls, host: str, port: int, limits: Limits) -> Connection:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), limits.connect_timeout)
        return cls(reader, writer, limits)

    async def send(self, event: Event) -> None:
        async with self._lock:
            await asyncio.wait_for(async_write_event(event, self.writer), self.limits.read_timeout)

    async def read(self) -> Event:
        timeout = min(self.limits.read_timeout, self._deadline - time.monotonic())
        try:
            event = await asyncio.wait_for(async_read_event(self.reader), max(timeout, 0.0))
        except asyncio.TimeoutError:
            raise Hang(f"no event for {timeout:.0f} s") from None
        except (ConnectionError, asyncio.IncompleteReadError) as e:
            raise Closed(f"connection lost ({type(e).__name__})") from None
        if event is None:
            raise Closed("the server closed the connection")
        return event

    def abort(self) -> None:
        """Leave abruptly (a reset)."""
        self.writer.transport.abort()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.wait_closed(), 5.0)


def _with_voice(event: Event, voice: str | None) -> Event:
    if voice is not None:
        event.data["voice"] = {"name": voice}
    return event


def _pieces(text: str, size: int = 9) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


async def read_response(conn: Connection, result: Result, started: float, streaming: bool,
                        on_first_audio: Callable[[], Awaitable[None]] | None = None) -> list[Event]:
    """Events up to the one that ends the response (raises Hang or Closed)."""
    end = SynthesizeStopped if streaming else AudioStop
    events: list[Event] = []
    while True:
        event = await conn.read()
        events.append(event)
        result.events.append(event.type)
        if AudioChunk.is_type(event.type):
            result.audio_bytes += len(event.payload or b"")
            if result.first_audio_s is None:
                result.first_audio_s = time.monotonic() - started
                if on_first_audio is not None:
                    await on_first_audio()
        if end.is_type(event.type):
            result.latency_s = time.monotonic() - started
            return events


async def _one_shot(conn: Connection, spec: RequestSpec, result: Result) -> None:
    started = time.monotonic()
    await conn.send(_with_voice(Synthesize(text=spec.text).event(), spec.voice))
    events = await read_response(conn, result, started, streaming=False)
    result.status, result.detail, result.error_code = check_response(
        events, False, EXPECTED_ERROR.get(spec.kind), spec.kind in WANTS_AUDIO)


async def _pipelined(conn: Connection, spec: RequestSpec, result: Result) -> None:
    started = time.monotonic()
    for _ in range(2):
        await conn.send(_with_voice(Synthesize(text=spec.text).event(), spec.voice))
    for n in range(2):
        events = await read_response(conn, result, started, streaming=False)
        status, detail, code = check_response(events, False, want_audio=True)
        if status != OK:
            result.status, result.detail, result.error_code = status, f"response {n + 1}: {detail}", code
            return


async def _send_stream(conn: Connection, spec: RequestSpec, stop: bool = True) -> None:
    await conn.send(_with_voice(SynthesizeStart().event(), spec.voice))
    for piece in _pieces(spec.text):
        await conn.send(SynthesizeChunk(text=piece).event())
        await asyncio.sleep(0.002)
    if stop:
        await conn.send(_with_voice(Synthesize(text=spec.text).event(), spec.voice))
        await conn.send(SynthesizeStop().event())


async def _stream(conn: Connection, spec: RequestSpec, result: Result) -> None:
    started = time.monotonic()
    asks = spec.kind == "stream" and spec.variant == 0

    async def describe() -> None:
        if asks:
            await conn.send(Describe().event())

    writer = asyncio.create_task(_send_stream(conn, spec))
    try:
        events = await read_response(conn, result, started, streaming=True, on_first_audio=describe)
        while asks and result.first_audio_s is not None and INFO not in result.events:
            events.append(await conn.read())  # the info may follow the end of a short response
            result.events.append(events[-1].type)
        await writer  # the stop was sent, or the response could not have ended
    finally:
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)
    result.status, result.detail, result.error_code = check_response(
        events, True, EXPECTED_ERROR.get(spec.kind), spec.kind in WANTS_AUDIO, infos=int(asks))


async def _cancel(conn: Connection, spec: RequestSpec, result: Result) -> None:
    """Text of a few sentences without its stop (a reply still being written); leave at the first audio."""
    started = time.monotonic()
    await _send_stream(conn, spec, stop=False)
    while result.first_audio_s is None:
        event = await conn.read()
        result.events.append(event.type)
        if AudioChunk.is_type(event.type):
            result.first_audio_s = result.latency_s = time.monotonic() - started
        elif not AudioStart.is_type(event.type):
            result.status, result.detail = FRAMING, f"{event.type} before the first audio"
            if Error.is_type(event.type):
                err = Error.from_event(event)
                result.status, result.detail, result.error_code = UNEXPECTED_ERROR, f"{err.code}: {err.text}", err.code
            return
    if spec.variant == 0:
        conn.abort()


async def _disconnect(conn: Connection, spec: RequestSpec, result: Result) -> None:
    """One-shot, then leave at once (close) or after audio-start (reset)."""
    started = time.monotonic()
    await conn.send(_with_voice(Synthesize(text=spec.text).event(), spec.voice))
    if spec.variant == 1:
        event = await conn.read()
        result.events.append(event.type)
        if not AudioStart.is_type(event.type):
            result.status, result.detail = FRAMING, f"{event.type} first, audio-start expected"
        conn.abort()
    result.latency_s = time.monotonic() - started


async def _describe(conn: Connection, spec: RequestSpec, result: Result) -> None:
    started = time.monotonic()
    await conn.send(Describe().event())
    event = await conn.read()
    result.events.append(event.type)
    result.latency_s = time.monotonic() - started
    if not Info.is_type(event.type):
        result.status, result.detail = FRAMING, f"{event.type} in reply to describe"
    elif not any(p.voices for p in Info.from_event(event).tts):
        result.status, result.detail = FRAMING, "info without voices"


RUNNERS = {"oneshot": _one_shot, "unknown_voice": _one_shot, "too_long": _one_shot, "empty": _one_shot,
           "stream": _stream, "stream_error": _stream, "cancel": _cancel, "disconnect": _disconnect,
           "pipelined": _pipelined, "describe": _describe}


async def run_request(host: str, port: int, spec: RequestSpec, limits: Limits, client: int = -1) -> Result:
    """One request on its own connection; never raises, never waits beyond `limits`."""
    result = Result(spec.index, spec.kind, client=client)
    try:
        conn = await Connection.open(host, port, limits)
    except (OSError, asyncio.TimeoutError) as e:
        result.status, result.detail = UNENDED, f"cannot connect: {e!r}"
        return result
    try:
        await asyncio.wait_for(RUNNERS[spec.kind](conn, spec, result), limits.response_timeout + 5.0)
    except (Hang, asyncio.TimeoutError) as e:
        result.status, result.detail = HANG, f"{e or 'response timeout'} after [{' '.join(result.events[-8:])}]"
    except Closed as e:
        result.status, result.detail = UNENDED, f"{e} after [{' '.join(result.events[-8:])}]"
    except (ConnectionError, OSError) as e:
        result.status, result.detail = UNENDED, f"{type(e).__name__}: {e}"
    finally:
        await conn.close()
    return result


async def run_clients(host: str, port: int, specs: list[RequestSpec], clients: int, limits: Limits,
                      on_result: Callable[[Result], None] | None = None) -> list[Result]:
    """`clients` concurrent workers taking specs in order; results in spec order."""
    queue: asyncio.Queue[RequestSpec] = asyncio.Queue()
    for spec in specs:
        queue.put_nowait(spec)
    results: list[Result] = []

    async def worker(n: int) -> None:
        while not queue.empty():
            result = await run_request(host, port, queue.get_nowait(), limits, n)
            results.append(result)
            if on_result is not None:
                on_result(result)

    await asyncio.gather(*(worker(n) for n in range(clients)))
    return sorted(results, key=lambda r: r.index)
