"""The codec decoder's profile (python -m qwen3tts_tools.bench.decoder_profile): OpenVINO's
per-node counters over a carried stream of steady chunks, grouped by node type and kernel."""
from __future__ import annotations

import json

import openvino as ov
import pytest

from qwen3tts_tools.bench.decoder_profile import main, profile, state_in_bf16
from wyoming_qwen3tts.model.stream_io import NEXT, STATE


def test_the_profile_accounts_for_every_node_and_names_the_convolutions(converted_factory):
    model = converted_factory("tiny", "custom_voice", "int4")
    result = profile(model, 2, "f32", 1, 3)
    assert result.graph == "codec_steady_2" and result.precision == "f32" and result.frames_per_call == 2
    assert result.ms_per_frame > 0 and result.wall_ms_per_frame > 0
    assert sum(g.share for g in result.groups) == pytest.approx(1.0)
    assert sum(g.ms_per_frame for g in result.groups) == pytest.approx(result.ms_per_frame)
    assert [g.ms_per_frame for g in result.groups] == sorted((g.ms_per_frame for g in result.groups), reverse=True)
    convolutions = [g for g in result.groups if g.node_type == "Convolution"]
    assert convolutions and all(g.nodes >= 1 for g in convolutions)


def test_the_cli_prints_the_table_and_writes_json(converted_factory, tmp_path, capsys):
    model = converted_factory("tiny", "custom_voice", "int4")
    out = tmp_path / "profile.json"
    assert main(["--converted", str(model), "--chunk", "2", "--calls", "2", "--threads", "1", "--precision", "f32",
                 "--top", "3", "--json", str(out)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("codec_steady_2 (f32, 2 frames a call, 2 calls)")
    assert len([line for line in table if line.startswith("| ") and "---" not in line]) == 1 + 3
    data = json.loads(out.read_text())
    assert data["calls"] == 2 and data["groups"][0]["ms_per_frame"] >= data["groups"][-1]["ms_per_frame"]


def test_the_state_is_bf16_as_the_native_runner_keeps_it(converted_factory):
    model = converted_factory("tiny", "custom_voice", "int4")
    original = ov.Core().read_model(model / "codec_steady_2.xml")
    f32 = {p.any_name for p in [*original.inputs, *original.outputs] if p.element_type == ov.Type.f32}
    other = {p.any_name: p.element_type for p in [*original.inputs, *original.outputs]}
    ir = state_in_bf16(original)
    ports = {p.any_name: p.element_type for p in [*ir.inputs, *ir.outputs]}
    state = {name for name in ports if name.startswith((STATE, NEXT))}
    assert state & f32 and any(name.startswith(NEXT) for name in state & f32)
    assert all(ports[name] == (ov.Type.bf16 if name in f32 else other[name]) for name in state)
    assert ir.input("codes").element_type == ov.Type.i64 and ir.output("pcm").element_type == ov.Type.f32
    result = profile(model, 2, "bf16", 1, 2)  # carried from call to call in bf16 where the CPU has it
    assert result.ms_per_frame > 0 and sum(g.share for g in result.groups) == pytest.approx(1.0)
