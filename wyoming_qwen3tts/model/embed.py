"""A prompt's talker input vectors, as the engine's embedding graph returns them.

The numpy reference that computes them from the checkpoint (the graph is checked against
it) is a test helper: tests/prompt_embedder.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PromptEmbeds:
    prefill: np.ndarray  # [L, H] float32
    trailing: np.ndarray  # [M, H] float32, one per generated frame (then tts_pad)
    # In-context cloning: the reference codes [R, 16]. The official implementation decodes
    # them in front of the generated codes and cuts their audio off, so the codec's first
    # generated frame is heard after the reference; the runners start the stream from there.
    codec_prefix: np.ndarray | None = None
