"""What OpenVINO's CPU plugin may use when oneDNN is held to a smaller instruction set
(`ONEDNN_MAX_CPU_ISA`, how a larger CPU stands in for a smaller one): the plugin reads the
CPU's own flags in places and oneDNN's capped answer in others, so the precisions and compile
properties are corrected here to what the smaller CPU itself would get (docs/OPENVINO.md §15)."""
from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from typing import Any

ENV = "ONEDNN_MAX_CPU_ISA"
LEGACY_ENV = "DNNL_MAX_CPU_ISA"  # oneDNN's older name for the same cap
# oneDNN's x86 caps, smallest first (its `dnnl_cpu_isa_t` names as the variable takes them)
ORDER = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI",
         "AVX512_CORE_BF16", "AVX10_1_512", "AVX512_CORE_FP16", "AVX10_1_512_AMX", "AVX512_CORE_AMX",
         "AVX10_1_512_AMX_FP16", "AVX512_CORE_AMX_FP16", "AVX10_2_512", "AVX10_2_512_AMX_2", "DEFAULT", "ALL")
# the smallest cap with each capability (AVX2_VNNI_2 brings bf16/f16 conversions, not arithmetic)
NATIVE = {"BF16": "AVX512_CORE_BF16", "FP16": "AVX512_CORE_FP16"}


def onednn_cap(environ: Mapping[str, str] = os.environ) -> str | None:
    """The cap oneDNN runs under (upper case), None when there is none. An unknown value is
    refused: oneDNN would ignore it and the figures would be those of the whole CPU."""
    value = environ.get(ENV) or environ.get(LEGACY_ENV)
    if not value:
        return None
    cap = value.strip().upper()
    if cap not in ORDER:
        raise ValueError(f"{ENV}={value!r} is not one of oneDNN's x86 caps ({', '.join(ORDER)})")
    return None if cap in ("DEFAULT", "ALL") else cap


def _reaches(cap: str, wanted: str) -> bool:
    return ORDER.index(cap) >= ORDER.index(wanted)


def capped_capabilities(capabilities: Collection[str], cap: str | None) -> list[str]:
    """The CPU's OPTIMIZATION_CAPABILITIES as a CPU of the cap's size reports them. The
    plugin reports BF16 from the CPU's own flags whatever the cap, and then computes a bf16
    graph with kernels oneDNN is no longer allowed to run (it crashes)."""
    if cap is None:
        return list(capabilities)
    return [c for c in capabilities if c not in NATIVE or _reaches(cap, NATIVE[c])]


def capped_properties(cap: str | None) -> dict[str, Any]:
    """CPU compile properties that keep a capped plugin on the smaller CPU's path. Without
    VNNI the plugin would still quantize activations for its INT8/INT4 products (it asks the
    CPU itself) and oneDNN, capped, has no kernel for that; a CPU without VNNI multiplies
    them unquantized (dynamic quantization off), which a group size of 0 selects."""
    if cap is None or has_vnni(cap):
        return {}
    return {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}


def has_vnni(cap: str) -> bool:
    """Whether a CPU of the cap's size has VNNI's byte dot products (AVX512_CORE has none)."""
    return cap in ("AVX2_VNNI", "AVX2_VNNI_2") or _reaches(cap, "AVX512_CORE_VNNI")
