"""Shared fixtures: synthetic checkpoints written once per session."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from wyoming_qwen3tts.model.synthetic.writer import write_checkpoint


@pytest.fixture(scope="session")
def checkpoint_factory(tmp_path_factory: pytest.TempPathFactory):
    """make(preset, variant, **options) -> directory of a synthetic checkpoint (cached)."""
    cache: dict[tuple, Path] = {}

    def make(preset: str = "tiny", variant: str = "custom_voice", **options) -> Path:
        key = (preset, variant, tuple(sorted(options.items())))
        if key not in cache:
            name = "-".join(str(k) for k in (preset, variant, *options.values()))
            cache[key] = write_checkpoint(tmp_path_factory.mktemp(name), preset, variant, **options)
        return cache[key]

    return make


@pytest.fixture(scope="session")
def converted_factory(checkpoint_factory, tmp_path_factory: pytest.TempPathFactory):
    """make(preset, variant, weights, **checkpoint_options) -> a converted directory (cached)."""
    from wyoming_qwen3tts.convert.pipeline import convert

    cache: dict[tuple, Path] = {}

    def make(preset: str = "tiny", variant: str = "custom_voice", weights: str = "int8", **options) -> Path:
        key = (preset, variant, weights, tuple(sorted(options.items())))
        if key not in cache:
            src = checkpoint_factory(preset, variant, **options)
            out = tmp_path_factory.mktemp("converted") / "-".join(map(str, key[:3]))
            cache[key] = convert(src, out, weights=weights)
        return cache[key]

    return make


def pytest_configure(config: pytest.Config) -> None:
    logging.getLogger("wyoming_qwen3tts").setLevel(logging.INFO)
