"""A Hugging Face Qwen3-TTS 12 Hz repository directory, read without torch.

Layout (as the released repos ship it):
    config.json  generation_config.json  model.safetensors | model.safetensors.index.json + shards
    vocab.json  merges.txt  tokenizer_config.json
    speech_tokenizer/{config.json, model.safetensors[, preprocessor_config.json, configuration.json]}
Tensors are memory-mapped and converted only when asked for, one tensor (or a few rows)
at a time, so opening a 1.7B checkpoint costs almost no memory.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .safetensors import SafetensorsError, SafetensorsFile, to_float32
from .spec import ConfigError, ModelSpec, parse_model_config
from .weights import talker_shapes

log = logging.getLogger(__name__)

REQUIRED_FILES = ("config.json", "generation_config.json", "vocab.json", "merges.txt", "tokenizer_config.json",
                  "speech_tokenizer/config.json")


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file or tensor."""


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"missing file {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON: {e}") from None


class TensorStore:
    """The tensors of one safetensors file or one sharded set, by name."""

    def __init__(self, root: Path, single: str, index: str) -> None:
        files: dict[str, SafetensorsFile] = {}
        self._where: dict[str, SafetensorsFile] = {}
        try:
            if (root / index).exists():
                weight_map = _read_json(root / index).get("weight_map")
                if not isinstance(weight_map, dict):
                    raise CheckpointError(f"{root / index} has no weight_map")
                for name, shard in weight_map.items():
                    if shard not in files:
                        files[shard] = SafetensorsFile(root / shard)
                    if name not in files[shard].names():
                        raise CheckpointError(f"tensor {name} is listed in {root / index} "
                                              f"but missing from {root / shard}")
                    self._where[name] = files[shard]
            elif (root / single).exists():
                f = SafetensorsFile(root / single)
                self._where = {name: f for name in f.names()}
            else:
                raise CheckpointError(f"missing file {root / single} (nor a sharded {root / index})")
        except SafetensorsError as e:
            raise CheckpointError(str(e)) from None

    def names(self) -> list[str]:
        return list(self._where)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def _file(self, name: str) -> SafetensorsFile:
        try:
            return self._where[name]
        except KeyError:
            raise CheckpointError(f"missing tensor {name}") from None

    def shape(self, name: str) -> tuple[int, ...]:
        return self._file(name).info(name).shape

    def dtype(self, name: str) -> str:
        return self._file(name).info(name).dtype

    def check(self, name: str, shape: Sequence[int]) -> None:
        got = self.shape(name)
        if got != tuple(shape):
            raise CheckpointError(f"tensor {name} in {self._file(name).path} has shape {got}, expected {tuple(shape)}")

    def get(self, name: str, shape: Sequence[int] | None = None) -> np.ndarray:
        """The whole tensor as float32 (a fresh array)."""
        if shape is not None:
            self.check(name, shape)
        f = self._file(name)
        array = to_float32(f.raw(name), f.info(name).dtype)
        f.release(name)  # copied: its mapped pages are not needed again
        return array

    def row_blocks(self, name: str, block_bytes: int) -> Iterator[np.ndarray]:
        """The tensor as float32 blocks of rows (axis 0) of about `block_bytes` each, each block's
        mapped pages dropped once it is converted: a large table never exists whole in f32."""
        f = self._file(name)
        raw = f.raw(name)
        if raw.ndim == 0 or raw[:1].size == 0:
            yield to_float32(raw, f.info(name).dtype)
            return
        rows = max(1, block_bytes // (raw[:1].size * 4))
        for lo in range(0, raw.shape[0], rows):
            yield to_float32(raw[lo:lo + rows], f.info(name).dtype)
            f.release(name, slice(lo, lo + rows))

    def rows(self, name: str, index: Iterable[int]) -> np.ndarray:
        """Selected rows of a 2-D tensor as float32, reading only those rows (embedding lookups)."""
        f = self._file(name)
        raw = f.raw(name)
        idx = np.asarray(list(index), dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= raw.shape[0]):
            raise CheckpointError(f"row index out of range for tensor {name} with {raw.shape[0]} rows")
        return to_float32(raw[idx], f.info(name).dtype)


class Checkpoint:
    """An opened checkpoint directory: its spec and lazy access to all tensors."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise CheckpointError(f"checkpoint directory {self.root} does not exist")
        for rel in REQUIRED_FILES:
            if not (self.root / rel).is_file():
                raise CheckpointError(f"missing file {self.root / rel}")
        self.config = _read_json(self.root / "config.json")
        self.generation_config = _read_json(self.root / "generation_config.json")
        self.codec_config = _read_json(self.root / "speech_tokenizer" / "config.json")
        try:
            self.spec: ModelSpec = parse_model_config(self.config, self.generation_config, self.codec_config,
                                                      where=str(self.root / "config.json"))
        except ConfigError as e:
            raise CheckpointError(str(e)) from None
        self.main = TensorStore(self.root, "model.safetensors", "model.safetensors.index.json")
        self.codec = TensorStore(self.root / "speech_tokenizer", "model.safetensors", "model.safetensors.index.json")
        self._check_talker()
        log.info("opened %s: %s %s, talker %d layers × %d, %d speakers", self.root, self.spec.model_type,
                 self.spec.model_size, self.spec.talker.stack.num_layers, self.spec.talker.stack.hidden_size,
                 len(self.spec.speakers))

    def _check_talker(self) -> None:
        for name, shape in talker_shapes(self.spec).items():
            self.main.check(name, shape)
        if self.spec.model_type == "base" and not any(n.startswith("speaker_encoder.") for n in self.main.names()):
            raise CheckpointError(f"{self.root / 'model.safetensors'}: a base model needs speaker_encoder.* tensors")
