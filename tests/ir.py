"""Graphs as the runtime meets them: saved, read back and compiled on the CPU in f32."""
from __future__ import annotations

from pathlib import Path

import openvino as ov

F32 = {"INFERENCE_PRECISION_HINT": "f32"}


def round_trip(model: ov.Model, path: Path) -> ov.CompiledModel:
    """Save, read back and compile: CPU-plugin bugs have shown only after this."""
    ov.save_model(model, path, compress_to_fp16=False)
    core = ov.Core()
    return core.compile_model(core.read_model(path), "CPU", F32)
