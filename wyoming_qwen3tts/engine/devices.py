"""Where each graph runs, and the compile properties per device, in one place.

CPU OpenVINO silently defaults to bf16 inference and a u8 KV cache on CPUs with native
bf16: every property that changes numbers is therefore set explicitly. A device that is
not there falls back to the CPU with one warning; the NPU compiles static shapes only,
so it may take the codec decoder (its chunk graphs are static) and nothing else.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

PRECISIONS = ("f32", "bf16", "f16")
KV_PRECISIONS = ("u8", "f16", "f32")
GRAPHS = ("talker", "subcode", "decoder")
STATIC_GRAPHS = ("decoder",)  # exported with static shapes (the codec chunk graphs)
STATIC_ONLY_DEVICES = ("NPU",)


class DeviceError(ValueError):
    """A graph asked of a device that cannot run it."""


def _kind(device: str) -> str:
    return device.split(".")[0]


def static_batch(device: str) -> int:
    """Batch the codec chunk graphs are fixed to on `device` (0: left dynamic). A static
    batch of 1 on the CPU lets the plugin fuse SnakeBeta (the decoder is compute-bound,
    batching streams saves little); static-shape-only devices need it."""
    return 1 if _kind(device) == "CPU" or _kind(device) in STATIC_ONLY_DEVICES else 0


def dynamic_device(device: str) -> str:
    """`device` for a graph with dynamic shapes: the CPU instead of a static-only device."""
    return "CPU" if _kind(device) in STATIC_ONLY_DEVICES else device


def place(requested: Mapping[str, str], available: Sequence[str]) -> dict[str, str]:
    """Each graph's device: the requested one when OpenVINO has it (GPU matches GPU.0 ...),
    else the CPU with a warning; AUTO is left to OpenVINO. Raises DeviceError when a
    static-shape-only device is asked to run a graph with dynamic shapes."""
    placed = {}
    for graph in GRAPHS:
        device = requested.get(graph, "CPU")
        if _kind(device) in STATIC_ONLY_DEVICES and graph not in STATIC_GRAPHS:
            raise DeviceError(f"devices.{graph}: the {_kind(device)} compiles static shapes only, and the {graph} "
                              f"has dynamic ones (batch and sequence length); put it on CPU or GPU "
                              f"(the {_kind(device)} can take the decoder)")
        present = device == "AUTO" or device in available or any(_kind(a) == device for a in available)
        if not present:
            log.warning("devices.%s: %s is not available (OpenVINO sees: %s); running the %s on the CPU", graph,
                        device, ", ".join(available) or "nothing", graph)
            device = "CPU"
        placed[graph] = device
    return placed


def compile_config(precision: str = "f32", kv_precision: str | None = None, threads: int | None = None,
                   device: str = "CPU", cache_dir: str | Path | None = None) -> dict[str, Any]:
    """Properties for one graph on `device`; `kv_precision` only for the paged talker
    (honoured on the CPU; the GPU plugin chooses its own cache format); `threads` caps CPU
    inference threads (None: every core); `cache_dir` keeps compiled blobs, so a second
    start compiles fast."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (expected one of {', '.join(PRECISIONS)})")
    if kv_precision is not None and kv_precision not in KV_PRECISIONS:
        raise ValueError(f"unknown KV cache precision {kv_precision!r} (expected one of {', '.join(KV_PRECISIONS)})")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    kind = _kind(device)
    config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY"}
    if kind != "NPU":  # the NPU compiler picks its own (f16) precision
        config["INFERENCE_PRECISION_HINT"] = precision
    if kv_precision is not None and kind == "CPU":
        config["KV_CACHE_PRECISION"] = kv_precision
    if threads is not None and kind == "CPU":
        config["INFERENCE_NUM_THREADS"] = threads
    if cache_dir is not None:
        config["CACHE_DIR"] = str(cache_dir)
    return config


def describe_devices(core: Any, requested: Mapping[str, str]) -> str:
    """What OpenVINO sees and where each graph would run (`--list-devices`)."""
    available = list(core.available_devices)
    lines = ["OpenVINO devices:"]
    for device in available:
        try:
            name = core.get_property(device, "FULL_DEVICE_NAME")
        except RuntimeError:
            name = "?"
        lines.append(f"  {device}: {name}")
    if not available:
        lines.append("  (none)")
    try:
        placed = place(requested, available)
        lines.append("graphs: " + ", ".join(f"{g} -> {placed[g]}" for g in GRAPHS))
    except DeviceError as e:
        lines.append(f"graphs: {e}")
    return "\n".join(lines)
