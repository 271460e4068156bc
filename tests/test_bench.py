"""qwen3tts-bench end to end on a tiny checkpoint: ours, the official implementation and vox-tts
side by side, the bandwidth bound, the summary, and JSON / markdown / PNG written; then ours
alone with INT4 weights. No timing assertions: speed goals live in the benchmark's output,
not in tests. vox runs from the test environment's own vox-tts (--vox-python), so nothing
is downloaded here."""
from __future__ import annotations

import json
import numbers
import sys
from pathlib import Path
from types import SimpleNamespace

import matplotlib  # noqa: F401  (a dependency of the tools distribution: fails loudly when missing)
import oracle  # noqa: F401  (the official implementation must be importable)
import pytest
import vox  # noqa: F401  (vox-tts, the vox peer: fails loudly when missing)

from qwen3tts_tools.bench import vox_peer
from qwen3tts_tools.bench.as_cpu import TORCH_ENV
from qwen3tts_tools.bench.cli import main, parse_args, prepare
from qwen3tts_tools.bench.limits import graph_reads
from qwen3tts_tools.bench.report import summary
from qwen3tts_tools.bench.scenarios import EngineSetup, LevelResult, OursResult, Workload, merged, process_groups
from qwen3tts_tools.bench.stats import Spread
from wyoming_qwen3tts.engine.devices import GRAPHS, PRECISIONS
from wyoming_qwen3tts.engine.isa_cap import ENV
from wyoming_qwen3tts.model.manifest import FORMAT_VERSION

FRAMES = 10
STREAMS = [1, 2, 4]
SPREAD = {"median", "min", "max", "n"}
SUMMARY = {"frames_per_s_1", "first_audio_ms_1", "peak_rss_mb_1", "frames_per_s_4", "peak_rss_mb_4",
           "x_official", "x_vox"}
WORK = Workload("Hello there.", "ryan", "english", FRAMES, 2)


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("bench-work")


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_prepare_makes_the_models_once(work_dir, weights):
    args = parse_args(["--preset", "tiny", "--work-dir", str(work_dir), "--weights", weights])
    checkpoint, converted = prepare(args)
    assert converted.name == f"tiny-custom_voice-{weights}"
    manifest = json.loads((converted / "manifest.json").read_text())
    assert manifest["options"]["weights"] == weights
    stamp = (converted / "manifest.json").stat().st_mtime_ns
    assert prepare(args) == (checkpoint, converted)
    assert (converted / "manifest.json").stat().st_mtime_ns == stamp  # reused, not converted again
    assert not list(work_dir.glob("*.partial-*"))
    (converted / "manifest.json").write_text(json.dumps({**manifest, "format_version": 1}))
    assert prepare(args) == (checkpoint, converted)  # an older format in the work dir: converted again
    assert json.loads((converted / "manifest.json").read_text())["format_version"] == FORMAT_VERSION
    other = "int4" if weights == "int8" else "int8"
    with pytest.raises(SystemExit, match=f"holds {weights} weights, not the {other}"):
        prepare(parse_args(["--preset", "tiny", "--work-dir", str(work_dir), "--weights", other,
                            "--converted", str(converted)]))


def test_an_int8_codec_is_a_conversion_of_its_own(work_dir):
    args = parse_args(["--preset", "tiny", "--work-dir", str(work_dir), "--weights", "int8", "--codec-weights", "int8"])
    _, converted = prepare(args)
    assert converted.name == "tiny-custom_voice-int8-codec_int8"
    assert json.loads((converted / "manifest.json").read_text())["options"]["codec_weights"] == "int8"
    with pytest.raises(SystemExit, match="holds an int8 codec, not the fp32 of --codec-weights"):
        prepare(parse_args(["--preset", "tiny", "--work-dir", str(work_dir), "--weights", "int8",
                            "--converted", str(converted)]))
    # its bytes as converted (int8 weights for most multiply-adds), its float columns as a float codec reads
    graph = json.loads((converted / "manifest.json").read_text())["graphs"]["codec_steady_8"]
    reads = graph_reads(converted / "codec_steady_8.xml", "codec_steady_8", graph["weights"], 8)
    assert reads.stored == "int8_conv"
    assert reads.bytes_per_frame() < reads.bytes_per_frame("fp32") and reads.bytes_per_frame("fp16") < \
        reads.bytes_per_frame("fp32")


