"""Device placement, per-device compile properties, and the first start's conversion."""
from __future__ import annotations

import json
import logging
import types

import openvino as ov
import pytest

from wyoming_qwen3tts.engine.devices import (
    DeviceError,
    check_kv_cache,
    compile_config,
    describe_devices,
    device_capabilities,
    fastest_precision,
    place,
    resolve_precision,
    resolve_precisions,
)
from wyoming_qwen3tts.engine.isa_cap import ENV, capped_capabilities, onednn_cap
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.step import ChunkSchedule
from wyoming_qwen3tts.model.manifest import FORMAT_VERSION, MANIFEST, read_converted
from wyoming_qwen3tts.server import models
from wyoming_qwen3tts.server.models import ModelSourceError, conversion_dir, prepare_model

AI_PC = ["CPU", "GPU", "NPU"]
AI_PC_REQUEST = {"talker": "GPU", "subcode": "GPU", "decoder": "NPU"}
# OPTIMIZATION_CAPABILITIES as OpenVINO reports them on the hosts this project runs on
AMX_XEON = ["BF16", "WINOGRAD", "FP32", "FP16", "INT8", "BIN", "EXPORT_IMPORT"]
ZEN4 = ["BF16", "WINOGRAD", "FP32", "INT8", "BIN", "EXPORT_IMPORT"]
VNNI_XEON = ["WINOGRAD", "FP32", "INT8", "BIN", "EXPORT_IMPORT"]  # AVX-512 without BF16
ARC_GPU = ["FP32", "BIN", "FP16", "INT8", "GPU_HW_MATMUL", "EXPORT_IMPORT"]
NPU_CAPS = ["FP16", "INT8", "EXPORT_IMPORT"]


def test_an_ai_pc_gets_what_it_asks_for(caplog):
    with caplog.at_level(logging.WARNING):
        assert place(AI_PC_REQUEST, AI_PC) == AI_PC_REQUEST
        assert place({"talker": "GPU", "subcode": "GPU.1", "decoder": "CPU"}, ["CPU", "GPU.0", "GPU.1"]) == {
            "talker": "GPU", "subcode": "GPU.1", "decoder": "CPU"}
        assert place({"talker": "AUTO", "subcode": "CPU", "decoder": "AUTO"}, ["CPU"])["talker"] == "AUTO"
    assert not caplog.records


@pytest.mark.parametrize("available, expected", [
    (["CPU"], {"talker": "CPU", "subcode": "CPU", "decoder": "CPU"}),
    (["CPU", "GPU"], {"talker": "GPU", "subcode": "GPU", "decoder": "CPU"}),
    (["CPU", "NPU"], {"talker": "CPU", "subcode": "CPU", "decoder": "NPU"}),
    (["CPU", "GPU.0"], {"talker": "GPU", "subcode": "GPU", "decoder": "CPU"}),
])
def test_a_missing_device_falls_back_to_the_cpu_with_one_warning(available, expected, caplog):
    with caplog.at_level(logging.WARNING):
        assert place(AI_PC_REQUEST, available) == expected
    missing = [g for g in expected if expected[g] != AI_PC_REQUEST[g]]
    assert len(caplog.records) == len(missing)
    assert all("not available" in r.message and "on the CPU" in r.message for r in caplog.records)


@pytest.mark.parametrize("graph", ["talker", "subcode"])
def test_the_npu_takes_only_static_shape_graphs(graph):
    with pytest.raises(DeviceError, match=f"devices.{graph}: the NPU compiles static shapes only"):
        place({graph: "NPU"}, AI_PC)
    with pytest.raises(DeviceError):  # refused even where the NPU is missing: the setting is wrong
        place({graph: "NPU"}, ["CPU"])


