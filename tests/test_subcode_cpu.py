"""The native runner's own code predictor (native/include/qwen3tts/subcode_cpu.hpp) against
OpenVINO running the subcode graph it replaces, on the same converted weights.

With INT4 weights, the graph with every INT4 product swapped for the runner's kernel
(`infer_with_int4_kernel`) does the same arithmetic in the products, so everything else —
norms, RoPE, attention, sampling, the embeddings — must agree to float rounding: the logits
within 1e-5 (measured ~2e-7) and codes 1–14 exactly, greedy and sampled (the 15th comes from
an INT8 head, which that graph multiplies exactly). Against OpenVINO's exact f32 products
the difference is the activations' int8 rounding (~2 % of the logits on the tiny model, as
OpenVINO's own dynamic quantization). The tests of numbers run each instruction set this CPU
has (kernels.hpp: AVX2 on every CI host, AVX-512 VNNI on most, AVX-VNNI on some), which must agree to the bit."""
from __future__ import annotations

import re
import shutil

import numpy as np
import openvino as ov
import pytest
from test_int4_kernel import ISAS, i4_bytes, openvino_exact, run_greedy_request
from test_talker_cpu import hooked

from wyoming_qwen3tts import _native
from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.engine.scheduler import Scheduler
from wyoming_qwen3tts.model.prompt import VoiceRequest

INPUTS = ("hidden", "code0", "temperature", "top_k", "top_p", "uniform")


@pytest.fixture(autouse=True)
def _kernels():
    if not ISAS:
        pytest.fail("these tests need a CPU with AVX2 and FMA, as every CI host has")


def subcode_inputs(xml, rows: int, seed: int, sampled: bool) -> dict[str, np.ndarray]:
    """The graph's inputs for `rows` rows; sampled: a mix of greedy rows and top-k/top-p
    settings that cut at different ranks (0 and > 64 mean the graph's 64)."""
    model = ov.Core().read_model(xml)
    hidden = model.input("hidden").get_partial_shape()[1].get_length()
    rng = np.random.default_rng(seed)
    temperature = np.zeros(rows, np.float32)
    top_k, top_p = np.full(rows, 50), np.ones(rows, np.float32)
    if sampled:
        temperature = rng.choice([0.0, 0.7, 0.9, 1.3], rows).astype(np.float32)
        top_k = rng.choice([0, 1, 5, 50, 100], rows)
        top_p = rng.choice([0.3, 0.8, 1.0], rows).astype(np.float32)
    return {"hidden": 3 * rng.standard_normal((rows, hidden)).astype(np.float32),
            "code0": rng.integers(0, 2048, rows), "temperature": temperature, "top_k": top_k, "top_p": top_p,
            "uniform": rng.random((rows, 15)).astype(np.float32)}


def ours(xml, inputs: dict[str, np.ndarray], threads: int = 2,
         isa: str = "") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _native.testing.run_subcode_cpu(str(xml), threads, *(inputs[name] for name in INPUTS), isa=isa)


def with_first_logits(xml, out) -> str:
    """The subcode IR with the first head's logits as an extra output "logits0"."""
    model = ov.Core().read_model(xml)
    node = next(n for n in model.get_ops() if n.get_friendly_name() == "subcode.head0")
    while node.get_type_name() != "MatMul":  # the weight's decompression, then its product
        node = next(iter(node.output(0).get_target_inputs())).get_node()
    node.output(0).get_tensor().set_names({"logits0"})
    model.add_outputs([node.output(0)])
    ov.save_model(model, out, compress_to_fp16=False)
    return str(out)


def relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("preset", ["tiny", "tiny-1.7b"])  # the 1.7B path projects the talker's width
@pytest.mark.parametrize("sampled", [False, True])
def test_computes_what_the_graph_with_the_int4_kernel_does(converted_factory, tmp_path, preset, sampled, isa):
    """Same INT4 products, so the same logits to float rounding and the same codes. The
    last head is INT8 (nncf's backup format), which the graph multiplies exactly and the
    runner with int8 activations: the 15th code may differ there, nowhere else."""
    xml = converted_factory(preset, "custom_voice", "int4") / "subcode.xml"
    inputs = subcode_inputs(xml, rows=16, seed=3, sampled=sampled)
    swapped, graph = _native.testing.infer_with_int4_kernel(with_first_logits(xml, tmp_path / "s.xml"), inputs)
    assert swapped > 0
    codes, embedding, logits = ours(xml, inputs, isa=isa)
    assert relative(logits, graph["logits0"].reshape(logits.shape)) < 1e-5
    np.testing.assert_array_equal(codes[:, :14], graph["codes"][:, :14])
    assert (codes[:, 14] == graph["codes"][:, 14]).sum() >= 12
    same = (codes == graph["codes"]).all(1)
    np.testing.assert_allclose(embedding[same], graph["frame_embedding"][same], rtol=1e-5, atol=1e-6)


def test_int8_weights_are_openvino_exact_within_the_activations_rounding(converted_factory, tmp_path):
    """An INT8 conversion (the default preset): every product by the runner's INT8 kernel.
    A product wired to the wrong weights would move the logits by ~100 % and the first draw
    would agree by chance (1 in 2048)."""
    xml = converted_factory("tiny", "custom_voice", "int8") / "subcode.xml"
    inputs = subcode_inputs(xml, rows=16, seed=4, sampled=False)
    exact = openvino_exact(with_first_logits(xml, tmp_path / "s.xml"), inputs)
    codes, _, logits = ours(xml, inputs)
    assert relative(logits, exact["logits0"].reshape(logits.shape)) < 0.05  # measured 2.5 %
    assert (codes[:, 0] == exact["codes"][:, 0]).sum() >= 12


def test_threads_and_batch_do_not_change_a_row(converted_factory):
    """Each output row comes from its own row alone, whatever the team's size (products are
    split by output blocks) and whichever rows share the call."""
    xml = converted_factory("tiny", "custom_voice", "int4") / "subcode.xml"
    inputs = subcode_inputs(xml, rows=6, seed=5, sampled=True)
    codes, embedding, logits = ours(xml, inputs, threads=2)
    for threads in (1, 3):  # 3: more members than this machine's cores, the barrier yields
        other = ours(xml, inputs, threads=threads)
        for a, b in zip(other, (codes, embedding, logits)):
            np.testing.assert_array_equal(a, b)
    alone = ours(xml, {name: value[4:5] for name, value in inputs.items()})
    np.testing.assert_array_equal(alone[0], codes[4:5])
    np.testing.assert_array_equal(alone[1], embedding[4:5])


