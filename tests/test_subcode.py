"""The subcode graph against the official code predictor (docs/MODEL.md §4, talker input §4.3).

Greedy codes and frame embeddings must equal the official `code_predictor.generate` as the
official talker forward calls it. Sampled codes are checked against a numpy statement of
the same sampling rule, applied to the official logits of the graph's own code sequence.
"""
from __future__ import annotations

import numpy as np
import openvino as ov
import oracle
import pytest
import torch
from openvino import opset13 as op
from transformers import DynamicCache

from wyoming_qwen3tts.convert.ops import Weights
from wyoming_qwen3tts.convert.subcode import INPUTS, OUTPUTS, TOP_K_MAX, build_subcode, sample_codes
from wyoming_qwen3tts.model.checkpoint import Checkpoint

F32 = {"INFERENCE_PRECISION_HINT": "f32"}
STEPS = 15
PRESETS = ("tiny", "tiny-1.7b")


def reference_sample(logits: np.ndarray, temperature: float, top_k: int, top_p: float, u: float) -> int:
    """The sampling rule in numpy, one row: HF order (temperature → top-k, k capped at
    TOP_K_MAX → top-p over the renormalised top-k probabilities, most probable always
    kept), then inverse CDF over the descending-sorted kept probabilities."""
    logits = np.asarray(logits, np.float32)
    vocab = logits.shape[0]
    if temperature <= 0:
        return int(np.argmax(logits))
    order = np.argsort(-logits, kind="stable")
    scaled = logits[order] / np.float32(temperature)
    k = TOP_K_MAX if top_k <= 0 or top_k > TOP_K_MAX else top_k
    keep = np.arange(vocab) < k
    z = np.where(keep, scaled, np.float32(-np.inf))
    e = np.exp(z - z.max())
    probs = (e / e.sum()).astype(np.float32)
    if top_p < 1:
        before = np.concatenate([[0], np.cumsum(probs, dtype=np.float32)[:-1]]).astype(np.float32)
        keep &= (before < np.float32(top_p)) | (np.arange(vocab) == 0)
    cdf = np.cumsum(probs * keep, dtype=np.float32)
    rank = int(np.sum(cdf <= np.float32(u) * cdf[-1]))
    return int(order[min(rank, int(keep.sum()) - 1)])


# ---------------------------------------------------------------- the sampler alone

def _sampler(vocab: int) -> ov.CompiledModel:
    logits = op.parameter([-1, vocab], ov.Type.f32)
    t, p, u = (op.parameter([-1], ov.Type.f32) for _ in range(3))
    k = op.parameter([-1], ov.Type.i64)
    codes = sample_codes(logits.output(0), t.output(0), k.output(0), p.output(0), u.output(0), vocab)
    return ov.Core().compile_model(ov.Model([op.result(codes)], [logits, t, k, p, u]), "CPU", F32)


def _grid(rng: np.random.Generator) -> list[tuple[float, int, float, float]]:
    rows = [(t, k, p, float(rng.random() * 0.999)) for t in (0.0, -1.0, 0.5, 0.9, 1.3)
            for k in (0, -1, 1, 5, 50, 2048, 5000) for p in (1.0, 1.5, 0.9, 0.5, 0.0)]
    # edges: u = 0, u just below 1, and u = 1 (outside the contract; must still pick a kept token)
    return rows + [(0.9, 50, 1.0, 0.0), (0.9, 3, 1.0, 0.9999999), (0.9, 3, 0.6, 0.9999999),
                   (0.9, 5, 1.0, 1.0), (0.9, 5, 0.5, 1.0), (1.3, 0, 1.0, 1.0)]


def _run_sampler(logits: np.ndarray, rows) -> np.ndarray:
    t, k, p, u = (np.array(c, dt) for c, dt in zip(zip(*rows), (np.float32, np.int64, np.float32, np.float32)))
    return _sampler(logits.shape[1])([logits, t, k, p, u])[0]


