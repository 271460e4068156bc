"""The official qwen-tts implementation, loaded as the test oracle.

The loading logic (stand-ins for the unused 25 Hz tokenizer's imports, the hub-id
tokenizer, the checkpoint-vs-module-tree check) lives in qwen3tts_tools.bench.official,
shared with the benchmark. Importing this module registers the stand-ins and imports the
oracle stack: a missing oracle dependency fails the tests instead of skipping them.
"""
from __future__ import annotations

from qwen3tts_tools.bench.official import install_stubs, load_official

install_stubs()

import torch  # noqa: E402
from qwen_tts import Qwen3TTSModel  # noqa: E402,F401  (fails loudly when the oracle is missing)

torch.set_num_threads(2)

__all__ = ["CodeCapture", "decode", "load_official"]


def decode(decoder, codes):
    """The official codec decoder's one forward over codes [B, 16, T] -> pcm [B, T·1920]."""
    with torch.no_grad():
        return decoder(torch.from_numpy(codes)).numpy()[:, 0]


class CodeCapture:
    """The official wrapper on a checkpoint, keeping the codes of its last generate() call
    (the wrappers return audio only)."""

    def __init__(self, model_dir) -> None:
        self.wrapper = load_official(model_dir)
        self.codes: list = []
        generate = self.wrapper.model.generate

        def capture(*args, **kwargs):
            codes, hidden = generate(*args, **kwargs)
            self.codes = [c.numpy() for c in codes]
            return codes, hidden

        self.wrapper.model.generate = capture
