"""The official qwen-tts implementation, loaded as the test oracle.

qwen-tts is installed with --no-deps; its package __init__ imports the unused 25 Hz
tokenizer, which imports `sox`, `onnxruntime` and `torchaudio.compliance.kaldi` at import
time. None of them is used by the 12 Hz models, so empty stand-in modules are registered
before the import. Everything else (torch, transformers, librosa, soundfile) is real and
must be installed: a missing oracle dependency fails the tests instead of skipping them.
"""
from __future__ import annotations

import importlib.machinery
import sys
import types
from pathlib import Path
from typing import Any

_STUBBED = ("sox", "onnxruntime", "torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi")


def _install_stubs() -> None:
    for name in _STUBBED:
        if name in sys.modules:
            continue
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, loader=None)
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)


_install_stubs()

import torch  # noqa: E402
from qwen_tts import Qwen3TTSModel  # noqa: E402
from transformers import Qwen2TokenizerFast  # noqa: E402

torch.set_num_threads(2)


def load_official(model_dir: str | Path) -> Any:
    """Load a checkpoint directory into the official wrapper through its own from_pretrained.

    Fails if any weight of the official module tree is missing from the checkpoint or any
    checkpoint weight is unexpected: that is the proof that a synthetic checkpoint has the
    real layout. (Checked against the files directly: the official from_pretrained forwards
    `output_loading_info` to the codec loader and breaks on it.)
    """
    from safetensors import safe_open

    model_dir = Path(model_dir)
    wrapper = Qwen3TTSModel.from_pretrained(str(model_dir), dtype=torch.float32)
    # Loaded from a local directory whose config says transformers 4.57.3, the wrapper's
    # fix_mistral_regex=True swaps in the Mistral-fix split regex; loaded by hub id (what
    # users of the official package do) it keeps the canonical Qwen2 regex. The oracle
    # follows the hub-id path, which is the behaviour our tokenizer reproduces.
    wrapper.processor.tokenizer = Qwen2TokenizerFast.from_pretrained(str(model_dir))
    model = wrapper.model
    for module, folder in ((model, model_dir), (model.speech_tokenizer.model, model_dir / "speech_tokenizer")):
        names: set[str] = set()
        for path in folder.glob("model*.safetensors"):
            with safe_open(str(path), "pt") as f:
                names.update(f.keys())
        expected = set(module.state_dict())
        if names != expected:
            raise AssertionError(f"{folder}: official module tree and checkpoint disagree; missing "
                                 f"{sorted(expected - names)[:5]}, unexpected {sorted(names - expected)[:5]}")
    model.eval()
    return wrapper
