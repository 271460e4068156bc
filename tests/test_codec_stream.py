"""Streaming codec graphs: any chunk schedule must give the offline decode's samples (docs/MODEL.md §8).

All graphs go through an IR round trip and run in f32. Streams are decoded concurrently in
random batches of 2–3 streams per call, mixing fresh and running streams, first-chunk and
steady graphs, and partial last chunks.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import oracle
import pytest
import torch
from ir import round_trip

from wyoming_qwen3tts.convert.codec import build_codec_decoder
from wyoming_qwen3tts.convert.codec_stream import build_codec_first, build_codec_steady
from wyoming_qwen3tts.convert.ops import Weights
from wyoming_qwen3tts.engine.codec_stream import CodecStream, StreamingCodec
from wyoming_qwen3tts.engine.graphs import fix_batch
from wyoming_qwen3tts.model.checkpoint import Checkpoint
from wyoming_qwen3tts.model.stream_io import FRAMES as REAL_FRAMES
from wyoming_qwen3tts.model.stream_io import NEXT, STATE

FIRST, STEADY = (1, 2, 4), (1, 8, 24)  # steady 1: a paced stream's short chunks (its state by a Slice)
FRAMES = 400


@pytest.fixture(scope="module")
def tiny(checkpoint_factory) -> Path:
    return checkpoint_factory("tiny")


@pytest.fixture(scope="module")
def graphs(tiny, tmp_path_factory) -> tuple[ov.CompiledModel, StreamingCodec]:
    ckpt, w, d = Checkpoint(tiny), Weights("fp32"), tmp_path_factory.mktemp("codec_stream")
    offline = round_trip(build_codec_decoder(ckpt, w), d / "codec.xml")
    first = {n: round_trip(build_codec_first(ckpt, w, n), d / f"first{n}.xml") for n in FIRST}
    steady = {n: round_trip(build_codec_steady(ckpt, w, n), d / f"steady{n}.xml") for n in STEADY}
    return offline, StreamingCodec(first, steady)


def test_state_interface(tiny) -> None:
    """Steady inputs and outputs pair up by name with equal static shapes (batch aside)."""
    ckpt = Checkpoint(tiny)
    steady = build_codec_steady(ckpt, Weights("fp32"), 8)
    first = build_codec_first(ckpt, Weights("fp32"), 2)
    ins = {p.get_any_name(): p.get_partial_shape() for p in steady.inputs}
    outs = {r.get_any_name(): r.get_partial_shape() for r in steady.outputs}
    assert list(ins)[:2] == ["codes", REAL_FRAMES] and list(outs)[0] == "pcm"
    assert ins["codes"].to_string() == "[?,16,8]" and outs["pcm"].to_string() == "[?,15360]"
    assert ins[REAL_FRAMES].to_string() == "[?]"
    states = [n[len(STATE):] for n in ins if n not in ("codes", REAL_FRAMES)]
    assert states == [n[len(NEXT):] for n in outs if n != "pcm"]
    assert states == [r.get_any_name()[len(NEXT):] for r in first.outputs[1:]]
    assert [p.get_any_name() for p in first.inputs] == ["codes"]
    for name in states:
        assert ins[STATE + name] == outs[NEXT + name]
        assert ins[STATE + name][0].is_dynamic and all(d.is_static for d in list(ins[STATE + name])[1:])
    window = ckpt.spec.codec_decoder.sliding_window
    assert ins[STATE + "decoder.pre_transformer.layers.0.self_attn.key"].to_string() == f"[?,4,{window - 1},8]"


def _schedule(rng: np.random.Generator) -> list[int]:
    sizes = [int(rng.choice(FIRST + (8,)))]  # a fresh stream may also start in a steady graph
    while sum(sizes) < FRAMES:
        sizes.append(int(rng.choice(STEADY)))
    return sizes


def test_random_schedules_match_offline(graphs) -> None:
    offline, codec = graphs
    rng = np.random.default_rng(2024)
    count = 20
    codes = rng.integers(0, 2048, (count, 16, FRAMES))
    schedules = [_schedule(rng) for _ in range(count)]
    streams = [CodecStream() for _ in range(count)]
    done = [0] * count  # chunks decoded per stream
    pcm: list[list[np.ndarray]] = [[] for _ in range(count)]
    calls = partial = 0
    while True:
        live = [i for i in range(count) if done[i] < len(schedules[i])]
        if not live:
            break
        pick = int(rng.choice(live))
        size = schedules[pick][done[pick]]
        group = [i for i in live if schedules[i][done[i]] == size]
        rng.shuffle(group)
        while group:
            take = int(rng.integers(2, 4))
            batch, group = group[:take], group[take:]
            starts = [sum(schedules[i][:done[i]]) for i in batch]
            chunks = [codes[i, :, s:s + size] for i, s in zip(batch, starts)]
            partial += sum(c.shape[1] < size for c in chunks)
            for i, out in zip(batch, codec.decode([streams[i] for i in batch], chunks, size)):
                pcm[i].append(out)
                done[i] += 1
            calls += 1
    assert partial >= 5 and calls < sum(map(len, schedules))  # partial last chunks and real batching happened
    for i in range(count):
        ref = offline([codes[i:i + 1]])["pcm"][0]
        got = np.concatenate(pcm[i])
        assert got.shape == ref.shape
        assert np.abs(got - ref).max() <= 1e-5, f"stream {i}, schedule {schedules[i]}"
        assert streams[i].frames == FRAMES


def test_stream_matches_official(graphs, tiny) -> None:
    _, codec = graphs
    decoder = oracle.load_official(tiny).model.speech_tokenizer.model.decoder
    codes = np.random.default_rng(5).integers(0, 2048, (16, 90))
    with torch.no_grad():
        ref = decoder(torch.from_numpy(codes[None])).numpy()[0, 0]
    got = codec.decode_sequence(codes, [2, 8, 24, 8, 24, 24])
    assert np.abs(got - ref).max() <= 1e-4


def test_fresh_stream_in_steady_graph_equals_first_graph(graphs) -> None:
    """Zero state at position 0 is exactly the first-chunk graph's computation."""
    _, codec = graphs
    codes = np.random.default_rng(9).integers(0, 2048, (16, 8))
    via_first = codec.decode([CodecStream()], [codes[:, :4]], 4)[0]
    a = CodecStream()
    via_steady = codec.decode([a], [codes], 8)[0][:4 * 1920]
    assert np.abs(via_first - via_steady).max() <= 1e-6
    # the state carried is exactly the layout read from the graph's outputs
    assert a.nbytes == sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in codec.layout.values())


