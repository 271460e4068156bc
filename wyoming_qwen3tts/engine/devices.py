"""Where each graph runs, in which precision, and the compile properties per device, in one place.

CPU OpenVINO silently defaults to bf16 inference and a u8 KV cache on CPUs with native
bf16: every property that changes numbers is therefore set explicitly, and `auto` chooses
each graph's precision from what its device reports, never from OpenVINO's defaults. A
device that is not there falls back to the CPU with one warning; the NPU compiles static
shapes only, so it may take the codec decoder (its chunk graphs are static) and nothing else.
A CPU whose oneDNN is held to a smaller instruction set (ONEDNN_MAX_CPU_ISA) is treated as that
smaller CPU (engine/isa_cap.py). The OpenVINO behaviour behind these rules: docs/OPENVINO.md §3, §4,
§8, §15.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from .isa_cap import capped_capabilities, capped_properties, onednn_cap

log = logging.getLogger(__name__)

AUTO = "auto"
PRECISIONS = ("f32", "bf16", "f16")  # what a graph is compiled with
PRECISION_SETTINGS = (AUTO, *PRECISIONS)  # what precision.inference and --precision take
CAPABILITY = {"f32": "FP32", "bf16": "BF16", "f16": "FP16"}  # precision -> OPTIMIZATION_CAPABILITIES entry
FAST_PATH = {"CPU": "bf16", "GPU": "f16"}  # device kind -> what `auto` runs where the device reports it
OWN_PRECISION = {"NPU": "f16"}  # device kind -> the precision its compiler picks (no hint is set there)
# Graphs `auto` keeps at f32 on a CPU: their weights are INT8/INT4, and at f32 the CPU plugin
# multiplies them with dynamically quantised int8 activations (VNNI/AMX int8 units), while at
# bf16 it decompresses to bf16 instead: measured on an AMX Xeon (0.6B INT4 and INT8, one
# stream), bf16 made the talker 1.5-2x and the subcode 2-3x slower. The codec decoder
# (convolutions, f32 weights) is 1.6-2x faster at bf16.
CPU_F32_GRAPHS = ("talker", "subcode")
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


def fastest_precision(device: str, capabilities: Collection[str], graph: str = "decoder") -> str:
    """What `auto` runs `graph` on `device` with: the device's fast path where it reports it
    in OPTIMIZATION_CAPABILITIES, else f32 (also on AUTO, whose device OpenVINO picks later);
    the talker and subcode stay f32 on a CPU (CPU_F32_GRAPHS).

    A CPU may report FP16 as well as BF16 (AVX512-FP16 Xeons do) and still gets bf16: bf16
    keeps f32's exponent range (f16 overflows past 65504; the released weights are bf16), AMX
    multiplies bf16 (f16 only from AMX-FP16 on), and the CPU plugin itself defaults to bf16
    there. On an AMX Xeon (0.6B, one stream, in the engine) bf16 cut the codec decoder's time
    per frame 2x, and made the talker and subcode slower than f32: INT8 36.6 -> 52.9 and
    90.2 -> 135.1 ms, INT4 25.1 -> 33.0 and 53.3 -> 86.4 ms (hence CPU_F32_GRAPHS); f16 made
    them slower still."""
    kind = _kind(device)
    if kind in OWN_PRECISION:
        return OWN_PRECISION[kind]
    if kind == "CPU" and graph in CPU_F32_GRAPHS:
        return "f32"
    fast = FAST_PATH.get(kind)
    return fast if fast is not None and CAPABILITY[fast] in capabilities else "f32"


def device_capabilities(core: Any, device: str) -> list[str]:
    """`device`'s OPTIMIZATION_CAPABILITIES (BF16, FP16, ...); none where its plugin cannot
    answer (a GPU without its runtime). A CPU under a oneDNN cap reports what a CPU of that
    size would (isa_cap.capped_capabilities)."""
    try:
        capabilities = list(core.get_property(device, "OPTIMIZATION_CAPABILITIES"))
    except RuntimeError:
        return []
    return capped_capabilities(capabilities, onednn_cap()) if _kind(device) == "CPU" else capabilities


def resolve_precision(core: Any, setting: str, device: str, graph: str = "decoder") -> str:
    """The precision `graph` on `device` runs with: `auto`'s choice for it, or the explicit
    setting (f32 as asked, without asking the device); the NPU's own in any case. An
    explicit bf16 or f16 the device does not report is warned about: OpenVINO emulates it
    there (slower) or computes f32."""
    return _resolve(setting, device, graph, lambda d: device_capabilities(core, d), set())


def resolve_precisions(core: Any, setting: str, devices: Mapping[str, str]) -> dict[str, str]:
    """Each graph's precision on its device (each device asked, and warned about, once)."""
    asked: dict[str, list[str]] = {}
    warned: set[str] = set()

    def capabilities(device: str) -> list[str]:
        if device not in asked:
            asked[device] = device_capabilities(core, device)
        return asked[device]

    return {graph: _resolve(setting, devices[graph], graph, capabilities, warned) for graph in GRAPHS}