def test_a_given_conversion_without_peers_needs_no_checkpoint(work_dir, tmp_path):
    converted = work_dir / "tiny-custom_voice-int8"
    if not (converted / "manifest.json").is_file():
        prepare(parse_args(["--preset", "tiny", "--work-dir", str(work_dir), "--weights", "int8"]))
    empty = tmp_path / "work"
    args = parse_args(["--preset", "tiny", "--work-dir", str(empty), "--weights", "int8", "--converted",
                       str(converted), "--peers", "none"])
    assert prepare(args)[1] == converted
    assert not empty.exists()  # no synthetic checkpoint written for it
    with_peer = parse_args(["--preset", "tiny", "--work-dir", str(empty), "--weights", "int8", "--converted",
                            str(converted), "--peers", "official"])
    checkpoint, _ = prepare(with_peer)  # the official peer reads the checkpoint: written
    assert (checkpoint / "config.json").is_file() and checkpoint.parent == empty


def test_arguments():
    assert parse_args(["--peers", "none"]).peers == ()
    assert parse_args(["--peers", "vox,official,vox"]).peers == ("vox", "official")
    assert parse_args([]).peers == ("official", "vox")
    assert parse_args(["--precision", "auto"]).precision == "auto"  # LoadedModel resolves it per graph
    assert parse_args(["--as-cpu", "avx2-vnni"]).kernels == "avx_vnni"  # the smaller CPU's copy of the kernels
    assert parse_args(["--as-cpu", "avx2", "--kernels", "avx2"]).kernels == "avx2"
    for bad in (["--peers", "vox,torch"], ["--weights", "int2"], ["--streams", "2,4"], ["--precision", "f64"],
                ["--as-cpu", "avx2", "--kernels", "avx_vnni"], ["--as-cpu", "avx2-vnni", "--precision", "bf16"],
                ["--as-cpu", "avx2", "--backend", "python"], ["--as-cpu", "sse4"], ["--as-cpu", "avx2", "--together"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


def test_levels_whose_peak_rss_is_reported_run_alone():
    assert process_groups([1, 2, 4, 8]) == [[1], [4], [2, 8]]
    assert process_groups([1, 2]) == [[1], [2]]
    assert process_groups([1]) == [[1]]


def _level(streams: int, fps: float, peak: float) -> LevelResult:
    s = Spread.of([fps])
    return LevelResult(streams, s, Spread.of([0.25]), s, [0.25], s, {}, s, 1, peak)


def _ours(*levels: LevelResult) -> OursResult:
    return OursResult("m", EngineSetup(), 1.0, 100.0, {"talker": "f32"}, 30, 64, 16, 0.5, list(levels))


def test_summary_arithmetic():
    ours = merged([_ours(_level(1, 6.0, 3000.0)), _ours(_level(4, 12.0, 3500.0)), _ours(_level(2, 9.0, 3200.0))])
    assert [level.streams for level in ours.levels] == [1, 2, 4]
    official, theirs = (SimpleNamespace(e2e_fps=Spread.of([fps])) for fps in (2.0, 3.0))
    assert summary(ours, official, theirs) == {
        "frames_per_s_1": 6.0, "first_audio_ms_1": 250.0, "peak_rss_mb_1": 3000.0, "frames_per_s_4": 12.0,
        "peak_rss_mb_4": 3500.0, "x_official": 3.0, "x_vox": 2.0}
    alone = summary(_ours(_level(1, 6.0, 3000.0)), None, None)
    assert set(alone) == SUMMARY
    assert [k for k, v in alone.items() if v is None] == ["frames_per_s_4", "peak_rss_mb_4", "x_official", "x_vox"]


def _driver_run(frames: int, total_s: float) -> dict:
    return {"frames": frames, "first_audio_s": 0.1, "total_s": total_s, "chunks": 3,
            "stage_s": {"prefill": 0.1, "talker": 0.2, "predictor": 0.4, "codec": 0.3}}


def _driver_output(*runs: dict) -> dict:
    return {"version": vox_peer.VERSION, "load_s": 0.5, "rss_loaded_mb": 100.0, "peak_rss_mb": 120.0,
            "precision": {"weights": "bf16", "quant": "q8", "codec": "f32"}, "chunk_frames": 4,
            "overlapped_codec": False, "plan": {"mode": "balanced"}, "runs": list(runs)}


def test_vox_driver_output_as_figures(tmp_path):
    result = vox_peer.summarise(_driver_output(_driver_run(FRAMES, 2.0), _driver_run(FRAMES, 4.0)), tmp_path, 2, WORK)
    assert result.e2e_fps == Spread(3.75, 2.5, 5.0, 2)
    assert result.rtf.median == pytest.approx(3.0 / WORK.audio_s)
    ms = {k: v.median for k, v in result.per_frame_ms.items()}
    assert ms == pytest.approx({"talker": 30.0, "subcode": 40.0, "decoder": 30.0})  # prefill counts as talker
    with pytest.raises(vox_peer.VoxError, match=r"made \[10, 7\] frames"):
        vox_peer.summarise(_driver_output(_driver_run(FRAMES, 2.0), _driver_run(7, 2.0)), tmp_path, 2, WORK)
    untimed = _driver_run(FRAMES, 2.0)
    untimed["stage_s"] = dict.fromkeys(untimed["stage_s"], 0.0)
    with pytest.raises(vox_peer.VoxError, match="stage timers"):
        vox_peer.summarise(_driver_output(_driver_run(FRAMES, 2.0), untimed), tmp_path, 2, WORK)


def test_vox_driver_errors_fail_the_bench(work_dir, checkpoint_factory):
    python = vox_peer.check_python(Path(sys.executable))
    model = vox_peer.build_model(python, checkpoint_factory("tiny"), work_dir / "driver-test.tmod")
    with pytest.raises(vox_peer.VoxError, match="the vox driver failed"):
        vox_peer.bench_vox(python, model, Workload("Hello.", "nobody", "english", 4, 1), 1, {})


def _spread(value: dict) -> None:
    assert set(value) == SPREAD
    assert value["min"] <= value["median"] <= value["max"] and value["n"] >= 1


def _positive(values) -> bool:
    return all(isinstance(v, numbers.Real) and v > 0 for v in values)


def test_bench_writes_every_figure(work_dir, tmp_path):
    out = tmp_path / "results"
    assert main(["--preset", "tiny", "--work-dir", str(work_dir), "-o", str(out), "--frames", str(FRAMES),
                 "--runs", "2", "--streams", ",".join(map(str, STREAMS)), "--probe-frames", "2",
                 "--bandwidth-mb", "32", "--peers", "official,vox", "--vox-python", sys.executable]) == 0
    assert (out / "bench-tiny.png").read_bytes().startswith(b"\x89PNG")
    text = (out / "bench-tiny.md").read_text()
    for heading in ("## One stream", "## Concurrent streams", "## Memory by component", "## The limit",
                    "## Biggest costs"):
        assert heading in text
    assert "| ours | official (" in text and f"vox {vox_peer.VERSION} (q8) | ours vs official | ours vs vox |" in text
    assert "| frames/s, generation only | – |" in text
    report = json.loads((out / "bench-tiny.json").read_text())

    for share in ("other_cpu_share", "steal_share"):
        assert isinstance(report[share], float) and report[share] >= 0
    assert report["machine"]["cores"] >= 1 and report["versions"]["openvino"] and report["versions"]["torch"]
    assert report["workload"]["frames"] == FRAMES
    for threads in ("1", "2"):
        _spread(report["bandwidth"]["gb_per_s"][threads])

    ours = report["ours"]
    assert [level["streams"] for level in ours["levels"]] == STREAMS
    assert ours["prompt_tokens"] > 0 and ours["blocks_total"] > 0 and ours["setup"]["max_batch"] == max(STREAMS)
    assert ours["precisions"] == {"talker": "f32", "subcode": "f32", "decoder": "f32"}  # the bench's default
    assert [mark[0] for mark in ours["memory"]] == ["before", "codec", "talker", "subcode", "warm-up"]
    assert all(anon > 0 and file >= 0 for _, anon, file in ours["memory"])
    for level in ours["levels"]:
        for key in ("aggregate_fps", "ttfa_p50_s", "ttfa_p90_s", "rtf", "step_ms"):
            _spread(level[key])
        assert set(level["per_frame_ms"]) == {"talker", "subcode", "codec", "host", "total"}
        for spread in level["per_frame_ms"].values():
            _spread(spread)
        assert len(level["ttfa_s"]) == 2 * level["streams"] and all(t > 0 for t in level["ttfa_s"])
        assert 0 < level["blocks_used"] <= ours["blocks_total"] and level["peak_rss_mb"] > 0

    official = report["official"]
    assert official["dtype"] in ("float32", "bfloat16") and set(official["probe_fps"]) == {"float32", "bfloat16"}
    for key in ("ttff_s", "generate_fps", "e2e_fps", "rtf"):
        _spread(official[key])
    assert set(official["per_frame_ms"]) == {"talker", "subcode", "decoder"}
    assert [run["frames"] for run in official["runs"]] == [FRAMES, FRAMES]

    theirs = report["vox"]
    assert theirs["version"] == vox_peer.VERSION and theirs["precision"]["quant"] == "q8"
    assert theirs["model"].endswith("tiny-custom_voice-vox-q8.tmod") and not list(work_dir.glob("*.tmod.partial-*"))
    assert [run["frames"] for run in theirs["runs"]] == [FRAMES, FRAMES]  # EOS held off
    for key in ("ttfa_s", "e2e_fps", "rtf"):
        _spread(theirs[key])
    assert set(theirs["per_frame_ms"]) == {"talker", "subcode", "decoder"}
    for spread in theirs["per_frame_ms"].values():
        _spread(spread)
        assert spread["min"] > 0  # its stage timers counted every run
    assert theirs["peak_rss_mb"] > 0 and theirs["threads"] == parse_args([]).threads

    assert set(report["reads"]) == {"talker", "subcode", "codec"}
    assert report["reads"]["subcode"]["weight_elements"] > report["reads"]["talker"]["weight_elements"]  # 15 steps
    assert set(report["mb_per_frame"]["talker"]) == {"int4", "int8", "fp16", "fp32"}
    assert set(report["mb_per_frame"]["codec"]) == {"fp16", "fp32"}
    bound = report["bound"]
    for key in ("mb_per_frame", "bound_ms", "measured_ms", "ratio"):
        assert set(bound[key]) == {"talker", "subcode", "codec", "total"}
        assert _positive(bound[key].values())
    assert set(report["ratios"]) == {"official", "vox"}
    assert set(report["ratios"]["official"]) == {"frames_per_s", "frames_per_s_generation_only", "first_audio",
                                                 "best_throughput", "peak_rss"}
    assert set(report["ratios"]["vox"]) == {"frames_per_s", "first_audio", "best_throughput", "peak_rss"}
    assert _positive(v for ratios in report["ratios"].values() for v in ratios.values())

    s, one, four = report["summary"], ours["levels"][0], ours["levels"][2]
    assert set(s) == SUMMARY and _positive(s.values())
    assert s["frames_per_s_1"] == one["aggregate_fps"]["median"] and s["peak_rss_mb_1"] == one["peak_rss_mb"]
    assert s["first_audio_ms_1"] == pytest.approx(one["ttfa_p50_s"]["median"] * 1e3)
    assert s["frames_per_s_4"] == four["aggregate_fps"]["median"] and s["peak_rss_mb_4"] == four["peak_rss_mb"]
    assert s["x_official"] == pytest.approx(s["frames_per_s_1"] / official["e2e_fps"]["median"])
    assert s["x_vox"] == pytest.approx(s["frames_per_s_1"] / theirs["e2e_fps"]["median"])
    assert s["x_vox"] == report["ratios"]["vox"]["frames_per_s"]


def test_bench_without_peers_int4_auto(work_dir, tmp_path):
    out = tmp_path / "results"
    assert main(["--preset", "tiny", "--work-dir", str(work_dir), "-o", str(out), "--frames", str(FRAMES),
                 "--runs", "1", "--streams", "1", "--bandwidth-mb", "32", "--weights", "int4", "--peers", "none",
                 "--precision", "auto"]) == 0
    report = json.loads((out / "bench-tiny.json").read_text())
    assert report["ours"]["setup"]["precision"] == "auto"
    assert set(report["ours"]["precisions"]) == set(GRAPHS) and set(report["ours"]["precisions"].values()) <= set(
        PRECISIONS)  # what auto chose for each graph on this CPU
    assert report["official"] is None and report["vox"] is None and report["ratios"] == {}
    assert report["model"]["options"]["weights"] == "int4" and report["reads"]["talker"]["stored"] == "int4"
    subcode = report["reads"]["subcode"]
    assert subcode["weight_bytes"] < subcode["weight_elements"]  # two INT4 weights a byte (with group scales)
    s = report["summary"]
    assert set(s) == SUMMARY and s["frames_per_s_1"] > 0
    assert s["frames_per_s_4"] is None and s["peak_rss_mb_4"] is None and s["x_official"] is None and s["x_vox"] is None
    text = (out / "bench-tiny.md").read_text()
    table = text.split("## One stream")[1].split("\n\n")[1]
    assert "Peers: none" in text and "official" not in table and "generation only" not in table
    assert (out / "bench-tiny.png").read_bytes().startswith(b"\x89PNG")


def test_bench_as_a_cpu_without_avx512(work_dir, tmp_path, monkeypatch):
    """--as-cpu: the runner's kernels for that CPU, OpenVINO held to its instruction set (no
    BF16: auto runs every graph f32), and the stand-in named in both reports."""
    for name in (ENV, TORCH_ENV):
        monkeypatch.delenv(name, raising=False)  # main sets them for its children; undone after the test
    out = tmp_path / "results"
    assert main(["--preset", "tiny", "--work-dir", str(work_dir), "-o", str(out), "--frames", str(FRAMES),
                 "--runs", "1", "--streams", "1", "--bandwidth-mb", "32", "--weights", "int4", "--peers", "none",
                 "--precision", "auto", "--as-cpu", "avx2-vnni"]) == 0
    report = json.loads((out / "bench-tiny.json").read_text())
    ours = report["ours"]
    assert ours["setup"]["kernels"] == "avx_vnni"
    assert "avx_vnni" in ours["talker_runtime"] and "avx_vnni" in ours["subcode_runtime"]
    assert set(report["ours"]["precisions"].values()) == {"f32"}
    as_cpu = report["as_cpu"]
    assert as_cpu["name"] == "avx2-vnni" and as_cpu["onednn_isa"] == "AVX2_VNNI" and as_cpu["kernels"] == "avx_vnni"
    graphs = as_cpu["larger_kernels"]
    assert "embed" in graphs and any(g.startswith("codec_steady_") for g in graphs)
    assert not any("Convolution" in kernel or "FullyConnected" in kernel for k in graphs.values() for kernel in k)
    assert "**As CPU `avx2-vnni`**" in (out / "bench-tiny.md").read_text()


def test_together_measures_both_models_and_each_alone(work_dir, tmp_path, capsys):
    """--together: CustomVoice alone, Base alone (a clone), both in one server; every figure
    a measurement of its own process, the memory line against the larger served alone."""
    out = tmp_path / "out"
    assert main(["--preset", "tiny", "--together", "--work-dir", str(work_dir), "-o", str(out), "--frames", "4",
                 "--runs", "1", "--threads", "1"]) == 0
    servings = json.loads((out / "together-tiny-int8.json").read_text())
    assert [s["label"] for s in servings] == ["CustomVoice alone", "Base alone", "both in one server"]
    assert [list(s["alone"]) for s in servings] == [["ryan"], ["clone"], ["ryan", "clone"]]
    assert list(servings[2]["both"]) == ["ryan", "clone"] and not servings[0]["both"]
    for serving in servings:
        assert serving["peak_rss_mb"] >= serving["rss_loaded_mb"] > 0 and serving["load_s"] > 0
        for fps, ttfa in [*serving["alone"].values(), *serving["both"].values()]:
            assert fps["median"] > 0 and fps["n"] == 1 and ttfa["median"] > 0
    apart = max(s["peak_rss_mb"] for s in servings[:2])
    assert f"{servings[2]['peak_rss_mb'] - apart:+.0f} MB over the larger served alone" in capsys.readouterr().out
