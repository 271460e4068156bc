"""The LLM-pace benchmark (qwen3tts_tools.bench.llm_pace): its underrun count on synthetic
arrival times, the tokens and their pacing, the CPU lock, and a quick run against the tiny
model's server in both feeding modes."""
from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from qwen3tts_tools.bench import llm_pace
from qwen3tts_tools.bench.llm_pace import PACINGS, TEXTS, Measurement, Timeline, gap_list, llm_tokens
from qwen3tts_tools.bench.process import cpu_lock


def underruns(arrivals: list[tuple[float, float]]) -> tuple[int, float]:
    """(number of gaps, their total seconds) of gap_list(arrivals), as a Measurement counts them."""
    gaps = gap_list(arrivals)
    return len(gaps), sum(s for _, s in gaps)


def test_underruns_on_synthetic_timings():
    assert underruns([]) == (0, 0.0)
    assert underruns([(0.3, 0.08)]) == (0, 0.0)
    # chunks ahead of playback: never dry
    assert underruns([(0.2, 0.1), (0.25, 0.1), (0.3, 0.1), (0.35, 0.5)]) == (0, 0.0)
    # a chunk arriving exactly as the audio before it ends is on time
    assert underruns([(0.0, 0.5), (0.5, 0.5)]) == (0, 0.0)
    # 80 ms first chunk, the next 420 ms after it ran out; the third arrives while the second plays
    gaps, silent = underruns([(0.0, 0.08), (0.5, 0.64), (1.0, 0.64)])
    assert gaps == 1 and silent == pytest.approx(0.42)
    # a gap moves the playback clock: later chunks are judged against the later end
    arrivals = [(1.0, 0.2), (1.5, 0.2), (1.6, 0.1), (2.5, 0.1), (2.55, 0.1)]
    found = gap_list(arrivals)
    assert [a for a, _ in found] == pytest.approx([0.2, 0.5])  # audio played before each gap
    assert [s for _, s in found] == pytest.approx([0.3, 0.7])
    assert underruns(arrivals) == (2, pytest.approx(1.0))


def test_a_measurement_from_a_timeline():
    timeline = Timeline(arrivals=[(0.25, 0.08), (0.6, 0.32), (0.7, 0.32)], text_s=1.5, stopped_s=2.0)
    m = Measurement.of("word", "20/s", "short", 0, timeline)
    assert m.ok and m.ttfa_s == 0.25 and m.chunks == 3 and m.total_s == 2.0
    assert m.audio_s == pytest.approx(0.72) and m.gaps == 1 and m.gap_s == pytest.approx(0.27)
    assert m.played_s == pytest.approx(0.25 + 0.72 + 0.27)
    assert not Measurement.of("word", "20/s", "short", 0, Timeline(stopped_s=1.0)).ok  # no audio
    row = llm_pace.summarize([m, m], ["word"], ["20/s"], ["short"])[0]
    assert row["ok"] == 2 and row["ttfa_ms"] == pytest.approx(250) and row["gaps"] == 1
    assert row["longest_gap_ms"] == pytest.approx(270)


def test_tokens_and_pacing():
    for text in TEXTS.values():
        tokens = llm_tokens(text)
        assert "".join(tokens) == text
        assert all(len(t.strip()) <= llm_pace.TOKEN_CHARS for t in tokens)
        assert 3.5 <= len(text) / len(tokens) <= 4.5  # an LLM's ~4 characters per token
    assert llm_tokens("The thermostat, 21 degrees.") == ["The", " therm", "ostat", ",", " 21", " degr", "ees", "."]
    assert len(TEXTS["long"].split()) == 30 and TEXTS["answer"].count(".") == 3
    assert PACINGS["50/s"].offsets(3) == pytest.approx([0.0, 0.02, 0.04])
    stall = PACINGS["stall"].offsets(20)
    assert stall[7] == pytest.approx(0.35) and stall[8] == pytest.approx(2.4)  # 2 s after the first 8 tokens
    assert PACINGS["stall"].offsets(6)[3] == pytest.approx(2.15)  # a short reply: halfway