@pytest.mark.parametrize("isa", ISAS)
def test_int8_kernel_computes_the_integer_reference(isa):
    """The INT8 kernel's numbers against numpy: activations quantized per group (128, or the
    whole row when 128 does not divide it), exact integer dot products, the row's scale.
    Weights span the whole int8 range (-128 is nncf's too): the AVX2 path splits them into
    nibbles, whose extremes must not saturate."""
    rng = np.random.default_rng(6)
    for rows, k in ((1, 256), (2, 256), (3, 256), (5, 96)):
        q = rng.integers(-128, 128, (32, k)).astype(np.int8)
        q[1] = -128
        q[2] = 127
        scale = (rng.random(32) * 0.02 + 0.001).astype(np.float32)
        x = rng.standard_normal((rows, k)).astype(np.float32)
        y, row0, group = _native.testing.int8_linear(q, scale, x, isa=isa)
        assert group == (128 if k % 128 == 0 else k)
        xg = x.reshape(rows, k // group, group)
        amax = np.abs(xg).max(-1, keepdims=True)
        xq = np.rint(xg * (np.float32(127) / amax)).astype(np.int64)
        dots = np.einsum("mgk,ngk->mng", xq, q.reshape(32, k // group, group).astype(np.int64))
        want = (dots * (amax[..., 0] / np.float32(127))[:, None, :]).sum(-1) * scale
        np.testing.assert_allclose(y, want, rtol=2e-5, atol=1e-5)
        np.testing.assert_allclose(row0, q[0] * scale[0], rtol=1e-6)


def test_instruction_sets_give_the_same_numbers(converted_factory):
    """Every instruction set this CPU runs gives the fastest one's products and whole code
    predictor calls to the bit: the integer dot products are exact on each, and the float
    sums run in one order (kernels.hpp). On a CPU with AVX2 alone there is one to compare."""
    rng = np.random.default_rng(8)
    q4 = rng.integers(-8, 8, (48, 256))
    scale4 = (rng.random((48, 2)) * 0.02).astype(np.float32)
    q8 = rng.integers(-128, 128, (48, 256)).astype(np.int8)
    scale8 = (rng.random(48) * 0.02).astype(np.float32)
    x = rng.standard_normal((5, 256)).astype(np.float32)
    xml = converted_factory("tiny", "custom_voice", "int4") / "subcode.xml"
    inputs = subcode_inputs(xml, rows=5, seed=9, sampled=True)
    first = None
    for isa in ISAS:
        got = (_native.testing.int4_linear(i4_bytes(q4), scale4, x, isa=isa),
               _native.testing.int8_linear(q8, scale8, x, isa=isa)[0], *ours(xml, inputs, isa=isa))
        if first is None:
            first = got
        for a, b in zip(got, first):
            np.testing.assert_array_equal(a, b, err_msg=isa)


def test_a_code_outside_the_table_is_refused(converted_factory):
    xml = converted_factory("tiny", "custom_voice", "int4") / "subcode.xml"
    inputs = subcode_inputs(xml, rows=2, seed=7, sampled=False)
    inputs["code0"] = np.array([3, 1 << 20])
    with pytest.raises(ValueError, match="code0"):
        ours(xml, inputs)


def test_the_runner_feeds_it_as_it_feeds_the_graph(converted_factory, monkeypatch):
    """Through the runner, three sampled requests stepped together: the first frame's codes
    with the runner's own code predictor and with OpenVINO's subcode graph, both with the INT4
    kernel (the talker's products, and so code 0, the same), agree in codes 0..14 — each row's
    hidden state, code 0, sampling settings and draws reach the code predictor as they reach
    the graph. (The 15th comes from the INT8 head; later frames feed on it.)"""
    model = LoadedModel(converted_factory("tiny", "custom_voice", "int4"), precision="auto", kv_precision="u8")
    firsts = {}
    for setting in ("native", "openvino"):
        hooked(monkeypatch, talker_graph=True, subcode_graph=setting == "openvino")
        sched = Scheduler(model, EngineConfig(kv_blocks=48))
        try:
            assert sched.runner.subcode_runtime.startswith("subcode_cpu" if setting == "native" else "openvino")
            streams = []
            for seed, text in enumerate(("Turn on the kitchen lights.", "Good night.", "It is sunny today.")):
                params = SamplingParams.from_defaults(model.spec.generation, seed=seed, min_frames=1,
                                                      subtalker_top_k=[50, 5, 0][seed],
                                                      subtalker_top_p=[1.0, 0.8, 0.5][seed])
                streams.append(sched.submit(VoiceRequest(text, "english", "ryan"), params, max_frames=1))
            for _ in range(20):
                if all(s.done for s in streams):
                    break
                sched.tick()
            firsts[setting] = np.stack([s.result.codes[0] for s in streams])
        finally:
            sched.close()
    np.testing.assert_array_equal(firsts["native"][:, :15], firsts["openvino"][:, :15])


def test_the_runner_falls_back_to_the_graph_and_says_why(converted_factory, tmp_path):
    """fp16 weights are no kernel's, and a conversion from before the weights were named
    has no rt_info to find them by: the graph runs, and the runner says why."""
    old = tmp_path / "old"
    shutil.copytree(converted_factory("tiny", "custom_voice", "int4"), old)
    xml = (old / "subcode.xml").read_text()
    (old / "subcode.xml").write_text(re.sub(r"<qwen3tts>.*?</qwen3tts>", "", xml, flags=re.S))
    for model_dir, reason in ((converted_factory("tiny", "custom_voice", "fp16"), "not nncf"),
                              (old, "older version")):
        model = LoadedModel(model_dir, precision="auto", kv_precision="u8")
        sched = Scheduler(model, EngineConfig(kv_blocks=32, backend="native"))
        try:
            assert sched.runner.subcode_runtime.startswith("openvino (") and reason in sched.runner.subcode_runtime
            run_greedy_request(sched, model, 10)
        finally:
            sched.close()