def test_one_steady_graph_decodes_every_chunk_size(graphs) -> None:
    """The steady graph takes the real frame count, so chunks of any size up to its own —
    a fresh stream's first frame, chunks of different sizes in one call, a primed
    reference of any length — carry the exact state on: one compiled graph serves it all."""
    offline, streaming = graphs
    codec = StreamingCodec({}, {8: streaming.steady[8].compiled}, sizes=range(1, 9))
    assert sorted(codec.steady) == list(range(1, 9)) and not codec.first
    rng = np.random.default_rng(13)
    codes = rng.integers(0, 2048, (2, 16, 120))
    streams, pcm, starts = [CodecStream(), CodecStream()], [[], []], [0, 0]
    while min(starts) < 120:
        live = [i for i in range(2) if starts[i] < 120]
        sizes = {i: min(int(rng.integers(1, 9)), 120 - starts[i]) for i in live}
        chunks = [codes[i, :, starts[i]:starts[i] + sizes[i]] for i in live]
        for i, got in zip(live, codec.decode([streams[i] for i in live], chunks, 8)):
            pcm[i].append(got)
            starts[i] += sizes[i]
    for i in range(2):
        assert not streams[i].closed and streams[i].frames == 120
        assert np.abs(np.concatenate(pcm[i]) - offline([codes[i:i + 1]])["pcm"][0]).max() <= 1e-5
    primed = codec.prime(codes[0, :, :13])  # 8 + 5
    tail = codec.decode([primed], [codes[0, :, 13:21]], 8)[0]
    assert np.abs(tail - offline([codes[:1]])["pcm"][0][13 * 1920:21 * 1920]).max() <= 1e-5


def test_closed_stream_rejects_more_chunks(graphs) -> None:
    """A first graph has no real-frame count: a short chunk through it ends the stream."""
    _, codec = graphs
    stream = CodecStream()
    codec.decode([stream], [np.zeros((16, 3), np.int64)], 4)
    assert stream.closed and stream.frames == 3
    with pytest.raises(ValueError, match="ended"):
        codec.decode([stream], [np.zeros((16, 8), np.int64)], 8)


@pytest.mark.parametrize("batch", [1, 3])
def test_static_batch_graphs(graphs, tiny, tmp_path, batch: int) -> None:
    """Graphs compiled for a static batch (the fast CPU form) run 2 streams exactly: with
    an idle row (batch 3) or in two calls (batch 1)."""
    offline, _ = graphs
    ckpt, w = Checkpoint(tiny), Weights("fp32")
    first = round_trip(fix_batch(build_codec_first(ckpt, w, 2), batch), tmp_path / "first.xml")
    steady = round_trip(fix_batch(build_codec_steady(ckpt, w, 8), batch), tmp_path / "steady.xml")
    assert first.input("codes").get_partial_shape().to_string() == f"[{batch},16,2]"
    codec = StreamingCodec({2: first}, {8: steady})
    codes = np.random.default_rng(11).integers(0, 2048, (2, 16, 77))
    streams, pcm = [CodecStream(), CodecStream()], [[], []]
    start = 0
    for size in [2] + [8] * 10:
        for i, got in enumerate(codec.decode(streams, [c[:, start:start + size] for c in codes], size)):
            pcm[i].append(got)
        start += size
    for i in range(2):
        assert np.abs(np.concatenate(pcm[i]) - offline([codes[i:i + 1]])["pcm"][0]).max() <= 1e-5
