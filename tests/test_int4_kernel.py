"""The native runner's INT4 product (native/include/qwen3tts/int4_weights.hpp): its numbers
against an integer reference in numpy and against OpenVINO's exact products, product by product
and whole graphs (the test-only op of native/src/testing/ swapped into the converted graphs).
The kernels exist per instruction set (kernels.hpp): every test of numbers runs each one this
CPU has, and they must agree to the bit. Every x86-64 CI host has AVX2 (the N100 class too);
Xeons and Zen 4 add AVX-512 VNNI, Intel's CPUs since Alder Lake (and Zen 5) AVX-VNNI."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import openvino as ov
import pytest
from openvino import opset13

from wyoming_qwen3tts import _native
from wyoming_qwen3tts.engine.config import KERNELS
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.engine.scheduler import Scheduler
from wyoming_qwen3tts.model.prompt import VoiceRequest

ISAS = _native.kernel_isas()  # this CPU's instruction sets, fastest first
# OpenVINO's exact f32 products: no bf16, no dynamic quantization of the activations
EXACT = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}


def i4_bytes(q: np.ndarray) -> np.ndarray:
    """OpenVINO's i4 storage of q [N, K] in [-8, 7]: two's complement nibbles, element 2i low."""
    nibbles = (q.astype(np.int16) & 0x0F).astype(np.uint8)
    return nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)


def reference(q: np.ndarray, scale: np.ndarray, x: np.ndarray) -> np.ndarray:
    """What the kernel computes, in numpy: x quantized to int8 per row and weight group
    (scale max|x|/127, round half to even), exact integer dot products per group, then
    Σ_g dot · weight scale · activation scale."""
    n, groups = scale.shape
    group = q.shape[1] // groups
    xg = x.reshape(x.shape[0], groups, group).astype(np.float32)
    amax = np.abs(xg).max(-1, keepdims=True)
    inverse = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    xq = np.rint(xg * inverse).astype(np.int64)  # [M, G, group]
    dots = np.einsum("mgk,ngk->mng", xq, q.reshape(n, groups, group).astype(np.int64))
    return (dots * scale[None] * (amax[..., 0] / np.float32(127))[:, None, :]).sum(-1)


def test_every_ci_host_runs_the_kernels():
    """AVX2 and FMA are the floor (x86-64 since 2013): without them the runner falls back to
    OpenVINO everywhere and the kernel tests below would test nothing."""
    assert "avx2" in ISAS, ISAS
    assert ISAS == [isa for isa in KERNELS[1:] if isa in ISAS], ISAS  # fastest first, as engine.kernels lists them
    for isa in KERNELS[1:]:  # every name engine.kernels takes is a copy the native module knows
        if isa not in ISAS:
            with pytest.raises(RuntimeError, match=f"this CPU does not run the {isa} kernels"):
                _native.testing.int4_linear(np.zeros((16, 64), np.uint8), np.ones((16, 2), np.float32),
                                    np.zeros((1, 128), np.float32), isa=isa)
    with open("/proc/cpuinfo") as cpuinfo:
        flags = set(next(line for line in cpuinfo if line.startswith("flags")).split(":")[1].split())
    # each copy of the kernels the CPU can run is offered (the first is the one used), and is tested below
    assert ("avx512_vnni" in ISAS) == {"avx512f", "avx512bw", "avx512_vnni"}.issubset(flags), (ISAS, flags)
    assert ("avx_vnni" in ISAS) == {"avx2", "fma", "avx_vnni"}.issubset(flags), (ISAS, flags)
    # AMX also needs the kernel's leave for the tiles' state (Linux 5.16+ grants it on request)
    assert ("avx512_amx" in ISAS) == ("avx512_vnni" in ISAS and {"amx_tile", "amx_int8"}.issubset(flags)), ISAS
    with pytest.raises(ValueError, match="unknown kernel instruction set"):
        _native.testing.int4_linear(np.zeros((16, 64), np.uint8), np.ones((16, 2), np.float32),
                                    np.zeros((1, 128), np.float32), isa="sse2")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("group", [16, 32, 128])
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 9])
def test_kernel_computes_the_integer_reference(group: int, rows: int, isa: str):
    rng = np.random.default_rng(group * 100 + rows)
    n, k = 48, 256  # three 16-row blocks: one pair and the odd one
    q = rng.integers(-8, 8, (n, k))
    scale = (rng.random((n, k // group)) * 0.02 + 0.001).astype(np.float32)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    x[-1, :group] = 0  # a group of zeros: scale 0, no division by it
    y = _native.testing.int4_linear(i4_bytes(q), scale, x, isa=isa)
    assert y.shape == (rows, n) and y.dtype == np.float32
    np.testing.assert_allclose(y, reference(q, scale, x), rtol=2e-5, atol=1e-5)
    exact = x @ (q * np.repeat(scale, group, axis=1)).T  # the f32 product the quantization approximates
    assert np.linalg.norm(y - exact) / np.linalg.norm(exact) < 0.02


def test_kernel_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="int4_linear"):
        _native.testing.int4_linear(np.zeros((16, 64), np.uint8), np.ones((16, 2), np.float32),
                                    np.zeros((1, 64), np.float32))


def int4_products(model: ov.Model) -> list[tuple[ov.Node, ov.Node, ov.Node]]:
    """(MatMul, i4 constant, scale constant) of every product with nncf's INT4 weights:
    MatMul(x, Convert(Reshape(Multiply(Convert(q), scale))), transpose_b)."""
    found = []
    for node in model.get_ordered_ops():
        if node.get_type_name() != "MatMul" or not node.get_attributes()["transpose_b"]:
            continue
        chain = node.input_value(1).get_node()
        while chain.get_type_name() in ("Convert", "Reshape"):
            chain = chain.input_value(0).get_node()
        if chain.get_type_name() != "Multiply":
            continue
        q, scale = (chain.input_value(i).get_node() for i in range(2))
        q = q.input_value(0).get_node() if q.get_type_name() == "Convert" else q
        if q.get_type_name() == "Constant" and q.get_element_type() == ov.Type.i4:
            found.append((node, q, scale))
    return found


@pytest.fixture(scope="module")
def int4_dir(converted_factory):
    return converted_factory("tiny", "custom_voice", "int4")


@pytest.mark.parametrize("graph", ["talker", "subcode"])
def test_kernel_reads_nncf_int4_weights_as_openvino_does(int4_dir, graph):
    """Each INT4 product of a converted graph, by the kernel from the raw i4 bytes and scales
    and by OpenVINO from the graph's own decompression (its dynamic quantization off: the
    exact f32 product): they differ only by the activations' int8 rounding (~0.6 %)."""
    core = ov.Core()
    products = int4_products(core.read_model(int4_dir / f"{graph}.xml"))
    assert products
    rng = np.random.default_rng(0)
    distinct = {q.get_friendly_name(): (matmul, q, scale) for matmul, q, scale in products}
    for matmul, q, scale in distinct.values():
        n, groups, group = (int(d) for d in q.get_output_shape(0))
        x = rng.standard_normal((3, groups * group)).astype(np.float32)
        param = opset13.parameter([-1, groups * group], ov.Type.f32)
        exact = core.compile_model(ov.Model([opset13.matmul(param, matmul.input_value(1), False, True)], [param]),
                                   "CPU", EXACT)
        want = exact(x)[0]
        raw = q.get_data().view(np.uint8).reshape(n, groups * group // 2)
        got = _native.testing.int4_linear(raw, scale.get_data().astype(np.float32).reshape(n, groups), x)
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < 0.02, matmul.get_friendly_name()


def openvino_exact(path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One inference of an IR by OpenVINO alone, f32, its dynamic quantization off."""
    request = ov.Core().compile_model(path, "CPU", EXACT).create_infer_request()
    request.infer(inputs)
    return {port.get_any_name(): request.get_tensor(port).data.copy() for port in request.model_outputs}


def test_graphs_with_the_kernel_compute_what_openvino_does(int4_dir):
    """The talker and subcode graphs with every INT4 product swapped, as the runner runs them,
    against OpenVINO's exact products of the same weights: a product wired to the wrong
    weights, rows or input shape would move the logits by ~100 % and make the first subcode
    draw agree by chance (1 in 2048). The tiny model turns the activations' int8 rounding
    into ~2 % on the logits, as OpenVINO's own dynamic quantization does."""
    core = ov.Core()
    rng = np.random.default_rng(0)
    t = 7  # a prefill: 3-D input, several rows per product
    talker = core.read_model(int4_dir / "talker.xml")
    hidden = talker.input("inputs_embeds").get_partial_shape()[2].get_length()
    talker_in = {"inputs_embeds": rng.standard_normal((1, t, hidden)).astype(np.float32),
                 "position_ids": np.arange(t, dtype=np.int64)[None], "beam_idx": np.zeros(1, np.int32),
                 "sample_rows": np.array([t - 1], np.int64)}
    swapped, got = _native.testing.infer_with_int4_kernel(str(int4_dir / "talker.xml"), talker_in)
    want = openvino_exact(int4_dir / "talker.xml", talker_in)
    assert swapped == len(int4_products(talker))
    for name in ("logits", "hidden"):
        assert np.linalg.norm(got[name] - want[name]) / np.linalg.norm(want[name]) < 0.05, name
    rows = 16
    subcode_in = {"hidden": 3 * rng.standard_normal((rows, hidden)).astype(np.float32),
                  "code0": rng.integers(0, 2048, rows), "temperature": np.zeros(rows, np.float32),  # greedy
                  "top_k": np.full(rows, 50), "top_p": np.ones(rows, np.float32),
                  "uniform": rng.random((rows, 15)).astype(np.float32)}
    swapped, got = _native.testing.infer_with_int4_kernel(str(int4_dir / "subcode.xml"), subcode_in)
    want = openvino_exact(int4_dir / "subcode.xml", subcode_in)
    assert swapped == len(int4_products(core.read_model(int4_dir / "subcode.xml")))
    # the first draw goes through every layer and the first head; later draws feed on earlier
    # ones and diverge from rounding alone on random weights; every head is checked above
    assert (got["codes"][:, 0] == want["codes"][:, 0]).sum() >= 12, (got["codes"][:, 0], want["codes"][:, 0])


def run_greedy_request(sched: Scheduler, model: LoadedModel, frames: int) -> np.ndarray:
    """One greedy request of `frames` frames, ticked to its end; its codes."""
    params = replace(SamplingParams.from_defaults(model.spec.generation).greedy(), min_frames=frames)
    stream = sched.submit(VoiceRequest("Turn on the kitchen lights.", "english", "ryan"), params, max_frames=frames)
    for _ in range(40):
        if stream.done:
            break
        sched.tick()
    assert stream.done and stream.result.reason == "length"
    assert all(np.isfinite(chunk.pcm).all() for chunk in stream)
    return stream.result.codes
