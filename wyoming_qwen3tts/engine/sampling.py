"""Sampling semantics of the official implementation (docs/MODEL.md §6).

Talker logits go through, in transformers' order: repetition penalty over the group-0
codes generated so far (never the prompt) → EOS masked for the first `min_new_tokens`
frames → control ids 2048..3071 suppressed except EOS → temperature → top-k → top-p →
draw. Greedy takes the argmax after the first three (the penalty applies to greedy too).
The sub-talker has no penalty and no suppression; its sampling runs inside the subcode
graph with the same temperature/top-k/top-p rule. Draws use host uniforms from a
per-request generator, so a seed reproduces a result whatever else is in the batch.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from ..model.spec import GenerationDefaults

MIN_NEW_TOKENS = 2
SUPPRESSED_IDS = 1024  # the talker vocabulary's last ids, never drawn but EOS (docs/MODEL.md §6)


@dataclass(frozen=True)
class SamplingParams(GenerationDefaults):
    """The checkpoint's generation defaults, overridable per request, plus a seed."""

    seed: int | None = None
    min_frames: int = MIN_NEW_TOKENS  # EOS is masked before this many frames (benchmarks hold it off)

    @classmethod
    def from_defaults(cls, gen: GenerationDefaults, **overrides: Any) -> SamplingParams:
        """generation_config.json values with per-request overrides (None = keep)."""
        params = replace(cls(**asdict(gen)), **{k: v for k, v in overrides.items() if v is not None})
        params.validate()
        return params

    def frame_limit(self, cap: int | None = None) -> int:
        """Frames a request may make: max_new_tokens counts group-0 draws, and the last
        draw is never a frame; `cap` lowers it further."""
        return self.max_new_tokens - 1 if cap is None else min(cap, self.max_new_tokens - 1)

    def greedy(self) -> SamplingParams:
        return replace(self, do_sample=False, subtalker_do_sample=False)

    def validate(self) -> None:
        for name in ("temperature", "subtalker_temperature"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0 (use greedy decoding instead of 0)")
        for name in ("top_p", "subtalker_top_p"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in (0, 1]")
        if self.repetition_penalty <= 0:
            raise ValueError("repetition_penalty must be > 0")
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")


def suppress_from(vocab_size: int) -> int:
    """The first talker id that is never drawn (but EOS)."""
    return vocab_size - SUPPRESSED_IDS


def process_talker_logits(logits: np.ndarray, generated: np.ndarray, step: int, penalty: float,
                          eos: int, vocab_size: int, min_frames: int = MIN_NEW_TOKENS) -> np.ndarray:
    """Penalty → EOS masking → suppression, on a copy of one row of talker logits [V]."""
    z = logits.astype(np.float32, copy=True)
    if penalty != 1.0 and generated.size:
        ids = np.unique(generated)
        scores = z[ids]
        z[ids] = np.where(scores < 0, scores * np.float32(penalty), scores / np.float32(penalty))
    if step < min_frames:
        z[eos] = -np.inf
    keep_eos = z[eos]
    z[suppress_from(vocab_size):] = -np.inf
    z[eos] = keep_eos
    return z


def sample_row(z: np.ndarray, temperature: float, top_k: int, top_p: float, uniform: float) -> int:
    """Temperature → top-k (ties at the k-th value kept, as transformers does) → top-p
    (smallest head whose probability reaches top_p, at least one) → inverse-CDF draw over
    the kept ids in descending probability."""
    z = z.astype(np.float64) / temperature
    if 0 < top_k < z.size:
        kth = np.partition(z, -top_k)[-top_k]
        z = np.where(z < kth, -np.inf, z)
    order = np.argsort(-z, kind="stable")
    logits = z[order]
    probs = np.exp(logits - logits[0])
    probs /= probs.sum()
    if top_p < 1.0:
        cum = np.cumsum(probs)
        keep = int(np.searchsorted(cum, top_p) + 1)
        probs = probs[:keep] / probs[:keep].sum()
    cum = np.cumsum(probs)
    return int(order[min(int(np.searchsorted(cum, uniform * cum[-1], side="right")), len(cum) - 1)])
