"""Shared fixtures: synthetic checkpoints written once per session."""
from __future__ import annotations

import logging
import types
from pathlib import Path

import pytest

from qwen3tts_tools.synthetic.writer import write_checkpoint


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
    config.addinivalue_line("markers", "oracle: compares with the official PyTorch implementation (the slow tier)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Two tiers in one run: the modules that load the official implementation (they import
    the `oracle` test module) are marked `oracle` and run last, so a broken build or server
    fails within minutes; `-m "not oracle"` runs the fast tier alone."""
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and _uses_oracle(module):
            item.add_marker(pytest.mark.oracle)
    items.sort(key=lambda item: item.get_closest_marker("oracle") is not None)  # stable: files keep their order


def _uses_oracle(module: object) -> bool:
    """The module imported the oracle, directly or through parity.py."""
    for value in vars(module).values():
        name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if name in ("oracle", "parity"):
            return True
    return False
