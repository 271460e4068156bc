"""Compile properties per graph, in one place.

CPU OpenVINO silently defaults to bf16 inference and a u8 KV cache on CPUs with native
bf16: every property that changes numbers is therefore set explicitly.
"""
from __future__ import annotations

from typing import Any

PRECISIONS = ("f32", "bf16", "f16")
KV_PRECISIONS = ("u8", "f16", "f32")


def compile_config(precision: str = "f32", kv_precision: str | None = None, threads: int | None = None) -> dict[str, Any]:
    """Properties for one graph; `kv_precision` only for the paged talker; `threads` caps
    the inference threads (None: the plugin's choice, every core)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (expected one of {', '.join(PRECISIONS)})")
    config: dict[str, Any] = {"INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": "LATENCY"}
    if kv_precision is not None:
        if kv_precision not in KV_PRECISIONS:
            raise ValueError(f"unknown KV cache precision {kv_precision!r} (expected one of {', '.join(KV_PRECISIONS)})")
        config["KV_CACHE_PRECISION"] = kv_precision
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        config["INFERENCE_NUM_THREADS"] = threads
    return config
