"""Write a synthetic checkpoint directory: configs, tokenizer files, random weights.

Tensors are produced and written one at a time (a full-size 1.7B checkpoint never sits
in memory) from a generator seeded by (seed, tensor name), so every tensor is the same
whatever the order, dtype or sharding it is written with.
"""
from __future__ import annotations

import json
import logging
import math
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from wyoming_qwen3tts.model.safetensors import write_streaming
from wyoming_qwen3tts.model.spec import parse_model_config
from wyoming_qwen3tts.model.weights import talker_shapes

from .codec_layout import (
    codec_tensors,
    speaker_encoder_tensors,
    speech_tokenizer_config,
    speech_tokenizer_preprocessor_config,
)
from .layout import TensorSpec
from .presets import GENERATION_CONFIG, PRESETS, Preset, model_config
from .vocab import qwen_base_ranks, tiny_ranks, write_tokenizer_files

log = logging.getLogger(__name__)

_ST_METADATA = {"format": "pt"}


def _talker_init(name: str, shape: tuple[int, ...], p: Preset, dtype: str) -> TensorSpec:
    """Random values that keep full-size activations O(1) and tiny logits non-degenerate.

    Norm weights and biases are random too (not ones/zeros), so a graph that drops one of
    them cannot match the official implementation by accident.
    """
    if len(shape) == 1:
        if name.endswith("norm.weight"):
            return TensorSpec(name, shape, dtype, "uniform", low=0.5, high=1.5)
        return TensorSpec(name, shape, dtype, "normal", std=0.1)
    if not p.full_size:
        return TensorSpec(name, shape, dtype, "normal", std=0.2)
    if "embedding" in name:
        return TensorSpec(name, shape, dtype, "normal", std=0.5)
    return TensorSpec(name, shape, dtype, "normal", std=1.0 / math.sqrt(shape[1]))


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _write_tensors(out_dir: Path, stem: str, specs: Sequence[TensorSpec], seed: int, shards: int) -> None:
    """Write specs into `stem`.safetensors, or `shards` files plus the HF index json."""
    by_name = {s.name: s for s in specs}

    def produce(name: str) -> Iterator[np.ndarray]:
        return by_name[name].blocks(_rng(seed, name))

    if shards <= 1:
        write_streaming(out_dir / f"{stem}.safetensors", [(s.name, s.dtype, s.shape) for s in specs],
                        produce, _ST_METADATA)
        return
    sizes = [math.prod(s.shape) * np.dtype(s.dtype if s.dtype != "bfloat16" else "float16").itemsize for s in specs]
    total, target = sum(sizes), sum(sizes) / shards
    groups: list[list[TensorSpec]] = [[]]
    acc = 0.0
    for s, size in zip(specs, sizes):
        if groups[-1] and acc + size > target * len(groups) and len(groups) < shards:
            groups.append([])
        groups[-1].append(s)
        acc += size
    weight_map: dict[str, str] = {}
    for i, group in enumerate(groups, 1):
        fname = f"{stem}-{i:05d}-of-{len(groups):05d}.safetensors"
        write_streaming(out_dir / fname, [(s.name, s.dtype, s.shape) for s in group], produce, _ST_METADATA)
        weight_map.update({s.name: fname for s in group})
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out_dir / f"{stem}.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def _dump(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_checkpoint(out_dir: str | Path, preset: str = "tiny", variant: str = "custom_voice", seed: int = 0,
                     dtype: str = "bfloat16", shards: int = 1) -> Path:
    """Write a complete synthetic checkpoint and return its directory.

    dtype: the main model's weight dtype (the releases use bfloat16; float16/float32 exist
    to exercise the loader). The codec is always float32, as released.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r} (expected one of {', '.join(PRESETS)})")
    p = PRESETS[preset]
    out = Path(out_dir)
    (out / "speech_tokenizer").mkdir(parents=True, exist_ok=True)
    config = model_config(preset, variant)
    codec_config = speech_tokenizer_config(p.codec)
    _dump(out / "config.json", config)
    _dump(out / "generation_config.json", GENERATION_CONFIG)
    _dump(out / "speech_tokenizer" / "config.json", codec_config)
    _dump(out / "speech_tokenizer" / "preprocessor_config.json", speech_tokenizer_preprocessor_config())
    write_tokenizer_files(out, qwen_base_ranks() if p.full_size else tiny_ranks())

    spec = parse_model_config(config, GENERATION_CONFIG, codec_config)
    main = [_talker_init(n, s, p, dtype) for n, s in talker_shapes(spec).items()]
    if variant == "base":
        main += [TensorSpec(t.name, t.shape, dtype if t.dtype == "bfloat16" else t.dtype, t.init, t.std, t.low, t.high)
                 for t in speaker_encoder_tensors(config["speaker_encoder_config"])]
    log.info("writing %d main tensors (%.1f M parameters)", len(main), sum(math.prod(t.shape) for t in main) / 1e6)
    _write_tensors(out, "model", main, seed, shards)
    _write_tensors(out / "speech_tokenizer", "model", codec_tensors(codec_config), seed, 1)
    return out
