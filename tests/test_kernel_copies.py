"""Every copy of the runner's kernels (native/include/qwen3tts/kernels.hpp) gives the same INT8
and INT4 products to the bit, at the batch sizes the copies handle differently: the VNNI code
takes rows 4 at a time, the AMX copy 16 at a time on its tiles and the remainder below its
threshold with the VNNI code, and a weight group its tiles (64 inputs) do not divide with the
VNNI code throughout (docs/OPENVINO.md §10, "AMX")."""
from __future__ import annotations

import numpy as np
import openvino  # noqa: F401  (loads the OpenVINO libraries _native links, wherever pip put them)
import pytest
from test_int4_kernel import ISAS, i4_bytes, reference

from wyoming_qwen3tts import _native

ROWS = [1, 2, 3, 4, 5, 15, 16, 17, 20, 33]  # ragged, one tile, a tile and one, three tiles' worth
N = 7 * 16  # seven blocks: a pass of four, then three (AMX); three pairs and the odd one (INT4 VNNI)


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("group", [16, 64, 128, 192])
def test_int4_products_agree_to_the_bit(rows: int, group: int):
    rng = np.random.default_rng(rows * 1000 + group)
    k = 384
    q = rng.integers(-8, 8, (N, k))
    scale = (rng.random((N, k // group)) * 0.02 + 0.001).astype(np.float32)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    x[0, :group] = 0  # a group of zeros: scale 0
    products = {isa: _native.testing.int4_linear(i4_bytes(q), scale, x, isa=isa) for isa in ISAS}
    np.testing.assert_allclose(products[ISAS[-1]], reference(q, scale, x), rtol=2e-5, atol=1e-5)
    for isa, y in products.items():
        np.testing.assert_array_equal(y, products[ISAS[-1]], err_msg=f"{isa} against {ISAS[-1]}")


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("k", [384, 320, 336])  # activation groups of 128, of 320 (five tiles), of 336 (no tiles)
def test_int8_products_agree_to_the_bit(rows: int, k: int):
    rng = np.random.default_rng(rows * 1000 + k)
    q = rng.integers(-127, 128, (N, k)).astype(np.int8)
    scale = (rng.random(N) * 0.02 + 0.001).astype(np.float32)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    products = {isa: _native.testing.int8_linear(q, scale, x, isa=isa) for isa in ISAS}
    y, _, group = products[ISAS[-1]]
    assert group == (128 if k % 128 == 0 else k)
    exact = x @ (q.astype(np.float32) * scale[:, None]).T
    assert np.linalg.norm(y - exact) / np.linalg.norm(exact) < 0.02
    for isa, (other, _, _) in products.items():
        np.testing.assert_array_equal(other, y, err_msg=f"{isa} against {ISAS[-1]}")
