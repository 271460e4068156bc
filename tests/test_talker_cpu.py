"""The native runner's own talker (native/include/qwen3tts/talker_cpu.hpp) against OpenVINO
running the talker graph it replaces, on the same converted weights.

With INT4 weights and an f32 KV cache, the graph with every INT4 product swapped for the
runner's kernel (`infer_with_int4_kernel`, one forward pass over the whole sequence) does the
same arithmetic in the layers' products, so the rest — norms, RoPE, paged attention over
blocks scattered in the cache, prefill followed by decode steps — must agree to float
rounding: the final hidden state within 1e-5 (measured ~2e-7). The codec head is INT8
(nncf's backup format), which that graph multiplies exactly and the runner with int8
activations: the logits differ by that rounding (measured 0.7 %). A u8 cache moves the
hidden state by its own rounding (measured ~3 % on the tiny model's random weights)."""
from __future__ import annotations

import re
import shutil

import numpy as np
import openvino as ov
import pytest
from test_int4_kernel import ISAS, run_greedy_request

from wyoming_qwen3tts import _native
from wyoming_qwen3tts.engine import native
from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.engine.scheduler import Scheduler
from wyoming_qwen3tts.model.prompt import VoiceRequest

BLOCK = 4  # small blocks: a 13-token sequence spans four of them
TABLE = np.array([3, 7, 1, 12], np.int32)  # scattered, out of order


@pytest.fixture(autouse=True)
def _kernels():
    if not ISAS:
        pytest.fail("these tests need a CPU with AVX2 and FMA, as every CI host has")


@pytest.fixture(scope="module")
def xml(converted_factory) -> str:
    return str(converted_factory("tiny", "custom_voice", "int4") / "talker.xml")


