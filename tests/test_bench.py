"""qwen3tts-bench end to end on a tiny checkpoint: ours and the official implementation side
by side, the bandwidth bound, and JSON / markdown / PNG written. No timing assertions: speed
goals live in the benchmark's output, not in tests."""
from __future__ import annotations

import json
import numbers

import matplotlib  # noqa: F401  (the bench extra: fails loudly when missing)
import pytest

import oracle  # noqa: F401  (the official implementation must be importable)
from wyoming_qwen3tts.bench.cli import main, parse_args, prepare

FRAMES = 10
STREAMS = [1, 2]
SPREAD = {"median", "min", "max", "n"}


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("bench-work")


def test_prepare_makes_the_models_once(work_dir):
    args = parse_args(["--preset", "tiny", "--work-dir", str(work_dir)])
    checkpoint, converted = prepare(args)
    assert (checkpoint / "config.json").is_file() and (converted / "manifest.json").is_file()
    stamp = (converted / "manifest.json").stat().st_mtime_ns
    assert prepare(args) == (checkpoint, converted)
    assert (converted / "manifest.json").stat().st_mtime_ns == stamp  # reused, not converted again
    assert not list(work_dir.glob("*.partial-*"))


def _spread(value: dict) -> None:
    assert set(value) == SPREAD
    assert value["min"] <= value["median"] <= value["max"] and value["n"] >= 1


def test_bench_writes_every_figure(work_dir, tmp_path):
    out = tmp_path / "results"
    assert main(["--preset", "tiny", "--work-dir", str(work_dir), "-o", str(out), "--frames", str(FRAMES),
                 "--runs", "2", "--streams", ",".join(map(str, STREAMS)), "--probe-frames", "2",
                 "--bandwidth-mb", "32"]) == 0
    assert (out / "bench-tiny.png").read_bytes().startswith(b"\x89PNG")
    text = (out / "bench-tiny.md").read_text()
    for heading in ("## One stream", "## Concurrent streams", "## The limit", "## Biggest costs"):
        assert heading in text
    report = json.loads((out / "bench-tiny.json").read_text())

    for share in ("other_cpu_share", "steal_share"):
        assert isinstance(report[share], float) and report[share] >= 0
    assert report["machine"]["cores"] >= 1 and report["versions"]["openvino"] and report["versions"]["torch"]
    assert report["workload"]["frames"] == FRAMES
    for threads in ("1", "2"):
        _spread(report["bandwidth"]["gb_per_s"][threads])

    ours = report["ours"]
    assert [level["streams"] for level in ours["levels"]] == STREAMS
    assert ours["peak_rss_mb"] > 0 and ours["prompt_tokens"] > 0 and ours["blocks_total"] > 0
    for level in ours["levels"]:
        for key in ("aggregate_fps", "ttfa_p50_s", "ttfa_p90_s", "rtf", "step_ms"):
            _spread(level[key])
        assert set(level["per_frame_ms"]) == {"talker", "subcode", "codec", "host", "total"}
        for spread in level["per_frame_ms"].values():
            _spread(spread)
        assert len(level["ttfa_s"]) == 2 * level["streams"] and all(t > 0 for t in level["ttfa_s"])
        assert 0 < level["blocks_used"] <= ours["blocks_total"]

    official = report["official"]
    assert official["dtype"] in ("float32", "bfloat16") and set(official["probe_fps"]) == {"float32", "bfloat16"}
    for key in ("ttff_s", "generate_fps", "e2e_fps", "rtf"):
        _spread(official[key])
    assert set(official["per_frame_ms"]) == {"talker", "subcode", "decoder"}
    assert [run["frames"] for run in official["runs"]] == [FRAMES, FRAMES]

    assert set(report["reads"]) == {"talker", "subcode", "codec"}
    assert report["reads"]["subcode"]["weight_elements"] > report["reads"]["talker"]["weight_elements"]  # 15 steps
    assert set(report["mb_per_frame"]["talker"]) == {"int8", "fp16", "fp32"}
    assert set(report["mb_per_frame"]["codec"]) == {"fp16", "fp32"}
    bound = report["bound"]
    for key in ("mb_per_frame", "bound_ms", "measured_ms", "ratio"):
        assert set(bound[key]) == {"talker", "subcode", "codec", "total"}
        assert all(isinstance(v, numbers.Real) and v > 0 for v in bound[key].values())
    assert set(report["ratios"]) == {"frames_per_s", "frames_per_s_vs_official_generation_only",
                                     "first_audio_vs_official_first_frame", "best_throughput", "peak_rss"}
    assert all(isinstance(v, numbers.Real) and v > 0 for v in report["ratios"].values())
