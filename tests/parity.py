"""The official implementation and ours side by side on one checkpoint (prompt inputs)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import oracle
import torch
from prompt_embedder import PromptEmbedder

from wyoming_qwen3tts.model.checkpoint import Checkpoint
from wyoming_qwen3tts.model.prompt import VoiceRequest, build_prompt
from wyoming_qwen3tts.model.tokenizer import TextTokenizer

TOLERANCE = 1e-5


@dataclass
class Captured:
    inputs_embeds: list[torch.Tensor] = field(default_factory=list)
    trailing: list[torch.Tensor] = field(default_factory=list)


class Official:
    """The official wrapper for one checkpoint, with the talker's inputs captured."""

    def __init__(self, model_dir) -> None:
        self.wrapper = oracle.load_official(model_dir)
        self.captured = Captured()
        talker = self.wrapper.model.talker
        talker.model.register_forward_pre_hook(self._pre_hook, with_kwargs=True)
        original_generate = talker.generate

        def generate(*args: Any, **kwargs: Any):
            self.captured.trailing.append(kwargs["trailing_text_hidden"].detach().clone())
            return original_generate(*args, **kwargs)

        talker.generate = generate

    def _pre_hook(self, module, args, kwargs):
        embeds = kwargs.get("inputs_embeds")
        if embeds is not None and len(self.captured.inputs_embeds) == len(self.captured.trailing) - 1:
            self.captured.inputs_embeds.append(embeds.detach().clone())  # the prefill call only

    def run(self, method: str, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
        self.captured = Captured()
        greedy = dict(do_sample=False, subtalker_dosample=False, max_new_tokens=3)
        getattr(self.wrapper, method)(**kwargs, **greedy)
        assert len(self.captured.inputs_embeds) == 1 and len(self.captured.trailing) == 1
        return self.captured.inputs_embeds[0][0].numpy(), self.captured.trailing[0][0].numpy()


class Ours:
    def __init__(self, model_dir) -> None:
        self.ckpt = Checkpoint(model_dir)
        self.tokenizer = TextTokenizer.from_dir(model_dir)
        self.embed = PromptEmbedder(self.ckpt)

    def run(self, req: VoiceRequest) -> tuple[np.ndarray, np.ndarray]:
        e = self.embed(build_prompt(self.ckpt.spec, self.tokenizer, req))
        return e.prefill, e.trailing


def assert_same(ours: tuple[np.ndarray, np.ndarray], official: tuple[np.ndarray, np.ndarray]) -> None:
    for name, a, b in zip(("prefill", "trailing"), ours, official):
        assert a.shape == b.shape, f"{name}: {a.shape} vs official {b.shape}"
        diff = float(np.max(np.abs(a - b)))
        assert diff <= TOLERANCE, f"{name}: max abs diff {diff:.3g}"
    assert float(np.abs(official[0]).max()) > 0.1  # the comparison is not between zeros
