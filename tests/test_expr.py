"""convert/expr.py: each operator computes what numpy computes, makes the constants it
promises, and writes exactly one node in call order (the saved IR depends on it)."""
from __future__ import annotations

import numpy as np
import openvino as ov
import pytest

from wyoming_qwen3tts.convert.expr import T, cat, f32, i64, op, param, result, where
from wyoming_qwen3tts.convert.ops import Params, Weights, linear, rms_norm

RNG = np.random.default_rng(0)
A = RNG.standard_normal((2, 3, 4)).astype(np.float32)
B = RNG.standard_normal((2, 3, 4)).astype(np.float32)
M = RNG.standard_normal((2, 4, 5)).astype(np.float32)
IDS = np.array([[3, -1, 0], [2, 7, -4]], np.int64)


def run(build, *arrays: np.ndarray):
    """Compile build(*params) over parameters shaped like `arrays` and run it on them."""
    params = [param(f"in{i}", a.shape, ov.Type(a.dtype)) for i, a in enumerate(arrays)]
    outs = build(*params)
    outs = outs if isinstance(outs, tuple) else (outs,)
    model = ov.Model([result(o, f"out{i}") for i, o in enumerate(outs)], [p.node for p in params])
    got = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(list(arrays))
    values = [got[f"out{i}"] for i in range(len(outs))]
    return values if len(values) > 1 else values[0]


@pytest.mark.parametrize("expr, expected", [
    (lambda a, b: a + b, A + B), (lambda a, b: a - b, A - B), (lambda a, b: a * b, A * B),
    (lambda a, b: a / (b * b + 1.0), A / (B * B + 1)), (lambda a, b: -a, -A),
    (lambda a, b: 2.0 - a, 2 - A), (lambda a, b: 1.0 / (b * b + 1.0), 1 / (B * B + 1)),
    (lambda a, b: 3 * a + 0.5, 3 * A + 0.5), (lambda a, b: a ** 2.0, A ** 2),
    (lambda a, b: (a > b).float() + (a <= 0.0).float() * 2.0, (A > B) + (A <= 0) * 2.0),
    (lambda a, b: ((a < b) & (b >= 0.0)).float() - ((a < 0.0) | (a.eq(b))).float(),
     ((A < B) & (B >= 0)).astype(np.float32) - ((A < 0) | (A == B)).astype(np.float32)),
    (lambda a, b: where(a > b, a, -1.0), np.where(A > B, A, -1)),
    (lambda a, b: a * np.arange(4), A * np.arange(4)),
])
def test_arithmetic(expr, expected):
    np.testing.assert_allclose(run(expr, A, B), expected, rtol=1e-6, atol=1e-6)


def test_matmul_and_linear():
    np.testing.assert_allclose(run(lambda a, m: a @ m, A, M), A @ M, rtol=1e-5, atol=1e-5)
    w = RNG.standard_normal((6, 4)).astype(np.float32)
    bias = RNG.standard_normal(6).astype(np.float32)
    got = run(lambda a: linear(a, f32(w), f32(bias)), A)
    np.testing.assert_allclose(got, A @ w.T + bias, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run(lambda a, b: a.matmul_t(b), A, B), A @ B.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)


def test_reductions_and_softmax():
    got = run(lambda a: (a.mean(-1, keepdim=True), a.sum(1), a.max(2, keepdim=True), a.softmax(-1)), A)
    e = np.exp(A - A.max(-1, keepdims=True))
    wants = (A.mean(-1, keepdims=True), A.sum(1), A.max(2, keepdims=True), e / e.sum(-1, keepdims=True))
    for g, want in zip(got, wants):
        assert g.shape == want.shape
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def test_shape_ops():
    got = run(lambda a: (a.reshape(0, -1), a.reshape(-1, 4, special_zero=False), a.transpose(2, 0, 1),
                         a.unsqueeze(1), a.unsqueeze(0).squeeze(0), a.slice(1, 3, -1), a.slice(-2, 2**62, 1),
                         cat([a, a * 2.0], 1), a.batch()), A)
    wants = (A.reshape(2, -1), A.reshape(-1, 4), A.transpose(2, 0, 1), A[:, None], A, A[..., 1:3], A[:, -2:],
             np.concatenate([A, 2 * A], 1), np.array([2]))
    for g, want in zip(got, wants):
        np.testing.assert_array_equal(g, want)