def test_a_request_is_made_again_while_others_are_busy(monkeypatch):
    """Others take 50 % of the CPU during the first two attempts: the third is kept."""
    shares = iter([(0.5, 0.0), (0.4, 0.1), (0.02, 0.01)])

    class Busy(llm_pace.Others):
        def since(self, mark):
            return next(shares)

        async def quiet(self, max_share, timeout, window_s=2.0):
            return True

    async def fake_request(*args, **kwargs):
        return Timeline(arrivals=[(0.2, 1.0)], text_s=0.3, stopped_s=1.5)

    monkeypatch.setattr(llm_pace, "paced_request", fake_request)
    args = llm_pace.parse_args(["--model", "x", "--max-busy", "0.1", "--retries", "5"])
    m = asyncio.run(llm_pace.measure_one(1, "word", "20/s", "short", 0, args, Busy([])))
    assert m.attempts == 3 and (m.others, m.steal) == (0.02, 0.01) and m.ttfa_s == 0.2
    shares = iter([(0.5, 0.0), (0.5, 0.0)])
    args = llm_pace.parse_args(["--model", "x", "--max-busy", "0.1", "--retries", "1"])
    m = asyncio.run(llm_pace.measure_one(1, "word", "20/s", "short", 0, args, Busy([])))
    assert m.attempts == 2 and m.others == 0.5  # out of retries: kept, and counted as busy


def test_the_cpu_lock_is_exclusive_and_not_inherited(tmp_path: Path):
    lock = tmp_path / "cpu.lock"
    lock.touch()
    with cpu_lock(lock) as held:
        assert held
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
        assert any(os.path.realpath(f"/proc/self/fd/{fd}") == str(lock) and not os.get_inheritable(fd)
                   for fd in fds if os.path.exists(f"/proc/self/fd/{fd}"))
        with pytest.raises(TimeoutError):
            with cpu_lock(lock, timeout=0.0):
                pass
    with cpu_lock(lock, timeout=0.0) as held:  # released
        assert held
    with cpu_lock(tmp_path / "missing.lock") as held:
        assert not held


def test_a_quick_run_against_the_tiny_model(converted_factory, tmp_path: Path):
    model = converted_factory("tiny", "custom_voice", "int8")
    out, md = tmp_path / "llm-pace.json", tmp_path / "llm-pace.md"
    code = llm_pace.main(["--model", str(model), "--modes", "word,sentence", "--pacings", "50/s", "--texts", "short",
                          "--runs", "1", "--warmup", "0", "--precision", "f32", "--work-dir", str(tmp_path / "work"),
                          "--cpu-lock", str(tmp_path / "no.lock"), "--ready-timeout", "300", "--event-timeout", "60",
                          "--max-busy", "1",
                          "-o", str(out), "--markdown", str(md)])
    logs = "\n".join(p.read_text()[-2000:] for p in (tmp_path / "work").glob("server-*.log"))
    assert code == 0, logs
    result = json.loads(out.read_text())
    assert {"machine", "versions", "rows", "measurements", "contention", "texts"} <= set(result)
    assert result["machine"]["cores"] >= 1 and result["texts"]["short"]["tokens"] == len(llm_tokens(TEXTS["short"]))
    rows = result["rows"]
    assert [(r["mode"], r["pacing"], r["text"]) for r in rows] == [("word", "50/s", "short"),
                                                                    ("sentence", "50/s", "short")]
    for r in rows:
        assert r["ok"] == r["runs"] == 1
        assert 0 < r["ttfa_ms"] < r["total_s"] * 1000
        assert r["audio_s"] > 0 and r["gaps"] >= 0 and r["gap_ms"] >= 0 and r["total_s"] >= r["text_s"]
    for m in result["measurements"]:
        assert m["error"] is None and m["chunks"] > 0 and len(m["gaps_at"]) == m["gaps"]
    contention = result["contention"]
    assert contention["server_exit_codes"] == {"word": 0, "sentence": 0} and contention["cpu_lock"] is False
    assert contention["repeated"] == 0 and all(m["attempts"] == 1 for m in result["measurements"])
    text = md.read_text()
    assert "| short | 50/s |" in text and "| sentence, holdback 0 | 50/s | short | 1/1 |" in text
    assert "| word, holdback 0.5 s | 50/s | short | 1/1 |" in text