def test_compile_properties_per_device(tmp_path):
    cpu = compile_config("f32", "u8", 2, "CPU", tmp_path)  # no compiled-blob cache on the CPU: it costs memory
    assert cpu == {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "u8",
                   "INFERENCE_NUM_THREADS": 2}
    gpu = compile_config("f16", "u8", 2, "GPU.0", tmp_path)
    assert gpu == {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f16",  # CPU-only knobs dropped
                   "CACHE_DIR": str(tmp_path)}
    assert compile_config("f32", None, None, "NPU") == {"PERFORMANCE_HINT": "LATENCY"}
    with pytest.raises(ValueError, match="unknown precision"):
        compile_config("f64")
    with pytest.raises(ValueError, match="threads must be >= 1"):
        compile_config("f32", threads=0)


class FakeCore:
    """ov.Core's device queries, over made-up devices; counts capability queries."""

    NAMES = {"CPU": "Intel Core Ultra 7", "GPU": "Intel Arc Graphics", "NPU": "Intel AI Boost"}

    def __init__(self, devices: list[str], capabilities: dict[str, list[str]] | None = None) -> None:
        self.available_devices = devices
        self.capabilities = capabilities or {"CPU": ZEN4, "GPU": ARC_GPU, "NPU": NPU_CAPS}
        self.asked: list[str] = []

    def get_property(self, device: str, name: str):
        if name == "FULL_DEVICE_NAME":
            return self.NAMES[device]
        assert name == "OPTIMIZATION_CAPABILITIES"
        self.asked.append(device)
        if device not in self.capabilities:
            raise RuntimeError(f"cannot load the {device} plugin")
        return self.capabilities[device]


@pytest.mark.parametrize("device, capabilities, expected", [
    ("CPU", AMX_XEON, "bf16"),  # FP16 too, but the CPU's fast path is bf16
    ("CPU", ZEN4, "bf16"),
    ("CPU", VNNI_XEON, "f32"),
    ("CPU", ["FP32", "FP16", "INT8"], "f32"),  # f16 is never the CPU's choice
    ("CPU", [], "f32"),
    ("GPU", ARC_GPU, "f16"),
    ("GPU.1", ARC_GPU, "f16"),
    ("GPU", ["FP32", "BIN", "INT8"], "f32"),
    ("NPU", NPU_CAPS, "f16"),  # its compiler's own, whatever it reports
    ("NPU", [], "f16"),
    ("AUTO", AMX_XEON, "f32"),  # OpenVINO picks the device later: nothing is known of it
])
def test_auto_is_the_fastest_precision_the_device_reports(device, capabilities, expected):
    assert fastest_precision(device, capabilities) == expected
    on_cpu = device == "CPU"  # the talker and subcode keep f32 there: int8 units, not bf16
    assert fastest_precision(device, capabilities, "talker") == ("f32" if on_cpu else expected)
    assert fastest_precision(device, capabilities, "subcode") == ("f32" if on_cpu else expected)


def test_auto_resolves_per_graph_on_mixed_placements():
    core = FakeCore(AI_PC, {"CPU": AMX_XEON, "GPU": ARC_GPU, "NPU": NPU_CAPS})
    assert resolve_precisions(core, "auto", {"talker": "GPU", "subcode": "CPU", "decoder": "NPU"}) == {
        "talker": "f16", "subcode": "f32", "decoder": "f16"}  # INT8/INT4 products: f32 on a CPU
    assert sorted(core.asked) == ["CPU", "GPU", "NPU"]  # each device once
    slow = FakeCore(AI_PC, {"CPU": VNNI_XEON, "GPU": ["FP32", "INT8"], "NPU": NPU_CAPS})
    assert resolve_precisions(slow, "auto", {"talker": "GPU", "subcode": "CPU", "decoder": "NPU"}) == {
        "talker": "f32", "subcode": "f32", "decoder": "f16"}
    core = FakeCore(["CPU"], {"CPU": ZEN4})
    assert resolve_precisions(core, "auto", {g: "CPU" for g in ("talker", "subcode", "decoder")}) == {
        "talker": "f32", "subcode": "f32", "decoder": "bf16"}
    assert core.asked == ["CPU"]
    assert resolve_precision(FakeCore(["CPU"], {"CPU": ZEN4}), "auto", "GPU") == "f32"  # a GPU that cannot answer


