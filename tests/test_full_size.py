"""A full-size synthetic checkpoint (0.6B CustomVoice, real shapes, real vocabulary).

Written with `qwen3tts-synthetic`'s writer, loaded by the official implementation through
its own from_pretrained (the layout proof at real size), with our prompt embeddings
checked against the official ones on the real tokenizer, and our reader shown to be lazy.
"""
from __future__ import annotations

import math
import resource

import numpy as np
import oracle  # noqa: F401  (fails loudly when the oracle stack is missing)
import pytest
from parity import Official, Ours, assert_same

from wyoming_qwen3tts.model.checkpoint import Checkpoint
from wyoming_qwen3tts.model.prompt import VoiceRequest

# Parameter counts of the released architecture (docs/MODEL.md §12): 0.6B-Base 914.64 M with an
# 8.85 M speaker encoder -> 905.79 M for CustomVoice; codec decoder 114.32 M.
TALKER_PARAMS = 905_788_672
CODEC_DECODER_PARAMS = 114_323_137


@pytest.fixture(scope="module")
def full_dir(checkpoint_factory):
    return checkpoint_factory("0.6b", "custom_voice")


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1e6


def test_real_parameter_count(full_dir):
    ckpt = Checkpoint(full_dir)
    assert sum(math.prod(ckpt.main.shape(n)) for n in ckpt.main.names()) == TALKER_PARAMS
    assert {ckpt.main.dtype(n) for n in ckpt.main.names()} == {"BF16"}
    decoder = [n for n in ckpt.codec.names() if n.startswith("decoder.")]
    assert sum(math.prod(ckpt.codec.shape(n)) for n in decoder) == CODEC_DECODER_PARAMS
    assert {ckpt.codec.dtype(n) for n in ckpt.codec.names()} == {"F32"}
    assert ckpt.spec.talker.stack.num_layers == 28 and ckpt.spec.talker.stack.hidden_size == 1024


def test_reader_is_lazy(full_dir):
    before = _rss_mb()
    ckpt = Checkpoint(full_dir)  # 1.8 GB of weights + 0.7 GB of codec behind it
    rows = ckpt.main.rows("talker.model.text_embedding.weight", [0, 151671, 77091])
    layer = ckpt.main.get("talker.model.layers.27.mlp.down_proj.weight")
    assert rows.shape == (3, 2048) and layer.shape == (1024, 3072)
    grown = _rss_mb() - before
    assert grown < 100, f"opening a full-size checkpoint and reading one layer grew RSS by {grown:.0f} MB"


def test_official_loads_and_prompts_match(full_dir):
    official, ours = Official(full_dir), Ours(full_dir)
    for text, speaker, language, non_streaming in [
        ("Hello world! GitHub's iPhone costs $1,299.50 — isn't that something?", "ryan", "english", True),
        ("今天天气很好，我们去公园散步吧。", "eric", "auto", False),
    ]:
        expected = official.run("generate_custom_voice", text=text, speaker=speaker, language=language,
                                non_streaming_mode=non_streaming)
        got = ours.run(VoiceRequest(text=text, speaker=speaker, language=language, non_streaming=non_streaming))
        assert_same(got, expected)
    codes, _ = official.wrapper.model.generate(
        input_ids=[official.wrapper._tokenize_texts(["<|im_start|>assistant\nTesting.<|im_end|>\n"
                                                     "<|im_start|>assistant\n"])[0]],
        languages=["english"], speakers=["ryan"], non_streaming_mode=True, do_sample=False,
        subtalker_dosample=False, repetition_penalty=1.0, max_new_tokens=4)
    frames = codes[0].numpy()
    assert frames.shape == (3, 16), "greedy generation stopped early: degenerate logits"
    assert len(np.unique(frames)) > 8, f"degenerate codes {frames}"
