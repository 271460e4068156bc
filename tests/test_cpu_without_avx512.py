"""A CPU like most users' (AVX2, no AVX-512, no BF16) proven to work, not assumed: the fast
preset (INT4, precision auto) run under QEMU's user-mode emulator with a CPU model without
AVX-512 (Skylake-Client-v4: AVX2 and FMA), whose CPUID is all that OpenVINO and the native
runner see, gives the greedy codes of the same model run natively on the runner's AVX2 copy
with OpenVINO held to AVX2 — the stand-in `qwen3tts-bench --as-cpu avx2` measures with
(docs/OPENVINO.md §15, docs/BENCHMARKS.md).

Opt-in (a minute or two of emulated CPU, and Debian's qemu-user, which CI does not install):

    apt-get install -y qemu-user
    python -m pytest -m e2e tests/test_cpu_without_avx512.py
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

from wyoming_qwen3tts.engine.isa_cap import ENV, LEGACY_ENV

pytestmark = pytest.mark.e2e

CPU_MODEL = "Skylake-Client-v4"  # AVX2, FMA; no AVX-512, no AVX-VNNI, no BF16
TEXT = "Turn on the kitchen lights, please."
FRAMES = 16


@pytest.fixture(scope="module")
def qemu() -> str:
    binary = shutil.which("qemu-x86_64")
    if binary is None:
        pytest.fail("qemu-x86_64 is not installed: apt-get install -y qemu-user", pytrace=False)
    return binary


def _say(model: Path, out: Path, kernels: str, prefix: list[str], cap: str | None) -> str:
    """qwen3tts-say's fast preset, greedy: codes to out.npy, audio to out.wav; its log."""
    env = {k: v for k, v in os.environ.items() if k not in (ENV, LEGACY_ENV)}
    if cap is not None:
        env[ENV] = cap
    command = [*prefix, sys.executable, "-m", "wyoming_qwen3tts.say", TEXT, "--model", str(model), "--voice", "ryan",
               "--language", "english", "--greedy", "--precision", "auto", "--kernels", kernels,
               "--max-frames", str(FRAMES), "--save-codes", str(out.with_suffix(".npy")),
               "-o", str(out.with_suffix(".wav"))]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    log = "\n".join(line for line in done.stderr.splitlines() if "TCG doesn't support" not in line)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{log[-4000:]}"
    return log


def test_fast_preset_under_a_cpu_without_avx512(qemu: str, converted_factory, tmp_path: Path) -> None:
    model = converted_factory("tiny", "custom_voice", "int4")
    emulated = _say(model, tmp_path / "emulated", "auto", [qemu, "-cpu", CPU_MODEL], None)
    # what the emulated CPU made of itself: the AVX2 kernels picked by the runner, no BF16 for auto
    assert "subcode_cpu, avx2" in emulated and "talker_cpu, avx2" in emulated, emulated[-3000:]
    assert "decoder CPU f32" in emulated, emulated[-3000:]
    standin = _say(model, tmp_path / "standin", "avx2", [], "AVX2")
    assert "decoder CPU f32" in standin, standin[-3000:]

    codes, expected = np.load(tmp_path / "emulated.npy"), np.load(tmp_path / "standin.npy")
    assert codes.shape == (FRAMES, 16) and expected.shape == (FRAMES, 16)
    np.testing.assert_array_equal(codes, expected)
    with wave.open(str(tmp_path / "emulated.wav")) as audio:
        assert audio.getnframes() == FRAMES * 1920 and audio.getframerate() == 24000