def test_f32_is_taken_as_asked_without_asking_the_device():
    core = FakeCore(AI_PC, {"CPU": AMX_XEON, "GPU": ARC_GPU, "NPU": NPU_CAPS})
    assert resolve_precisions(core, "f32", {"talker": "GPU", "subcode": "CPU", "decoder": "CPU"}) == {
        "talker": "f32", "subcode": "f32", "decoder": "f32"}
    assert core.asked == []
    assert resolve_precision(core, "f32", "NPU") == "f16"  # the NPU computes its own whatever is asked
    # the properties f32 compiles with are the ones it always had: the NPU gets no hint
    assert compile_config("f32", None, None, "NPU") == compile_config("f16", None, None, "NPU")
    with pytest.raises(ValueError, match="unknown precision 'f64'"):
        resolve_precision(core, "f64", "CPU")


def test_an_explicit_precision_the_device_lacks_is_kept_and_warned_about(caplog):
    core = FakeCore(["CPU", "GPU"], {"CPU": VNNI_XEON, "GPU": ARC_GPU})
    with caplog.at_level(logging.WARNING):
        assert resolve_precisions(core, "bf16", {"talker": "CPU", "subcode": "CPU", "decoder": "GPU"}) == {
            "talker": "bf16", "subcode": "bf16", "decoder": "bf16"}
    assert [r.message for r in caplog.records] == [
        "precision bf16 on CPU, which reports no native BF16: OpenVINO emulates it there or computes f32 "
        "(auto would run f32)",
        "precision bf16 on GPU, which reports no native BF16: OpenVINO emulates it there or computes f32 "
        "(auto would run f16)"]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert resolve_precision(FakeCore(["CPU"], {"CPU": ZEN4}), "bf16", "CPU") == "bf16"
    assert not caplog.records


def test_a_cpu_held_to_a_smaller_instruction_set_is_treated_as_that_cpu(monkeypatch):
    """Under ONEDNN_MAX_CPU_ISA the plugin still reports the whole CPU's BF16 (and would
    compute bf16 with kernels oneDNN may no longer run): the engine sees the smaller CPU."""
    cpus = {"talker": "CPU", "subcode": "CPU", "decoder": "CPU"}
    monkeypatch.setenv(ENV, "avx2_vnni")
    assert onednn_cap() == "AVX2_VNNI"
    assert device_capabilities(FakeCore(["CPU"], {"CPU": AMX_XEON}), "CPU") == [
        "WINOGRAD", "FP32", "INT8", "BIN", "EXPORT_IMPORT"]
    assert resolve_precisions(FakeCore(["CPU"], {"CPU": ZEN4}), "auto", cpus)["decoder"] == "f32"
    assert device_capabilities(FakeCore(AI_PC, {"GPU": ARC_GPU}), "GPU") == ARC_GPU  # a GPU is not capped
    assert "DYNAMIC_QUANTIZATION_GROUP_SIZE" not in compile_config("f32")  # VNNI: activations quantized as there
    listed = describe_devices(FakeCore(["CPU"], {"CPU": ZEN4}), {})
    assert "oneDNN held to AVX2_VNNI (ONEDNN_MAX_CPU_ISA): treated as a CPU of that size" in listed
    assert "auto precision: f32 (no native BF16" in listed and "decoder f32" in listed
    monkeypatch.setenv(ENV, "AVX2")  # no VNNI: its products are not quantized dynamically
    assert compile_config("f32", threads=2)["DYNAMIC_QUANTIZATION_GROUP_SIZE"] == 0
    assert "DYNAMIC_QUANTIZATION_GROUP_SIZE" not in compile_config("f16", device="GPU")
    monkeypatch.setenv(ENV, "AVX512_CORE_BF16")
    assert capped_capabilities(AMX_XEON, onednn_cap()) == ["BF16", "WINOGRAD", "FP32", "INT8", "BIN",
                                                           "EXPORT_IMPORT"]  # bf16, not yet f16 arithmetic
    assert "DYNAMIC_QUANTIZATION_GROUP_SIZE" not in compile_config("f32")
    monkeypatch.setenv(ENV, "all")
    assert onednn_cap() is None and device_capabilities(FakeCore(["CPU"], {"CPU": AMX_XEON}), "CPU") == AMX_XEON
    monkeypatch.setenv(ENV, "AVX3")
    with pytest.raises(ValueError, match="not one of oneDNN's x86 caps"):
        onednn_cap()


