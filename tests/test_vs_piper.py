"""vs_piper's parsing of wyoming-bench's verbose output and its report, on a canned output
(no network, no servers)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from qwen3tts_tools.bench import vs_piper

TEXTS = ["Short one.", "A longer sentence here."]

CANNED = """\
wyoming-bench 2026.10.0 (tts)
servers: ['127.0.0.1:5001', '127.0.0.1:5002']
modes:   ['non_streaming', 'streaming']

capabilities (advertised):
  127.0.0.1:5001
    qwen3tts - non-streaming, streaming
  127.0.0.1:5002
    piper - non-streaming, streaming

=== 127.0.0.1:5001 (qwen3tts) ===
[warmup:non_streaming] ok
[non_streaming] r0 sent=1 ttft=100ms total=1000ms audio=2.00s bytes=96000 cycles=1
[non_streaming] r0 sent=1 ttft=300ms total=4000ms audio=4.00s bytes=192000 cycles=1
[non_streaming] r1 sent=1 ttft=200ms total=1200ms audio=2.00s bytes=96000 cycles=1
[non_streaming] r1 FAIL: timed out
[warmup:streaming] ok
[streaming] r0 sent=1 ttft=90ms total=900ms audio=2.00s bytes=96000 cycles=1
[streaming] r0 sent=1 ttft=250ms total=3000ms audio=4.00s bytes=192000 cycles=1

Server: 127.0.0.1:5001 (qwen3tts)
------------------------------------------------------------------------------
[non_streaming] ok=3 fail=1
  metric             min      mean    median       p95       max
  TTFT (ms)        100.0     200.0     200.0     290.0     300.0
  Total (ms)      1000.0    2066.7    1200.0    3720.0    4000.0
  RTF (x)           0.50      0.73      0.60      0.98      1.00
  Audio        mean=2.67s (2667 ms), 128000 bytes

=== 127.0.0.1:5002 (piper) ===
[non_streaming] r0 sent=1 ttft=50ms total=60ms audio=2.10s bytes=96000 cycles=1
[non_streaming] r0 sent=1 ttft=70ms total=90ms audio=4.10s bytes=192000 cycles=1
  [streaming] NOT SUPPORTED by 127.0.0.1:5002 (not advertised by server); skipping streaming mode

Server: 127.0.0.1:5002 (piper)
------------------------------------------------------------------------------
[non_streaming] ok=2 fail=0
  metric             min      mean    median       p95       max
  TTFT (ms)         50.0      60.0      60.0       n/a      70.0
"""


@pytest.fixture
def parsed() -> dict:
    return vs_piper.parse_bench_output(CANNED, TEXTS)


def test_measurements_are_assigned_to_texts_in_order(parsed: dict) -> None:
    ours = parsed["127.0.0.1:5001 (qwen3tts)"]["measurements"]
    assert [(m["mode"], m["text"], m["ok"]) for m in ours] == [
        ("non_streaming", TEXTS[0], True), ("non_streaming", TEXTS[1], True),
        ("non_streaming", TEXTS[0], True), ("non_streaming", TEXTS[1], False),
        ("streaming", TEXTS[0], True), ("streaming", TEXTS[1], True)]
    assert ours[1]["ttft_ms"] == 300.0 and ours[1]["total_ms"] == 4000.0 and ours[1]["audio_s"] == 4.0
    assert ours[3]["error"] == "timed out"


def test_wyoming_bench_summary_is_kept(parsed: dict) -> None:
    summary = parsed["127.0.0.1:5001 (qwen3tts)"]["summary"]["non_streaming"]
    assert summary["ok"] == 3 and summary["fail"] == 1
    assert summary["ttft_ms"]["median"] == 200.0 and summary["ttft_ms"]["p95"] == 290.0
    assert summary["rtf"]["max"] == 1.0
    assert parsed["127.0.0.1:5002 (piper)"]["summary"]["non_streaming"]["ttft_ms"]["p95"] is None


def test_rows_per_server_text_and_mode(parsed: dict) -> None:
    rows = vs_piper.summarize(parsed, {"short": TEXTS[0], "long": TEXTS[1]})
    by_key = {(r["server"].split()[1], r["text"], r["mode"]): r for r in rows}
    assert len(rows) == 6  # piper has no streaming rows
    short = by_key[("(qwen3tts)", "short", "non_streaming")]
    assert short["ok"] == 2 and short["fail"] == 0
    assert short["ttft_median_ms"] == 150.0
    assert short["ttft_p95_ms"] == pytest.approx(195.0)
    assert short["rtf_median"] == pytest.approx(0.55)
    long = by_key[("(qwen3tts)", "long", "non_streaming")]
    assert long["ok"] == 1 and long["fail"] == 1 and long["ttft_p95_ms"] == 300.0
    assert by_key[("(piper)", "long", "non_streaming")]["rtf_median"] == pytest.approx(0.09 / 4.1)


def test_report_files(parsed: dict, tmp_path: Path) -> None:
    texts = {"short": TEXTS[0], "long": TEXTS[1]}
    names = vs_piper.server_names(parsed, {5001: "ours", 5002: "piper"})
    assert names == {"127.0.0.1:5001 (qwen3tts)": "ours", "127.0.0.1:5002 (piper)": "piper"}
    result = {"setup": "canned", "texts": texts, "runs": 2, "warmup": 1, "names": names,
              "rows": vs_piper.summarize(parsed, texts), "servers": parsed}
    md = vs_piper.write_report(tmp_path, result).read_text()
    assert "| ours | short | one-shot | 2/2 | 150 | 195 | 0.55 | 2.00 |" in md
    assert "| ours | long | one-shot | 1/2 | 300 | 300 | 1.00 | 4.00 |" in md
    assert "| piper | short | one-shot | 1/1 | 50 | 50 | 0.03 | 2.10 |" in md
    assert json.loads((tmp_path / "vs-piper.json").read_text())["rows"] == result["rows"]


def test_bench_command_wraps_only_wyoming_bench_in_flock(tmp_path: Path) -> None:
    cmd = vs_piper.bench_command(tmp_path / "bin" / "python", [5001, 5002], TEXTS, 3, 1)
    bench = cmd.index(str(tmp_path / "bin" / "wyoming-bench"))
    assert cmd[:bench] in ([], ["flock", str(vs_piper.CPU_LOCK)])
    assert cmd[bench + 1:bench + 4] == ["tts", "127.0.0.1:5001", "127.0.0.1:5002"]
    assert cmd[cmd.index("--texts") + 1:cmd.index("--texts") + 3] == TEXTS
    assert "-v" in cmd and "--no-unique" in cmd


def test_a_server_label_names_the_model_it_serves() -> None:
    assert vs_piper.our_label(Path("/m/0.6b-int4"), 2, []) == "wyoming-qwen3tts (0.6b-int4, --threads 2)"
    assert vs_piper.our_label(Path("/m/0.6b-int4"), 2, ["--holdback", "0"]) == \
        "wyoming-qwen3tts (0.6b-int4, --threads 2 --holdback 0)"
    assert vs_piper.our_label(Path("/m/0.6b-int4"), 2, ["--model", "/m/0.6b-int8", "--holdback", "0"]) == \
        "wyoming-qwen3tts (0.6b-int8, --threads 2 --holdback 0)"
