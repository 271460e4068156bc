"""Prompt embeddings in numpy: the talker's input vectors for a laid-out prompt.

This is the plain-math reference of the talker's input side (text track through the
text-projection MLP, codec track from the codec embedding, speaker vectors and
reference-frame sums); the embedding graph and the official numbers are both checked
against it. Only the embedding rows a prompt uses are read from the checkpoint.
"""
from __future__ import annotations

import numpy as np

from wyoming_qwen3tts.model.checkpoint import Checkpoint
from wyoming_qwen3tts.model.embed import PromptEmbeds
from wyoming_qwen3tts.model.prompt import NO_CODEC, NO_TEXT, REF_FRAME, SPEAKER_SLOT, Prompt


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


class PromptEmbedder:
    """Embeds prompts of one checkpoint (float32)."""

    def __init__(self, ckpt: Checkpoint) -> None:
        self.ckpt = ckpt
        store = ckpt.main
        self._fc1_w = store.get("talker.text_projection.linear_fc1.weight")
        self._fc1_b = store.get("talker.text_projection.linear_fc1.bias")
        self._fc2_w = store.get("talker.text_projection.linear_fc2.weight")
        self._fc2_b = store.get("talker.text_projection.linear_fc2.bias")
        self.hidden_size = ckpt.spec.talker.stack.hidden_size

    def text(self, ids: np.ndarray) -> np.ndarray:
        """text_projection(text_embedding(ids)) -> [n, H]."""
        x = self.ckpt.main.rows("talker.model.text_embedding.weight", ids)
        return silu(x @ self._fc1_w.T + self._fc1_b) @ self._fc2_w.T + self._fc2_b

    def codec(self, ids: np.ndarray) -> np.ndarray:
        """Rows of the talker's codec embedding -> [n, H]."""
        return self.ckpt.main.rows("talker.model.codec_embedding.weight", ids)

    def frames(self, codes: np.ndarray) -> np.ndarray:
        """Sum of the 16 codebook embeddings of each frame [R, G] -> [R, H]: group 0 from the
        talker's codec embedding, groups 1.. from the code predictor's tables (talker space)."""
        out = self.codec(codes[:, 0])
        for g in range(1, codes.shape[1]):
            out = out + self.ckpt.main.rows(f"talker.code_predictor.model.codec_embedding.{g - 1}.weight", codes[:, g])
        return out

    def __call__(self, prompt: Prompt) -> PromptEmbeds:
        n, h = len(prompt), self.hidden_size
        codec = prompt.codec_ids
        if ((codec < 0) & ~np.isin(codec, (NO_CODEC, SPEAKER_SLOT, REF_FRAME))).any():
            raise ValueError("prompt has an unknown codec-track marker")
        out = np.zeros((n, h), np.float32)
        has_text = prompt.text_ids != NO_TEXT
        if has_text.any():
            out[has_text] = self.text(prompt.text_ids[has_text])
        rows = codec >= 0
        if rows.any():
            out[rows] += self.codec(codec[rows])
        if (codec == SPEAKER_SLOT).any():
            if prompt.speaker_vector is None:
                raise ValueError("prompt has a speaker slot but no speaker vector")
            out[codec == SPEAKER_SLOT] += prompt.speaker_vector
        ref = codec == REF_FRAME
        if ref.any():
            if prompt.ref_codes is None or prompt.ref_codes.shape[0] != int(ref.sum()):
                raise ValueError("prompt reference frames do not match its reference codes")
            out[ref] += self.frames(prompt.ref_codes)
        return PromptEmbeds(prefill=out, trailing=self.text(prompt.trailing_text_ids), codec_prefix=prompt.ref_codes)