def _resolve(setting: str, device: str, graph: str, capabilities: Callable[[str], list[str]],
             warned: set[str]) -> str:
    if setting not in PRECISION_SETTINGS:
        raise ValueError(f"unknown precision {setting!r} (expected one of {', '.join(PRECISION_SETTINGS)})")
    if setting == AUTO or _kind(device) in OWN_PRECISION:
        return fastest_precision(device, capabilities(device), graph)
    if setting != "f32" and _kind(device) in FAST_PATH:
        reported = capabilities(device)
        if reported and CAPABILITY[setting] not in reported and device not in warned:
            warned.add(device)
            log.warning("precision %s on %s, which reports no native %s: OpenVINO emulates it there or computes "
                        "f32 (auto would run %s)", setting, device, CAPABILITY[setting],
                        fastest_precision(device, reported, graph))
    return setting


def check_kv_cache(precision: str, kv_precision: str, device: str) -> None:
    """Refuse a KV cache the talker's paged attention cannot keep. On the CPU it keeps the
    cache in u8 or in its compute precision: an f32 cache needs f32 compute (OpenVINO fails
    the compile otherwise), and with bf16 compute an f16 cache is kept in bf16 (same size)."""
    if _kind(device) == "CPU" and kv_precision == "f32" and precision != "f32":
        raise ValueError(f"an f32 KV cache needs f32 compute, but the talker runs {precision} on the CPU (its paged "
                         f"attention keeps the cache in u8 or its compute precision): set the precision to f32, "
                         f"or the KV cache to u8 or f16")


def compile_config(precision: str = "f32", kv_precision: str | None = None, threads: int | None = None,
                   device: str = "CPU", cache_dir: str | Path | None = None) -> dict[str, Any]:
    """Properties for one graph on `device`; `kv_precision` only for the paged talker
    (honoured on the CPU; the GPU plugin chooses its own cache format); `threads` caps CPU
    inference threads (None: every core); `cache_dir` keeps compiled blobs of GPU and NPU
    graphs, whose compilation takes long, so a second start is fast. Not on the CPU: there an
    imported blob stays mapped next to the weights the plugin packs again at the first
    inference (0.6B INT4: 3.3 GB resident instead of 1.4 GB, for a load 1 s shorter; docs/OPENVINO.md §4)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (expected one of {', '.join(PRECISIONS)})")
    if kv_precision is not None and kv_precision not in KV_PRECISIONS:
        raise ValueError(f"unknown KV cache precision {kv_precision!r} (expected one of {', '.join(KV_PRECISIONS)})")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    kind = _kind(device)
    config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY"}
    if kind not in OWN_PRECISION:
        config["INFERENCE_PRECISION_HINT"] = precision
    if kv_precision is not None and kind == "CPU":
        check_kv_cache(precision, kv_precision, device)
        config["KV_CACHE_PRECISION"] = kv_precision
    if threads is not None and kind == "CPU":
        config["INFERENCE_NUM_THREADS"] = threads
    if kind == "CPU":
        config.update(capped_properties(onednn_cap()))
    if cache_dir is not None and kind != "CPU":
        config["CACHE_DIR"] = str(cache_dir)
    return config


def describe_devices(core: Any, requested: Mapping[str, str], precision: str = AUTO,
                     kernels: Sequence[str] | None = None) -> str:
    """What OpenVINO sees, what `auto` runs on each device and why, and where and in which
    precision each graph would run (`--list-devices`); with `kernels` (the native runner's
    copies this CPU runs, fastest first, or the one engine.kernels names), the one it uses."""
    available = list(core.available_devices)
    lines = ["OpenVINO devices:"]
    for device in available:
        try:
            name = core.get_property(device, "FULL_DEVICE_NAME")
        except RuntimeError:
            name = "?"
        lines.append(f"  {device}: {name}")
        if _kind(device) == "CPU" and (cap := onednn_cap()) is not None:
            lines.append(f"    oneDNN held to {cap} (ONEDNN_MAX_CPU_ISA): treated as a CPU of that size")
        lines.append(f"    auto precision: {_auto_reason(device, device_capabilities(core, device))}")
        if kernels is not None and _kind(device) == "CPU":
            lines.append("    the native runner's kernels: " + (
                f"{kernels[0]} (talker and code predictor, INT8/INT4 weights)" if kernels
                else "none (no AVX2 with FMA, or not built): OpenVINO's graphs run the talker and code predictor"))
    if not available:
        lines.append("  (none)")
    try:
        placed = place(requested, available)
        lines.append("graphs: " + ", ".join(f"{g} -> {placed[g]}" for g in GRAPHS))
        precisions = resolve_precisions(core, precision, placed)
        lines.append(f"precision {precision}: " + ", ".join(f"{g} {precisions[g]}" for g in GRAPHS))
    except DeviceError as e:
        lines.append(f"graphs: {e}")
    return "\n".join(lines)


def _auto_reason(device: str, capabilities: Collection[str]) -> str:
    """`auto`'s precision on `device`, and what it follows from."""
    kind, precision = _kind(device), fastest_precision(device, capabilities)
    if kind in OWN_PRECISION:
        return f"{precision}, the {kind} compiler's own (no precision is set there)"
    lm = "; talker and subcode f32 (INT8/INT4 weights run on int8 units there)" if kind == "CPU" else ""
    if precision == FAST_PATH.get(kind, precision):
        return f"{precision} (native {CAPABILITY[precision]}){lm}"
    fast = CAPABILITY[FAST_PATH[kind]]
    if kind == "CPU":
        return (f"f32 (no native {fast}: auto runs f32 here, and the codec decoder, which bf16 speeds up most, "
                f"keeps its f32 cost)")
    return f"f32 (no native {fast}: auto runs f32 here)"
