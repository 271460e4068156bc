"""The soak (qwen3tts_tools.bench.soak) at a tiny scale, and its checks shown able to fail:
a fake server whose responses never end or end badly, a log with blocks missing, RSS growth."""
from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, async_read_event, async_write_event

from qwen3tts_tools.bench import soak_report
from qwen3tts_tools.bench.soak import SoakOptions, run
from qwen3tts_tools.bench.soak_client import (
    FRAMING,
    HANG,
    KINDS,
    OK,
    UNENDED,
    WRONG_ERROR,
    Limits,
    RequestSpec,
    Result,
    check_response,
    plan,
    run_request,
)
from qwen3tts_tools.bench.soak_server import EngineLog

START = AudioStart(rate=24000, width=2, channels=1).event()
CHUNK = AudioChunk(rate=24000, width=2, channels=1, audio=b"\0\0" * 100).event()
STOP = AudioStop().event()


def ev(kind: str) -> Event:
    return {"start": START, "chunk": CHUNK, "stop": STOP, "stopped": Event("synthesize-stopped"),
            "info": Event("info", {}), "voice": Error(text="unknown voice", code="VoiceNotFound").event()}[kind]


def test_check_response_framing():
    ok = [ev("start"), ev("chunk"), ev("stop")]
    assert check_response(ok, False, want_audio=True)[0] == OK
    assert check_response(ok + [ev("stopped")], True, want_audio=True)[0] == OK
    assert check_response([ev("start"), ev("stop")], False, want_audio=True)[0] == FRAMING  # no audio
    assert check_response([ev("chunk"), ev("start"), ev("stop")], False)[0] == FRAMING
    assert check_response([ev("start"), ev("chunk"), ev("info"), ev("stop")], False, want_audio=True)[0] == FRAMING
    assert check_response([ev("start"), ev("chunk"), ev("info"), ev("stop")], False, want_audio=True, infos=1)[0] == OK
    # a one-shot error must still end with the audio framing a one-shot reader waits for
    assert check_response([ev("voice"), ev("start"), ev("stop")], False, "VoiceNotFound")[0] == OK
    assert check_response([ev("voice"), ev("stop")], False, "VoiceNotFound")[0] == FRAMING
    assert check_response([ev("voice"), ev("start"), ev("stop")], False, "TextTooLong")[0] == WRONG_ERROR
    assert check_response([ev("voice"), ev("stopped")], True, "VoiceNotFound")[0] == OK


def test_plan_covers_every_kind_in_its_share():
    specs = plan(1000, 0, ["a", "b"], 100)
    assert len(specs) == 1000 and {s.kind for s in specs} == set(KINDS)
    assert sum(s.kind == "oneshot" for s in specs) == KINDS["oneshot"] * 10
    assert all(len(s.text) > 100 for s in specs if s.kind == "too_long")
    assert plan(30, 0, ["a"], 100) == plan(30, 0, ["a"], 100)


@asynccontextmanager
async def fake_server(mode: str):
    """A Wyoming TTS server that answers a one-shot request per `mode`: ok, hang (audio-start
    and a chunk, then silence), close (audio-start, then hangs up), bare-error (an error and
    nothing more: what one-shot errors did before issue 16)."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await async_read_event(reader)
        replies = {"ok": [START, CHUNK, STOP], "hang": [START, CHUNK], "close": [START],
                   "bare-error": [ev("voice")]}[mode]
        for event in replies:
            await async_write_event(event, writer)
        if mode == "close":
            writer.close()
            return
        await asyncio.sleep(30)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


@pytest.mark.parametrize("mode,kind,status", [("ok", "oneshot", OK), ("hang", "oneshot", HANG),
                                              ("close", "oneshot", UNENDED), ("bare-error", "unknown_voice", HANG)])
def test_a_response_that_never_ends_is_reported(mode, kind, status):
    async def go() -> Result:
        async with fake_server(mode) as port:
            spec = RequestSpec(0, kind, "Hello.", "ryan", 0)
            return await asyncio.wait_for(run_request("127.0.0.1", port, spec, Limits(read_timeout=0.5)), 10)

    result = asyncio.run(go())
    assert result.status == status, result


def test_the_checks_fail_on_missing_blocks_and_growth(tmp_path: Path):
    log = tmp_path / "server.log"
    log.write_text("x DEBUG wyoming_qwen3tts.engine.scheduler: request 0 queued: 9 prompt tokens\n"
                   "x INFO wyoming_qwen3tts.engine.scheduler: request 0: length after 8 frames\n"
                   "x DEBUG wyoming_qwen3tts.engine.scheduler: engine idle: 100/100 KV blocks free\n"
                   "x DEBUG wyoming_qwen3tts.engine.scheduler: request 1 queued: 9 prompt tokens\n"
                   "x INFO wyoming_qwen3tts.engine.scheduler: request 1: aborted after 2 frames\n"
                   "x DEBUG wyoming_qwen3tts.engine.scheduler: engine idle: 96/100 KV blocks free\n")
    engine = EngineLog(log)
    engine.read()
    assert engine.idle_now and engine.leaks == [(96, 100)]
    flat, grown = {"start": 300.0, "peak": 320.0, "end": 310.0}, {"start": 300.0, "peak": 420.0, "end": 400.0}
    fds = {"start": 8, "peak": 14, "end": 8}
    tol = soak_report.Tolerances(rss_mb=64, rss_pct=10, fds=2)
    checks = {c.name: c for c in soak_report.checks([Result(0, "oneshot")], engine, flat, fds, tol, 0, True)}
    assert not checks["KV blocks return"].passed and checks["RSS flat"].passed and checks["fds flat"].passed
    checks = {c.name: c for c in soak_report.checks([], engine, grown, {**fds, "end": 12}, tol, 0, True)}
    assert not checks["RSS flat"].passed and not checks["fds flat"].passed


def test_a_tiny_soak_passes(converted_factory, tmp_path):
    options = SoakOptions(converted_factory("tiny", "custom_voice", "int8"), requests=30, clients=3, warmup=6,
                          phases=2, max_frames=8, read_timeout=30, startup_timeout=120, work_dir=tmp_path)
    result = run(options)
    report = result.report
    failed = [c for c in report["checks"] if not c["passed"]]
    assert report["passed"], (failed, report["failures"], result.log_path.read_text()[-3000:])
    assert report["requests"] == 30 and report["statuses"] == {"ok": 30}
    assert report["kv_blocks"]["free_end"] == report["kv_blocks"]["total"] > 0
    assert len(report["idle_samples"]) == 3 and report["engine"]["reasons"].get("aborted", 0) > 0
    soak_report.write(tmp_path / "soak", "tiny", report)
    assert "| oneshot |" in (tmp_path / "soak.md").read_text()
