"""Converting within a memory bound (convert/spill.py, convert/blocked.py; docs/OPENVINO.md §16).

A small-but-not-tiny checkpoint: tiny layers, but the released text vocabulary at width 512, so
its f32 text table (311 MB) dominates as the real one does. Peaks are measured in child
processes (VmHWM, each process's own high-water mark). The values the bounded path writes are
read back from the .bin and compared with the checkpoint's own tensors, dequantised with the
quantiser's tolerance — not with another conversion of ours.
"""
from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from wyoming_qwen3tts.model.checkpoint import Checkpoint

MB = 2**20
TEXT_WIDTH = 512
BUDGET = 16 * MB  # the bounded run: almost every matrix spilled

# VmHWM, not ru_maxrss: a child's ru_maxrss starts at its parent's high-water mark (Linux keeps
# it across fork and exec), and the parent here is a whole test session; VmHWM is the new
# process's own address space's.
_CHILD = """
import contextlib, json, sys
from pathlib import Path
from wyoming_qwen3tts.convert import pipeline
src, out, weights, budget, unbounded = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
import nncf, openvino  # noqa: F401  (loaded before the baseline: the libraries are not the conversion)
def hwm_kb():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
base = hwm_kb()
if unbounded:  # the path before the bound: every weight in RAM, every matrix quantised whole
    pipeline.row_blocked_quantiser = contextlib.nullcontext
pipeline.convert(src, out, weights=weights, weight_budget=budget, steady_chunks=(8,), first_chunks=(1,))
peak = hwm_kb()
print(json.dumps({"base_mb": base / 1024, "peak_mb": peak / 1024}))
"""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from qwen3tts_tools.synthetic import presets
    from qwen3tts_tools.synthetic.writer import write_checkpoint

    preset = replace(presets.PRESETS["tiny"], name="tiny-wide-text", text_hidden=TEXT_WIDTH)
    saved = dict(presets.PRESETS)
    presets.PRESETS[preset.name] = preset
    try:
        return write_checkpoint(tmp_path_factory.mktemp("wide-text"), preset.name, "custom_voice")
    finally:
        presets.PRESETS.clear()
        presets.PRESETS.update(saved)


def convert_in_child(src: Path, out: Path, weights: str, budget: int, unbounded: bool = False) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", _CHILD, str(src), str(out), weights, str(budget),
                           "1" if unbounded else "0"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_bounded_conversion_peaks_below_what_the_unbounded_one_needs(checkpoint, tmp_path):
    table_mb = 151936 * TEXT_WIDTH * 4 / MB  # the f32 text table, 297 MiB
    bounded = convert_in_child(checkpoint, tmp_path / "bounded", "int8", BUDGET)
    unbounded = convert_in_child(checkpoint, tmp_path / "unbounded", "int8", 2**40, unbounded=True)
    grown = {name: run["peak_mb"] - run["base_mb"] for name, run in (("bounded", bounded), ("unbounded", unbounded))}
    # before: the table widened (and its bf16 pages), plus the quantiser's intermediates of its
    # size; now: never the whole f32 table, only blocks of it (measured: 727 MB and 225 MB)
    assert grown["unbounded"] > 2 * table_mb, grown
    assert grown["bounded"] < table_mb, grown


# ----------------------------------------------------------------------------- values read back

def read_constants(xml: Path) -> dict[str, tuple[str, tuple[int, ...], np.ndarray]]:
    """Every Const layer of an IR by name: (element type, shape, raw bytes as uint8)."""
    blob = np.fromfile(xml.with_suffix(".bin"), np.uint8)
    out = {}
    for layer in ET.parse(xml).getroot().iter("layer"):
        if layer.get("type") != "Const":
            continue
        data = layer.find("data")
        assert data is not None
        shape = tuple(int(d) for d in data.get("shape", "").split(",") if d)
        offset, size = int(data.get("offset", 0)), int(data.get("size", 0))
        out[layer.get("name", "")] = (data.get("element_type", ""), shape, blob[offset:offset + size])
    return out