def test_sampler_matches_numpy_rule() -> None:
    rng = np.random.default_rng(1)
    rows = _grid(rng)
    logits = (rng.standard_normal((len(rows), 2048)) * 3).astype(np.float32)
    got = _run_sampler(logits, rows)
    assert got.dtype == np.int64
    assert got.tolist() == [reference_sample(logits[i], *rows[i]) for i in range(len(rows))]


def test_sampler_ties() -> None:
    """With many exactly equal scores the order among them is the device TopK's, so picks
    are checked by their score."""
    rng = np.random.default_rng(7)
    rows = _grid(rng)
    logits = np.round(rng.standard_normal((len(rows), 2048)) * 3).astype(np.float32)  # ~20 distinct values
    logits[::2, [7, 300, 1999]] = 50.0  # a three-way tie at the top in every other row
    got = _run_sampler(logits, rows)
    for i, (t, k, p, u) in enumerate(rows):
        want = reference_sample(logits[i], t, k, p, u)
        assert logits[i, got[i]] == logits[i, want], (i, rows[i])


# ---------------------------------------------------------------- the whole graph

class Case:
    """One preset: our compiled graph (f32) next to the official code predictor."""

    def __init__(self, directory) -> None:
        self.ckpt = Checkpoint(directory)
        # through an IR file, as the runtime loads it (fusions differ from an in-memory model)
        ov.save_model(build_subcode(self.ckpt, Weights("fp32")), directory / "subcode-test.xml", compress_to_fp16=False)
        core = ov.Core()
        self.compiled = core.compile_model(core.read_model(directory / "subcode-test.xml"), "CPU", F32)
        self.talker = oracle.load_official(directory).model.talker
        self.cp = self.talker.code_predictor

    def run(self, h, c0, t, k, p, u) -> tuple[np.ndarray, np.ndarray]:
        feed = dict(zip(INPUTS, (np.asarray(h, np.float32), np.asarray(c0, np.int64), np.asarray(t, np.float32),
                                 np.asarray(k, np.int64), np.asarray(p, np.float32), np.asarray(u, np.float32))))
        r = self.compiled(feed)
        return r[OUTPUTS[0]], r[OUTPUTS[1]]

    @torch.no_grad()
    def official_greedy(self, h, c0) -> tuple[np.ndarray, np.ndarray]:
        """As Qwen3TTSTalkerForConditionalGeneration.forward calls it (modeling_qwen3_tts.py:1668-1690)."""
        input_ids = torch.as_tensor(c0)[:, None]
        last_id_hidden = self.talker.get_input_embeddings()(input_ids)
        result = self.cp.generate(inputs_embeds=torch.cat((torch.as_tensor(h)[:, None], last_id_hidden), dim=1),
                                  max_new_tokens=STEPS, do_sample=False, top_p=1.0, top_k=50, temperature=0.9,
                                  output_hidden_states=True, return_dict_in_generate=True)
        seq = result.sequences
        hiddens = torch.cat([last_id_hidden] + [self.cp.get_input_embeddings()[i](seq[..., i:i + 1])
                                                for i in range(STEPS)], dim=1)
        return seq.numpy(), hiddens.sum(1).numpy()

    @torch.no_grad()
    def official_logits(self, h, c0, codes) -> np.ndarray:
        """[B, 15, V] logits of each step with `codes` fed back, step by step over a DynamicCache."""
        cache = DynamicCache()
        c0_embedding = self.talker.get_input_embeddings()(torch.as_tensor(c0)[:, None])
        first = torch.cat((torch.as_tensor(h)[:, None], c0_embedding), 1)
        o = self.cp(inputs_embeds=first, past_key_values=cache, use_cache=True)
        logits = [o.logits[:, -1]]
        for g in range(2, STEPS + 1):
            o = self.cp(input_ids=torch.as_tensor(codes[:, g - 2:g - 1]), past_key_values=cache, use_cache=True,
                        generation_steps=g - 1)
            logits.append(o.logits[:, -1])
        return torch.stack(logits, 1).numpy()


@pytest.fixture(scope="module", params=PRESETS)
def case(request, checkpoint_factory) -> Case:
    return Case(checkpoint_factory(request.param, "custom_voice", dtype="float32"))


