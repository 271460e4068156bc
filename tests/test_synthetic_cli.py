"""qwen3tts-synthetic as a command: writes a checkpoint our reader and tokenizer open."""
from __future__ import annotations

import subprocess
import sys

import numpy as np

from wyoming_qwen3tts.model.checkpoint import Checkpoint
from wyoming_qwen3tts.model.tokenizer import TextTokenizer


def test_cli_writes_a_loadable_checkpoint(tmp_path):
    out = tmp_path / "vd"
    subprocess.run([sys.executable, "-m", "qwen3tts_tools.synthetic.cli", str(out), "--preset", "tiny-1.7b",
                    "--variant", "voice_design", "--seed", "7"], check=True, timeout=300)
    ckpt = Checkpoint(out)
    assert ckpt.spec.model_type == "voice_design" and ckpt.spec.code_predictor.has_projection
    assert TextTokenizer.from_dir(out).encode("<|im_start|>")[0] == 151644


def test_seed_changes_weights_and_is_reproducible(checkpoint_factory):
    a = Checkpoint(checkpoint_factory("tiny", "custom_voice", seed=1)).main.get("talker.codec_head.weight")
    b = Checkpoint(checkpoint_factory("tiny", "custom_voice", seed=2)).main.get("talker.codec_head.weight")
    c = Checkpoint(checkpoint_factory("tiny", "custom_voice", seed=1, dtype="bfloat16")).main.get(
        "talker.codec_head.weight")
    assert not np.array_equal(a, b)
    assert np.array_equal(a, c)