def values(element_type: str, shape: tuple[int, ...], raw: np.ndarray) -> np.ndarray:
    if element_type in ("i4", "u4"):  # two per byte, the first in the low nibble
        nibbles = np.stack([raw & 0x0F, raw >> 4], axis=-1).reshape(-1).astype(np.int16)
        if element_type == "i4":
            nibbles = np.where(nibbles >= 8, nibbles - 16, nibbles)
        return nibbles[: int(np.prod(shape))].reshape(shape).astype(np.float32)
    dtype = {"i8": np.int8, "u8": np.uint8, "f16": np.float16, "f32": np.float32}[element_type]
    return raw.view(dtype).reshape(shape).astype(np.float32)


def dequantised(constants: dict, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(weight as the runtime sees it, how far it may be from the original) for a compressed Constant.

    Symmetric: the scale is (the row's or group's) largest-magnitude value over the lowest level
    (-128, or -8 for 4 bits), so that value is exact and the rest round to the nearest level,
    half a step off at most; a value of the other sign and nearly that magnitude is clamped to
    the highest level (127, 7), up to a whole step off. The scale is stored as f16, which moves
    each level by up to 2^-11 of itself."""
    element_type = constants[name][0]
    q = values(*constants[name])
    if f"{name}/zero_point" in constants:
        q = q - values(*constants[f"{name}/zero_point"])
    bits = 4 if element_type in ("i4", "u4") else 8
    scale = values(*constants[f"{name}/scale"])  # one per row, or per group of a row: [rows, (groups,) 1]
    step = np.abs(scale)
    top = 2 ** (bits - 1) - 1
    slack = np.where(q >= top, 1.0, 0.5) + np.abs(q) * 2.0**-11
    return (q * scale).reshape(q.shape[0], -1), (step * slack + 1e-7).reshape(q.shape[0], -1)


def assert_quantised(constants: dict, name: str, reference: np.ndarray) -> None:
    weight, tolerance = dequantised(constants, name)
    worst = np.max(np.abs(weight - reference.reshape(weight.shape)) - tolerance)
    assert worst <= 0, f"{name}: dequantised values off by {worst} beyond the quantiser's tolerance"


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_the_bounded_conversion_writes_the_checkpoint_s_weights(checkpoint, tmp_path, weights):
    out = tmp_path / weights
    convert_in_child(checkpoint, out, weights, 0)  # every weight through the scratch file
    ckpt = Checkpoint(checkpoint)
    talker = read_constants(out / "talker.xml")
    for i in (0, 1):
        p = f"talker.model.layers.{i}."
        qkv = np.concatenate([ckpt.main.get(p + f"self_attn.{x}_proj.weight") for x in "qkv"])
        gate_up = np.concatenate([ckpt.main.get(p + f"mlp.{x}_proj.weight") for x in ("gate", "up")])
        assert_quantised(talker, f"talker.layer{i}.qkv", qkv)
        assert_quantised(talker, f"talker.layer{i}.gate_up", gate_up)
        assert_quantised(talker, f"talker.layer{i}.down", ckpt.main.get(p + "mlp.down_proj.weight"))
    assert_quantised(talker, "talker.head", ckpt.main.get("talker.codec_head.weight"))
    # the text table: the one matrix quantised in row blocks (INT8 in every preset)
    embed = read_constants(out / "embed.xml")
    table = ckpt.main.get("talker.model.text_embedding.weight")
    (name,) = [n for n, (t, shape, _) in embed.items() if shape == table.shape and t in ("i8", "u8")]
    assert_quantised(embed, name, table)
    # an f32 graph's weights come back exactly
    codec = read_constants(out / "codec.xml")
    conv = ckpt.codec.get("decoder.decoder.6.conv.weight")
    matches = [n for n, (t, shape, _) in codec.items() if t == "f32" and shape == conv.shape
               and np.array_equal(values(*codec[n]), conv)]
    assert matches, "the codec's last conv weight is not in codec.bin as the checkpoint has it"
