"""`qwen3tts-bench --as-cpu NAME`: this machine standing in for a smaller CPU, every stage as
that CPU would run it — the native runner on that CPU's copy of its kernels (engine.kernels),
OpenVINO's graphs with oneDNN held to its instruction set (`ONEDNN_MAX_CPU_ISA`, which the
engine then treats as that CPU: engine/isa_cap.py) — and an audit of what the cap cannot reach:
the plugin's own kernels that pick their instruction set from the CPU's flags (docs/OPENVINO.md §15)."""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wyoming_qwen3tts.engine.isa_cap import ENV

TORCH_ENV = "ATEN_CPU_CAPABILITY"  # torch's own kernels (the official peer); its oneDNN reads ENV too
LARGER = ("avx512", "amx")  # primitive names of kernels a CPU without AVX-512 does not run


@dataclass(frozen=True)
class AsCpu:
    """A smaller CPU: what it is, the runner's kernel copy for it, oneDNN's cap for it."""

    name: str
    kernels: str  # engine.kernels
    onednn_isa: str  # ONEDNN_MAX_CPU_ISA
    torch_isa: str  # ATEN_CPU_CAPABILITY
    cpus: str  # which CPUs it stands for

    def apply(self) -> None:
        """Sets the caps in this process's environment, which every child process inherits;
        before anything loads OpenVINO's CPU plugin (oneDNN reads the variable once)."""
        os.environ[ENV] = self.onednn_isa
        os.environ[TORCH_ENV] = self.torch_isa

    def describe(self) -> str:
        return (f"as {self.name} ({self.cpus}): the runner's {self.kernels} kernels, {ENV}={self.onednn_isa} "
                f"for OpenVINO (and the official peer's oneDNN), {TORCH_ENV}={self.torch_isa}; vox's kernels "
                f"are not capped")


PROFILES = {
    "avx2-vnni": AsCpu("avx2-vnni", "avx_vnni", "AVX2_VNNI", "avx2",
                       "Intel N100/N97, Core Ultra: AVX2 with AVX-VNNI, no AVX-512, no BF16"),
    "avx2": AsCpu("avx2", "avx2", "AVX2", "avx2", "AMD Zen 2/3, Intel before Alder Lake: AVX2 and FMA only"),
}


def larger_kernels(model_dir: Path, precision: str, threads: int | None, first_chunk: int,
                   steady_chunk: int) -> dict[str, dict[str, int]]:
    """Per OpenVINO graph the engine compiles for the fast path (the prompt embedding and the
    codec chunk graphs of the schedule), the nodes whose compiled kernel is an AVX-512 or AMX
    one despite the cap: "layer type: kernel" -> count. Run in the capped child process."""
    from wyoming_qwen3tts.engine.graphs import fix_batch
    from wyoming_qwen3tts.engine.loaded_model import LoadedModel

    model = LoadedModel(model_dir, precision=precision, threads=threads)
    found = {"embed": _larger(model.embed)}
    for kind, graphs in model.codec_graphs((first_chunk, steady_chunk)).items():
        for size, path in graphs.items():
            ir = fix_batch(model.core.read_model(path), model.decoder_batch)
            found[f"codec_{kind}_{size}"] = _larger(model.core.compile_model(ir, "CPU", model.properties("decoder")))
    return found


def _larger(compiled: Any) -> dict[str, int]:
    count: Counter[str] = Counter()
    for node in compiled.get_runtime_model().get_ordered_ops():
        info = node.get_rt_info()
        kernel = info["primitiveType"].astype(str)
        if any(name in kernel.lower() for name in LARGER):
            count[f"{info['layerType'].astype(str)}: {kernel}"] += 1
    return dict(sorted(count.items()))