def test_an_f32_kv_cache_needs_f32_compute_on_the_cpu():
    check_kv_cache("f32", "f32", "CPU")
    check_kv_cache("bf16", "u8", "CPU")
    check_kv_cache("bf16", "f16", "CPU")
    check_kv_cache("f16", "f32", "GPU")  # the GPU picks its own cache format
    for precision in ("bf16", "f16"):
        with pytest.raises(ValueError, match=f"an f32 KV cache needs f32 compute, but the talker runs {precision}"):
            check_kv_cache(precision, "f32", "CPU")
        with pytest.raises(ValueError, match="an f32 KV cache needs f32 compute"):
            compile_config(precision, "f32", device="CPU")


def test_list_devices_shows_devices_placement_and_precision():
    text = describe_devices(FakeCore(AI_PC), AI_PC_REQUEST)
    assert "GPU: Intel Arc Graphics" in text and "NPU: Intel AI Boost" in text
    assert "talker -> GPU, subcode -> GPU, decoder -> NPU" in text
    assert "precision auto: talker f16, subcode f16, decoder f16" in text
    assert "decoder -> CPU" in describe_devices(FakeCore(["CPU", "GPU"]), AI_PC_REQUEST)
    assert "static shapes only" in describe_devices(FakeCore(AI_PC), {"talker": "NPU"})
    text = describe_devices(FakeCore(AI_PC), {"talker": "GPU", "subcode": "CPU", "decoder": "NPU"}, "f32")
    assert "precision f32: talker f32, subcode f32, decoder f16" in text


def test_list_devices_says_what_auto_picks_on_each_device_and_why():
    fast = describe_devices(FakeCore(AI_PC, {"CPU": AMX_XEON, "GPU": ARC_GPU, "NPU": NPU_CAPS}), {})
    assert fast.splitlines()[1:7] == [
        "  CPU: Intel Core Ultra 7",
        "    auto precision: bf16 (native BF16); talker and subcode f32 (INT8/INT4 weights run on int8 units there)",
        "  GPU: Intel Arc Graphics", "    auto precision: f16 (native FP16)",
        "  NPU: Intel AI Boost", "    auto precision: f16, the NPU compiler's own (no precision is set there)"]
    assert fast.splitlines()[-1] == "precision auto: talker f32, subcode f32, decoder bf16"
    slow = describe_devices(FakeCore(["CPU", "GPU"], {"CPU": VNNI_XEON, "GPU": ["FP32", "INT8"]}), {})
    assert ("    auto precision: f32 (no native BF16: auto runs f32 here, and the codec decoder, which bf16 "
            "speeds up most, keeps its f32 cost)") in slow.splitlines()
    assert "    auto precision: f32 (no native FP16: auto runs f32 here)" in slow.splitlines()
    assert slow.splitlines()[-1] == "precision auto: talker f32, subcode f32, decoder f32"


