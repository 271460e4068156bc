"""The server's first-start conversion in a child process (convert/child.py): what the child
raises comes back as the same error, and nothing is left behind."""
from __future__ import annotations

import pytest

from wyoming_qwen3tts.convert.child import convert_in_child
from wyoming_qwen3tts.convert.pipeline import ConvertError
from wyoming_qwen3tts.model.checkpoint import CheckpointError
from wyoming_qwen3tts.model.manifest import read_converted


def test_a_conversion_in_a_child_is_a_conversion(checkpoint_factory, tmp_path):
    out = convert_in_child(checkpoint_factory("tiny"), tmp_path / "out", weights="fp32", steady_chunks=(8,))
    manifest, _ = read_converted(out)
    assert manifest["options"]["weights"] == "fp32" and manifest["options"]["steady_chunks"] == [8]


def test_a_child_s_errors_come_back_as_they_were(checkpoint_factory, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    with pytest.raises(CheckpointError, match="missing file"):
        convert_in_child(broken, tmp_path / "a", weights="fp32")
    with pytest.raises(ConvertError, match="neither a checkpoint directory nor a hub repo id"):
        convert_in_child(tmp_path / "absent", tmp_path / "a", weights="fp32")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("mine")
    with pytest.raises(ConvertError, match="already exists"):
        convert_in_child(checkpoint_factory("tiny"), tmp_path / "taken", weights="fp32")
    with pytest.raises(ConvertError, match="unknown weight format"):
        convert_in_child(checkpoint_factory("tiny"), tmp_path / "b", weights="int3")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "taken"]