def _rows(case: Case, b: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((b, case.ckpt.spec.talker.stack.hidden_size)).astype(np.float32)
    return h, rng.integers(0, case.ckpt.spec.code_predictor.vocab_size, b), rng.random((b, STEPS), np.float32)


# temperature, top_k, top_p per row: greedy, the defaults, no limits, top-p only, top-k 1, greedy
MIXED = ((0.0, 50, 1.0), (0.9, 50, 1.0), (1.3, 0, 1.0), (1.0, 0, 0.7), (0.8, 1, 1.0), (-1.0, 5, 0.5))


def _params(rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t, k, p = zip(*rows)
    return np.array(t, np.float32), np.array(k, np.int64), np.array(p, np.float32)


def test_weights_are_shared(case: Case) -> None:
    """One Constant per weight matrix (q/k/v stacked, gate/up stacked), used by all 15 unrolled steps."""
    spec = case.ckpt.spec
    model = build_subcode(case.ckpt, Weights("fp32"))
    constants = [n for n in model.get_ordered_ops() if n.get_type_name() == "Constant"]
    big = [n for n in constants if n.get_output_element_type(0) == ov.Type.f32
           and np.prod(list(n.get_output_shape(0))) >= 1024]
    matrices = 4 * spec.code_predictor.stack.num_layers + 2 * STEPS + 1 + spec.code_predictor.has_projection
    assert len(big) == matrices


def test_greedy_matches_official(case: Case) -> None:
    h, c0, u = _rows(case, 5, seed=2)
    codes, frame = case.run(h, c0, *_params([(0.0, 50, 1.0)] * 5), u)
    want_codes, want_frame = case.official_greedy(h, c0)
    assert codes.dtype == np.int64 and codes.shape == (5, STEPS)
    np.testing.assert_array_equal(codes, want_codes)
    np.testing.assert_allclose(frame, want_frame, rtol=0, atol=1e-5)


def test_sampled_rows_follow_the_rule(case: Case) -> None:
    h, c0, u = _rows(case, len(MIXED), seed=3)
    t, k, p = _params(MIXED)
    codes, frame = case.run(h, c0, t, k, p, u)
    logits = case.official_logits(h, c0, codes)
    for b in range(len(MIXED)):
        want = [reference_sample(logits[b, s], t[b], k[b], p[b], u[b, s]) for s in range(STEPS)]
        assert codes[b].tolist() == want, f"row {b} {MIXED[b]}"
    emb = [case.talker.get_input_embeddings().weight[c0].detach().numpy()]
    emb += [case.cp.get_input_embeddings()[g].weight[codes[:, g]].detach().numpy() for g in range(STEPS)]
    np.testing.assert_allclose(frame, np.sum(emb, axis=0), rtol=0, atol=1e-5)
    greedy, _ = case.official_greedy(h, c0)
    for b in (0, 4, 5):  # temperature 0, top_k 1, negative temperature
        np.testing.assert_array_equal(codes[b], greedy[b])


def test_rows_are_independent(case: Case) -> None:
    h, c0, u = _rows(case, len(MIXED), seed=4)
    t, k, p = _params(MIXED)
    codes, frame = case.run(h, c0, t, k, p, u)
    for b in range(len(MIXED)):
        one = slice(b, b + 1)
        c, f = case.run(h[one], c0[one], t[one], k[one], p[one], u[one])
        np.testing.assert_array_equal(c, codes[one])
        np.testing.assert_allclose(f, frame[one], rtol=0, atol=1e-6)


def test_uniforms_drive_sampling(case: Case) -> None:
    h, c0, u = _rows(case, 4, seed=5)
    params = _params([(1.0, 0, 1.0)] * 4)
    a, _ = case.run(h, c0, *params, u)
    again, _ = case.run(h, c0, *params, u)
    b, _ = case.run(h, c0, *params, np.random.default_rng(6).random(u.shape, np.float32))
    np.testing.assert_array_equal(a, again)
    assert all((a[r] != b[r]).any() for r in range(4))