def test_list_devices_names_the_native_runners_kernels_on_the_cpu():
    """The first copy given is the one the runner uses (app.py: the fastest the CPU runs, or the
    one engine.kernels names); none: OpenVINO's graphs run."""
    text = describe_devices(FakeCore(AI_PC), {}, kernels=["avx_vnni", "avx2"]).splitlines()
    cpu = text.index("  CPU: Intel Core Ultra 7")
    assert text[cpu + 2] == "    the native runner's kernels: avx_vnni (talker and code predictor, INT8/INT4 weights)"
    assert sum("native runner's kernels" in line for line in text) == 1  # the CPU's line only
    none = describe_devices(FakeCore(AI_PC), {}, kernels=[])
    assert "the native runner's kernels: none (no AVX2 with FMA, or not built)" in none


def test_the_cli_lists_devices(capsys):
    """On this machine: what its CPU reports decides what auto runs."""
    from wyoming_qwen3tts.server.app import main

    expected = fastest_precision("CPU", device_capabilities(ov.Core(), "CPU"))
    assert main(["--list-devices", "--device", "GPU", "--device-decoder", "NPU"]) == 0
    out = capsys.readouterr().out
    assert "OpenVINO devices:" in out and "CPU:" in out and "graphs: talker ->" in out
    assert f"    auto precision: {expected} (" in out
    assert main(["--list-devices"]) == 0
    out = capsys.readouterr().out
    assert f"precision auto: talker f32, subcode f32, decoder {expected}" in out
    assert main(["--list-devices", "--precision", "f32"]) == 0
    assert "precision f32: talker f32, subcode f32, decoder f32" in capsys.readouterr().out


def test_the_model_and_the_native_runner_get_each_graphs_precision(converted_factory, monkeypatch, caplog):
    """What LoadedModel resolves is what every graph compiles with, the native runner's too;
    f32 compiles with exactly the properties it always had."""
    from wyoming_qwen3tts.engine import native

    captured, codecs = [], []
    loaded = types.SimpleNamespace(talker_runtime="openvino", subcode_runtime="openvino")  # what NativeRunner logs
    monkeypatch.setattr(native._native, "Runner", lambda config, codec: captured.append(config) or loaded)
    monkeypatch.setattr(native._native, "CodecGraphs",
                        lambda config: codecs.append(config) or types.SimpleNamespace(load_memory=[]))
    model_dir = converted_factory("tiny", "custom_voice", "int8")
    expected = fastest_precision("CPU", device_capabilities(ov.Core(), "CPU"))
    with caplog.at_level(logging.INFO):
        model = LoadedModel(model_dir, precision="auto", kv_precision="u8")
    assert model.precisions == {"talker": "f32", "subcode": "f32", "decoder": expected}
    assert f"talker CPU f32, subcode CPU f32, decoder CPU {expected} (precision auto" in caplog.text
    native.NativeRunner(model, ChunkSchedule(1, 8, False))
    exact = LoadedModel(model_dir, precision="f32", kv_precision="u8")
    assert exact.precisions == {"talker": "f32", "subcode": "f32", "decoder": "f32"}
    native.NativeRunner(exact, ChunkSchedule(1, 8, False))
    (auto, f32) = captured
    for config, codec, decoder in ((auto, codecs[0], expected), (f32, codecs[1], "f32")):
        for graph, precision in (("talker", "f32"), ("subcode", "f32")):
            assert getattr(config, f"{graph}_properties")["INFERENCE_PRECISION_HINT"] == precision
        assert codec.properties["INFERENCE_PRECISION_HINT"] == decoder
        assert config.talker_properties == {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32",
                                            "KV_CACHE_PRECISION": "u8"}


def test_an_f32_kv_cache_with_reduced_compute_is_refused_before_compiling(converted_factory):
    with pytest.raises(ValueError, match="an f32 KV cache needs f32 compute, but the talker runs bf16 on the CPU"):
        LoadedModel(converted_factory("tiny", "custom_voice", "int8"), precision="bf16", kv_precision="f32")


