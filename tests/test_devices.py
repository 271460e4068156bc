"""Device placement, per-device compile properties, and the first start's conversion."""
from __future__ import annotations

import logging

import pytest

from wyoming_qwen3tts.engine.devices import DeviceError, compile_config, describe_devices, place
from wyoming_qwen3tts.server import models
from wyoming_qwen3tts.server.models import ModelSourceError, conversion_dir, prepare_model

AI_PC = ["CPU", "GPU", "NPU"]
AI_PC_REQUEST = {"talker": "GPU", "subcode": "GPU", "decoder": "NPU"}


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
    cpu = compile_config("f32", "u8", 2, "CPU", tmp_path)
    assert cpu == {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "u8",
                   "INFERENCE_NUM_THREADS": 2, "CACHE_DIR": str(tmp_path)}
    gpu = compile_config("f16", "u8", 2, "GPU.0")
    assert gpu == {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f16"}  # CPU-only knobs dropped
    assert compile_config("f32", None, None, "NPU") == {"PERFORMANCE_HINT": "LATENCY"}
    with pytest.raises(ValueError, match="unknown precision"):
        compile_config("f64")
    with pytest.raises(ValueError, match="threads must be >= 1"):
        compile_config("f32", threads=0)


class FakeCore:
    def __init__(self, devices: list[str]) -> None:
        self.available_devices = devices

    def get_property(self, device: str, name: str) -> str:
        assert name == "FULL_DEVICE_NAME"
        return {"CPU": "Intel Core Ultra 7", "GPU": "Intel Arc Graphics", "NPU": "Intel AI Boost"}[device]


def test_list_devices_shows_devices_and_placement():
    text = describe_devices(FakeCore(AI_PC), AI_PC_REQUEST)
    assert "GPU: Intel Arc Graphics" in text and "NPU: Intel AI Boost" in text
    assert "talker -> GPU, subcode -> GPU, decoder -> NPU" in text
    assert "decoder -> CPU" in describe_devices(FakeCore(["CPU", "GPU"]), AI_PC_REQUEST)
    assert "static shapes only" in describe_devices(FakeCore(AI_PC), {"talker": "NPU"})


def test_the_cli_lists_devices(capsys):
    from wyoming_qwen3tts.server.app import main

    assert main(["--list-devices", "--device", "GPU", "--device-decoder", "NPU"]) == 0
    out = capsys.readouterr().out
    assert "OpenVINO devices:" in out and "CPU:" in out and "graphs: talker ->" in out


def test_a_second_start_converts_nothing_and_a_broken_conversion_is_redone(checkpoint_factory, tmp_path,
                                                                         monkeypatch):
    from wyoming_qwen3tts.convert import pipeline

    calls = []
    real = pipeline.convert

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "convert", counting)
    src = str(checkpoint_factory("tiny", "custom_voice"))
    first = prepare_model(src, tmp_path, "fp32")
    assert first == conversion_dir(src, tmp_path, "fp32") and len(calls) == 1
    assert prepare_model(src, tmp_path, "fp32") == first and len(calls) == 1  # reused
    assert prepare_model(str(first), tmp_path, "fp32") == first and len(calls) == 1  # a converted dir as is
    talker_bin = first / "talker.bin"
    talker_bin.write_bytes(talker_bin.read_bytes()[:1000])  # half-written
    assert prepare_model(src, tmp_path, "fp32") == first and len(calls) == 2
    assert talker_bin.stat().st_size > 1000
    assert conversion_dir(src, tmp_path, "int8") != first  # options are part of the key


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