def test_split_chunk_gather():
    got = run(lambda a: (*a.chunk(2, -1), *a.split([1, 2], 1), a.gather([2, 0], -1), a.gather(1, 1)), A)
    wants = (A[..., :2], A[..., 2:], A[:, :1], A[:, 1:], A[..., [2, 0]], A[:, 1])
    for g, want in zip(got, wants):
        np.testing.assert_array_equal(g, want)
    table = RNG.standard_normal((8, 3)).astype(np.float32)
    got = run(lambda ids: f32(table).gather(op.maximum(ids, i64(0)), 0) * (ids >= 0).float().unsqueeze(2), IDS)
    np.testing.assert_array_equal(got, table[np.maximum(IDS, 0)] * (IDS >= 0)[..., None])
    rows = RNG.standard_normal((2, 5)).astype(np.float32)
    picked = run(lambda x, i: x.gather(i.unsqueeze(1), 1, batch_dims=1).squeeze(1), rows, np.array([4, 1]))
    np.testing.assert_array_equal(picked, rows[[0, 1], [4, 1]])


def test_scalars_take_the_tensor_element_type():
    ids = param("ids", [3], ov.Type.i64)
    x = param("x", [3], ov.Type.f32)
    assert (ids + 1).o.get_element_type() == ov.Type.i64
    assert (1 - ids).o.get_element_type() == ov.Type.i64
    assert (x * 2).o.get_element_type() == ov.Type.f32
    assert where(ids > 0, 5, ids).o.get_element_type() == ov.Type.i64
    assert i64([1, 2]).o.get_element_type() == ov.Type.i64 and f32(1).o.get_element_type() == ov.Type.f32
    np.testing.assert_array_equal(run(lambda v: v * 3 - 1, IDS), IDS * 3 - 1)


def test_one_node_per_operator_in_evaluation_order():
    """`w * (x * (f32(1) / (var + eps).sqrt()))` writes the nodes the nested opset calls did."""
    x, w = param("x", [2, 4], ov.Type.f32), f32(np.ones(4))
    y = rms_norm(x, w, 1e-6)
    model = ov.Model([result(y, "y")], [x.node])
    types = [n.get_type_name() for n in model.get_ordered_ops()]
    assert types.count("Multiply") == 2 and types.count("Divide") == 1 and types.count("Power") == 1
    ops = [n for n in model.get_ordered_ops() if n.get_type_name() != "Constant"]
    ids = [int(n.get_name().rsplit("_", 1)[1]) for n in ops if n.get_type_name() not in ("Parameter", "Result")]
    assert ids == sorted(ids)  # created in the order the math reads
    np.testing.assert_allclose(run(lambda v: rms_norm(v, f32(np.full(4, 2.0)), 1e-6), A[0, :2]),
                               2 * A[0, :2] / np.sqrt((A[0, :2] ** 2).mean(-1, keepdims=True) + 1e-6), rtol=1e-5)


def test_opset_proxy_wraps_results():
    values, index = op.topk(f32(A), i64(2), axis=-1, mode="max", sort="value", index_element_type="i64")
    assert isinstance(values, T) and isinstance(index, T)
    got = run(lambda a: op.topk(a, i64(1), -1, "max", "value", index_element_type="i64")[1].squeeze(-1), A)
    np.testing.assert_array_equal(got, A.argmax(-1))
    np.testing.assert_allclose(run(lambda a: op.cumsum(a, i64(1)), A), np.cumsum(A, 1), rtol=1e-6)


def test_params_view():
    class Store:
        tensors = {"blk.layers.0.proj.weight": RNG.standard_normal((3, 4)).astype(np.float32),
                   "blk.layers.0.proj.bias": np.arange(3, dtype=np.float32),
                   "blk.layers.0.out.weight": RNG.standard_normal((4, 3)).astype(np.float32)}

        def get(self, name):
            return self.tensors[name]

        def shape(self, name):
            return self.tensors[name].shape

        def __contains__(self, name):
            return name in self.tensors

    layer = Params(Store(), Weights("fp16"), "blk.").layers[0]
    assert layer.proj.prefix == "blk.layers.0.proj." and "bias" in layer.proj and "bias" not in layer.out
    assert layer.out.shape("weight") == (4, 3)
    w, bias = Store.tensors["blk.layers.0.proj.weight"], Store.tensors["blk.layers.0.proj.bias"]
    wo = Store.tensors["blk.layers.0.out.weight"]
    got = run(lambda a: layer.out(layer.proj(a)), A)  # fp16 weights decompressed; the bias stays f32
    want = (A @ w.astype(np.float16).astype(np.float32).T + bias) @ wo.astype(np.float16).astype(np.float32).T
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(AttributeError):
        layer.__deepcopy__  # noqa: B018