def test_a_second_start_converts_nothing_and_a_broken_conversion_is_redone(checkpoint_factory, tmp_path,
                                                                         monkeypatch):
    from wyoming_qwen3tts.convert import child, pipeline

    calls = []
    real = child.convert_in_child  # converts in a child process

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(child, "convert_in_child", counting)
    src = str(checkpoint_factory("tiny", "custom_voice"))
    first = prepare_model(src, tmp_path, "fp32")
    assert first == conversion_dir(src, tmp_path, "fp32") and len(calls) == 1
    assert prepare_model(src, tmp_path, "fp32") == first and len(calls) == 1  # reused
    assert prepare_model(str(first), tmp_path, "fp32") == first and len(calls) == 1  # a converted dir as is
    talker_bin = first / "talker.bin"
    talker_bin.write_bytes(talker_bin.read_bytes()[:1000])  # half-written
    assert prepare_model(src, tmp_path, "fp32") == first and len(calls) == 2
    assert talker_bin.stat().st_size > 1000
    manifest = json.loads((first / MANIFEST).read_text())
    (first / MANIFEST).write_text(json.dumps({**manifest, "format_version": 1}))  # an older, still readable format
    assert read_converted(first)[0]["format_version"] == 1
    assert prepare_model(str(first), tmp_path, "fp32") == first and len(calls) == 2  # a user's own dir: as is
    assert prepare_model(src, tmp_path, "fp32") == first and len(calls) == 3  # a managed one: converted again
    assert json.loads((first / MANIFEST).read_text())["format_version"] == FORMAT_VERSION
    (first / MANIFEST).write_text(json.dumps({**manifest, "format_version": 1}))

    def failing(*args, **kwargs):
        calls.append(args)
        raise pipeline.ConvertError("no network")

    monkeypatch.setattr(child, "convert_in_child", failing)  # converting again fails: the older one still serves
    assert prepare_model(src, tmp_path, "fp32") == first and len(calls) == 4
    assert read_converted(first)[0]["format_version"] == 1
    assert conversion_dir(src, tmp_path, "int8") != first  # options are part of the key
    assert conversion_dir(src, tmp_path, "fp32", "fp32") == first  # the exact codec adds nothing (older folders)
    assert conversion_dir(src, tmp_path, "fp32", "int8").name == first.name + "-codec_int8"


def test_the_server_converts_with_the_codec_weights_it_is_given(checkpoint_factory, tmp_path, monkeypatch):
    from wyoming_qwen3tts.convert import child

    calls = []
    monkeypatch.setattr(child, "convert_in_child", lambda *args, **kwargs: calls.append(kwargs) or args[1])
    src = str(checkpoint_factory("tiny", "custom_voice"))
    out = prepare_model(src, tmp_path, "int4", "int8")
    assert out == conversion_dir(src, tmp_path, "int4", "int8")
    assert calls == [{"weights": "int4", "codec_weights": "int8", "force": False}]


def test_hub_ids_are_keyed_by_revision(tmp_path):
    plain = conversion_dir("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice", tmp_path, "int8")
    pinned = conversion_dir("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice@a1b2c3", tmp_path, "int8")
    assert plain != pinned and plain.parent == pinned.parent == tmp_path / "converted"
    with pytest.raises(ModelSourceError, match="neither a directory nor a hub repo id"):
        conversion_dir("not a model", tmp_path, "int8")
    assert models._REPO_ID.match("Qwen/Qwen3-TTS-12Hz-1.7B-Base@refs/pr/3")


def test_codec_chunk_graphs_are_static_where_that_pays_or_is_needed():
    from wyoming_qwen3tts.engine.devices import dynamic_device, static_batch

    assert [static_batch(d) for d in ("CPU", "NPU", "GPU", "GPU.1", "AUTO")] == [1, 1, 0, 0, 0]
    assert [dynamic_device(d) for d in ("NPU", "GPU.0", "CPU")] == ["CPU", "GPU.0", "CPU"]