def sequence(xml: str, tokens: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Input embeddings [tokens, hidden] of one sequence and its positions."""
    hidden = ov.Core().read_model(xml).input("inputs_embeds").get_partial_shape()[2].get_length()
    return np.random.default_rng(seed).standard_normal((tokens, hidden)).astype(np.float32), np.arange(tokens)


def whole(xml: str, embeds: np.ndarray) -> dict[str, np.ndarray]:
    """The graph's outputs for every row, one forward pass, INT4 products by the kernel."""
    swapped, out = _native.testing.infer_with_int4_kernel(xml, {
        "inputs_embeds": embeds[None], "position_ids": np.arange(len(embeds))[None],
        "beam_idx": np.zeros(1, np.int32), "sample_rows": np.arange(len(embeds))})
    assert swapped > 0
    return out


def talker(xml: str, u8: bool = False, threads: int = 2, isa: str = "") -> _native.testing.TalkerCpu:
    t = _native.testing.TalkerCpu(xml, threads, u8, BLOCK, isa=isa)
    t.allocate(16)
    return t


def stepped(t: _native.testing.TalkerCpu, embeds: np.ndarray, prefill: int) -> tuple[np.ndarray, np.ndarray]:
    """A prefill of `prefill` tokens (every row's outputs), then one decode step per token."""
    one = np.array([0, 1], np.int32)
    tables = np.array([0, len(TABLE)], np.int32)
    logits, hidden = t.run(embeds[:prefill], np.arange(prefill), np.array([0], np.int32),
                           np.array([0, prefill], np.int32), TABLE, tables, np.arange(prefill))
    rows = [(logits, hidden)]
    for i in range(prefill, len(embeds)):
        rows.append(t.run(embeds[i:i + 1], np.array([i]), np.array([i], np.int32), one, TABLE, tables,
                          np.array([0])))
    return np.concatenate([r[0] for r in rows]), np.concatenate([r[1] for r in rows])


def relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("isa", ISAS)
def test_computes_what_the_graph_with_the_int4_kernel_does(xml, isa):
    """A prefill of 9 tokens, then 4 decode steps, over scattered 4-token blocks."""
    embeds, _ = sequence(xml, 13, seed=0)
    graph = whole(xml, embeds)
    logits, hidden = stepped(talker(xml, isa=isa), embeds, prefill=9)
    assert relative(hidden, graph["hidden"]) < 1e-5
    assert relative(logits, graph["logits"]) < 0.02  # the INT8 head's activations rounded to int8
    assert (logits.argmax(1) == graph["logits"].argmax(1)).mean() >= 0.9


def test_a_u8_cache_stays_close_to_f32(xml):
    embeds, _ = sequence(xml, 13, seed=1)
    _, exact = stepped(talker(xml), embeds, prefill=9)
    _, rounded = stepped(talker(xml, u8=True), embeds, prefill=9)
    assert 0 < relative(rounded, exact) < 0.06  # measured ~3 %: a wrong scale or offset is ~100 %


@pytest.mark.parametrize("u8", [False, True])
def test_batch_threads_and_instruction_sets_do_not_change_a_row(xml, u8):
    """Two sequences in one call — one prefilling, one decoding after its own prefill — give
    each row exactly what it gets alone, whatever the team's size and instruction set
    (products split by output blocks, attention by (sequence, kv head), one order of sums)."""
    a, _ = sequence(xml, 6, seed=2)
    b, _ = sequence(xml, 5, seed=3)
    tables = np.array([0, 2, 4], np.int32)
    both_tables = np.array([5, 9, 2, 14], np.int32)  # a in 5, 9; b in 2, 14
    results = []
    for isa in ISAS:
        for threads in (1, 2, 3):  # 3: more members than this machine's cores, the barrier yields
            t = talker(xml, u8, threads, isa)
            t.run(b[:4], np.arange(4), np.array([0], np.int32), np.array([0, 4], np.int32), both_tables[2:],
                  np.array([0, 2], np.int32), np.array([3]))
            rows = np.concatenate([a, b[4:]])
            results.append(t.run(rows, np.array([0, 1, 2, 3, 4, 5, 4]), np.array([0, 4], np.int32),
                                 np.array([0, 6, 7], np.int32), both_tables, tables, np.array([5, 6])))
    for got in results[1:]:
        for x, y in zip(got, results[0]):
            np.testing.assert_array_equal(x, y)
    alone_a = talker(xml, u8).run(a, np.arange(6), np.array([0], np.int32), np.array([0, 6], np.int32),
                                  both_tables[:2], np.array([0, 2], np.int32), np.array([5]))
    logits, hidden = results[0]
    np.testing.assert_array_equal(hidden[:1], alone_a[1])
    np.testing.assert_array_equal(logits[:1], alone_a[0])
    alone_b = talker(xml, u8)
    alone_b.run(b[:4], np.arange(4), np.array([0], np.int32), np.array([0, 4], np.int32), both_tables[2:],
                  np.array([0, 2], np.int32), np.array([3]))
    last = alone_b.run(b[4:], np.array([4]), np.array([4], np.int32), np.array([0, 1], np.int32), both_tables[2:],
                       np.array([0, 2], np.int32), np.array([0]))
    np.testing.assert_array_equal(hidden[1:], last[1])


def test_a_copied_block_carries_its_keys_and_values(xml):
    """The prefix cache copies a sequence's last, partly filled block before another sequence
    writes into it: going on from the copy gives what going on from the original gives."""
    embeds, _ = sequence(xml, 7, seed=4)
    t = talker(xml)
    t.run(embeds[:6], np.arange(6), np.array([0], np.int32), np.array([0, 6], np.int32), np.array([0, 1], np.int32),
          np.array([0, 2], np.int32), np.array([5]))
    t.copy_block(1, 8)
    step = (embeds[6:], np.array([6]), np.array([6], np.int32), np.array([0, 1], np.int32))
    original = t.run(*step, np.array([0, 1], np.int32), np.array([0, 2], np.int32), np.array([0]))
    copied = t.run(*step, np.array([0, 8], np.int32), np.array([0, 2], np.int32), np.array([0]))
    for x, y in zip(copied, original):
        np.testing.assert_array_equal(x, y)


def test_the_backend_setting_chooses_it(converted_factory):
    """engine.backend auto: the runner's own stacks unless the precision is f32 (OpenVINO's
    numbers there); native: at f32 too; openvino: the graphs. The talker and the code predictor
    follow one setting. Requests run to their end either way, INT4 and INT8."""
    for weights in ("int4", "int8"):
        model_dir = converted_factory("tiny", "custom_voice", weights)
        for precision, backend, own in (("auto", "auto", True), ("f32", "auto", False), ("f32", "native", True),
                                        ("auto", "openvino", False)):
            model = LoadedModel(model_dir, precision=precision, kv_precision="u8")
            sched = Scheduler(model, EngineConfig(kv_blocks=32, backend=backend))
            try:
                runner = sched.runner
                assert runner.talker_runtime.startswith("talker_cpu" if own else "openvino"), (weights, precision)
                assert runner.subcode_runtime.startswith("subcode_cpu" if own else "openvino"), (weights, precision)
                assert "(" not in runner.talker_runtime  # nothing refused: no reason given
                assert runner.rows_exact == own  # a prefix may end anywhere
                codes = run_greedy_request(sched, model, 10)
                assert codes.shape == (10, 16) and ((codes >= 0) & (codes < 2048)).all()
            finally:
                sched.close()


def test_retired_settings_name_their_replacement(tmp_path):
    """The four switches engine.backend replaced are errors that name it, in config.yaml and
    on the command line."""
    from wyoming_qwen3tts.config import ConfigError, load_config
    from wyoming_qwen3tts.server.app import parse_args

    for key in ("runner", "int4_kernel", "talker_runtime", "subcode_runtime"):
        path = tmp_path / f"{key}.yaml"
        path.write_text(f"engine:\n  {key}: native\n")
        with pytest.raises(ConfigError, match=f"engine.{key} was replaced by engine.backend"):
            load_config(path)
    with pytest.raises(SystemExit):
        parse_args(["--runner", "python"])
    assert parse_args(["--backend", "openvino", "--kernels", "avx2"]).backend == "openvino"


def test_engine_kernels_names_the_copy_and_every_copy_gives_the_same_codes(converted_factory):
    """engine.kernels: auto takes the fastest copy this CPU runs; each copy named runs the talker
    and the code predictor (the runtimes say which) and, computing the same bits, gives the same
    codes. A name that is no copy is refused by the config and by the native runner itself."""
    model = LoadedModel(converted_factory("tiny", "custom_voice", "int8"), precision="auto", kv_precision="u8")
    codes = {}
    for kernels in ("auto", *ISAS):
        sched = Scheduler(model, EngineConfig(kv_blocks=32, kernels=kernels))
        try:
            name = ISAS[0] if kernels == "auto" else kernels
            assert sched.runner.talker_runtime.startswith(f"talker_cpu, {name}, "), sched.runner.talker_runtime
            assert sched.runner.subcode_runtime.startswith(f"subcode_cpu, {name}, "), sched.runner.subcode_runtime
            codes[kernels] = run_greedy_request(sched, model, 10)
        finally:
            sched.close()
    for kernels, got in codes.items():
        np.testing.assert_array_equal(got, codes["auto"], err_msg=kernels)
    with pytest.raises(ValueError, match="engine.kernels"):
        EngineConfig(kernels="sse2").validate()
    for kernels in ISAS:
        EngineConfig(kernels=kernels).validate()
        EngineConfig(kernels=kernels, backend="python").validate()
    config = _native.RunnerConfig()
    config.kernels = "sse2"
    with pytest.raises(ValueError, match="unknown kernel instruction set"):
        _native.Runner(config)


def test_a_copy_the_cpu_does_not_run_is_refused_at_start(monkeypatch):
    """On a CPU with AVX2 only, asking for avx512_vnni is a config error that names the setting
    and what the CPU runs (before any model is loaded), not a failure deep in the runner."""
    monkeypatch.setattr(native, "kernel_isas", lambda: ["avx2"])
    refused = r"engine.kernels: this CPU does not run the avx512_vnni copy \(it runs: avx2\)"
    with pytest.raises(ValueError, match=refused):
        EngineConfig(kernels="avx512_vnni").validate()
    EngineConfig(kernels="avx2").validate()


def hooked(monkeypatch, **hooks) -> None:
    """The runner the scheduler makes from now on: its OpenVINO graphs with the INT4 product
    swapped in, and OpenVINO's graph for the stages `hooks` name (the test seam, TestHooks)."""
    monkeypatch.setattr(native._native, "Runner",
                        lambda config, codec: _native.testing.runner(config, codec, int4_op=True, **hooks))


def test_the_runner_feeds_it_as_it_feeds_the_graph(converted_factory, monkeypatch):
    """Through the runner, three greedy requests stepped together with the prefix cache (its
    block copies included), f32 KV cache: every frame's codes with the runner's own talker and
    with OpenVINO's paged talker graph (the INT4 product swapped in, the code predictor the
    runner's own in both) are the same — the plan's rows, positions, block tables and sampled
    rows reach it as they reach the graph."""
    model = LoadedModel(converted_factory("tiny", "custom_voice", "int4"), precision="auto", kv_precision="f32")
    codes = {}
    for graph in (False, True):
        hooked(monkeypatch, talker_graph=graph)
        sched = Scheduler(model, EngineConfig(kv_blocks=64))
        try:
            assert sched.runner.talker_runtime.startswith("openvino" if graph else "talker_cpu")
            assert sched.runner.subcode_runtime.startswith("subcode_cpu")
            streams = []
            for seed, text in enumerate(("Turn on the kitchen lights.", "Good night.", "It is sunny today.")):
                params = SamplingParams.from_defaults(model.spec.generation, seed=seed, min_frames=1, do_sample=False,
                                                      subtalker_do_sample=False)
                streams.append(sched.submit(VoiceRequest(text, "english", "ryan"), params, max_frames=12))
            for _ in range(200):
                if all(s.done for s in streams):
                    break
                sched.tick()
            codes[graph] = [s.result.codes for s in streams]
        finally:
            sched.close()
    for ours, graph_codes in zip(codes[False], codes[True]):
        np.testing.assert_array_equal(ours, graph_codes)


def test_the_runner_falls_back_to_the_graph_and_says_why(converted_factory, tmp_path):
    """fp16 weights are no kernel's, and a conversion from before the talker's weights were
    named has no rt_info to find them by: the graph runs, and the runner says why."""
    old = tmp_path / "old"
    shutil.copytree(converted_factory("tiny", "custom_voice", "int4"), old)
    xml = (old / "talker.xml").read_text()
    (old / "talker.xml").write_text(re.sub(r"<qwen3tts>.*?</qwen3tts>", "", xml, flags=re.S))
    for model_dir, reason in ((converted_factory("tiny", "custom_voice", "fp16"), "not nncf"),
                              (old, "older version")):
        model = LoadedModel(model_dir, precision="auto", kv_precision="u8")
        sched = Scheduler(model, EngineConfig(kv_blocks=32, backend="native"))
        try:
            assert sched.runner.talker_runtime.startswith("openvino (") and reason in sched.runner.talker_runtime
            run_greedy_request(sched, model, 10)
        finally:
            sched.close()


def test_chunked_prefill_the_prefix_cache_and_aborts_through_the_runner(converted_factory):
    """The scheduler's paths as the runner's own talker meets them, f32 KV cache: a prompt
    prefilled 3 rows per call (calls that sample no row), the voice prefix cached or not, all
    give the same greedy codes; requests aborted mid-prefill and mid-generation give every KV
    block back."""
    model = LoadedModel(converted_factory("tiny", "custom_voice", "int4"), precision="auto", kv_precision="f32")
    voice = VoiceRequest("Turn on the kitchen lights in the living room.", "english", "ryan")
    params = SamplingParams.from_defaults(model.spec.generation, min_frames=8).greedy()

    def run(sched: Scheduler) -> np.ndarray:
        stream = sched.submit(voice, params, max_frames=8)
        for _ in range(100):
            if stream.done:
                break
            sched.tick()
        assert stream.done and stream.result.reason == "length"
        return stream.result.codes

    results = []
    for chunk, prefix in ((256, False), (3, True)):
        sched = Scheduler(model, EngineConfig(kv_blocks=32, prefill_chunk=chunk, prefix_cache=prefix))
        try:
            assert sched.runner.talker_runtime.startswith("talker_cpu")
            results += [run(sched), run(sched)]  # with the prefix cache, the second finds its voice cached
            streams = [sched.submit(voice, params, max_frames=8) for _ in range(3)]
            sched.tick()
            streams[0].cancel()  # mid-prefill (3 rows per call)
            for _ in range(6):
                sched.tick()
            streams[1].cancel()
            for _ in range(100):
                if all(s.done for s in streams):
                    break
                sched.tick()
            pool = sched.batch.pool
            assert not sched.batch.active and not pool.tables and pool.available == pool.num_blocks
        finally:
            sched.close()
    for codes in results[1:]:
        np.testing.assert_array_equal(codes, results[0])
