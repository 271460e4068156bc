"""The official qwen-tts implementation, loaded as the test oracle.

The loading logic (stand-ins for the unused 25 Hz tokenizer's imports, the hub-id
tokenizer, the checkpoint-vs-module-tree check) lives in wyoming_qwen3tts.bench.official,
shared with the benchmark. Importing this module registers the stand-ins and imports the
oracle stack: a missing oracle dependency fails the tests instead of skipping them.
"""
from __future__ import annotations

from wyoming_qwen3tts.bench.official import install_stubs, load_official

install_stubs()

import torch  # noqa: E402
from qwen_tts import Qwen3TTSModel  # noqa: E402,F401  (fails loudly when the oracle is missing)

torch.set_num_threads(2)

__all__ = ["load_official"]
