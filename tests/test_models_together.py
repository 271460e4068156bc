"""Several models in one process (docs/ARCHITECTURE.md, "Several models in one process"): a
tiny CustomVoice and a tiny Base model with the same codec share one compiled decoder
(engine/decoders.py) and one engine thread (engine/group.py), and each speaks exactly as it
does alone."""
from __future__ import annotations

import gc
import re
import shutil
import threading
import time
import weakref
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from wyoming_qwen3tts.convert.pipeline import convert
from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.engine.decoders import Decoders
from wyoming_qwen3tts.engine.group import EngineGroup
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.memory import LoadMemory
from wyoming_qwen3tts.engine.open import Placement, open_engine
from wyoming_qwen3tts.engine.scheduler import Scheduler
from wyoming_qwen3tts.engine.step import ChunkSchedule
from wyoming_qwen3tts.engine.stream import RequestAborted
from wyoming_qwen3tts.model.prompt import VoiceRequest

CONFIG = EngineConfig(kv_blocks=64, max_frames=400, first_chunk=1, steady_chunk=8)
PLACEMENT = Placement(precision="f32", kv_precision="f32", threads=1)  # exact: the numbers do not depend on timing
SCHEDULE = ChunkSchedule(CONFIG.first_chunk, CONFIG.steady_chunk)
FRAMES = 20
LONG = 400  # frames of a request still running when its model closes


@pytest.fixture(scope="module")
def models(converted_factory) -> dict[str, Path]:
    return {"custom_voice": converted_factory("tiny", "custom_voice", "int8"),
            "base": converted_factory("tiny", "base", "int8")}


def voice(kind: str) -> VoiceRequest:
    """A preset speaker, or an in-context clone (its codec stream primed with reference codes)."""
    if kind == "custom_voice":
        return VoiceRequest("Turn on the kitchen lights.", "english", "ryan")
    rng = np.random.default_rng(7)
    return VoiceRequest("Turn on the kitchen lights.", "english", speaker_vector=rng.standard_normal(64).astype(
        np.float32), ref_text="The reference words.", ref_codes=rng.integers(0, 2048, (9, 16)))


def submit(engine: Scheduler, kind: str):
    params = replace(engine.defaults, min_frames=FRAMES)
    return engine.submit(voice(kind), params, max_frames=FRAMES)


def result(stream) -> tuple[np.ndarray, np.ndarray]:
    """(codes, PCM) of a finished stream."""
    pcm = np.concatenate([c.pcm for c in stream])
    assert stream.result.reason == "length", stream.result
    return stream.result.codes, pcm


def eventually(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def alone(path: Path, kind: str) -> tuple[np.ndarray, np.ndarray]:
    with open_engine(path, CONFIG, PLACEMENT, greedy=True) as engine:
        return result(submit(engine, kind))


def test_two_models_share_one_codec_and_one_thread_and_speak_as_alone(models):
    expected = {kind: alone(path, kind) for kind, path in models.items()}
    decoders, group = Decoders(), EngineGroup()
    engines = {kind: open_engine(path, CONFIG, PLACEMENT, greedy=True, decoders=decoders, group=group)
               for kind, path in models.items()}
    try:
        cv, base = engines["custom_voice"], engines["base"]
        assert decoders.compiled == 1 and decoders.live() == 1  # the second model's codec was not compiled
        assert cv.runner.codec is not None and cv.runner.codec is base.runner.codec
        assert isinstance(cv.load_memory, LoadMemory) and cv.load_memory.after.anon_kb > 0
        # the codec's memory is counted with the model that compiled it
        marks = {kind: dict((stage, anon) for stage, anon, _ in e.runner.load_memory) for kind, e in engines.items()}
        assert marks["custom_voice"]["codec"] > marks["custom_voice"]["before"]
        assert marks["base"]["codec"] == marks["base"]["before"]
        for engine in engines.values():
            engine.start()
        assert group.running and set(group.members) == set(engines.values())
        threads = {t.name for t in threading.enumerate()}
        assert "qwen3tts-engine" not in threads  # no thread of their own
        # both at once: every step of one model between two of the other's
        streams = [(kind, submit(engines[kind], kind)) for kind in engines]
        for kind, stream in streams:
            codes, pcm = result(stream)
            np.testing.assert_array_equal(codes, expected[kind][0], err_msg=kind)
            np.testing.assert_array_equal(pcm, expected[kind][1], err_msg=kind)
        codec = weakref.ref(cv.runner.codec)
        # one model closed while both speak: its request ends aborted, the other's is as alone
        leaving = cv.submit(voice("custom_voice"), replace(cv.defaults, min_frames=LONG), max_frames=LONG)
        staying = submit(base, "base")
        leaving.get(timeout=60)  # it is running
        cv.close()
        with pytest.raises(RequestAborted):
            leaving.read_all(timeout=60)
        assert group.members == (base,) and decoders.live() == 1
        codes, pcm = result(staying)
        np.testing.assert_array_equal(codes, expected["base"][0])
        np.testing.assert_array_equal(pcm, expected["base"][1])
        codes, pcm = result(submit(base, "base"))  # and it keeps speaking, with the codec still there
        np.testing.assert_array_equal(codes, expected["base"][0])
        np.testing.assert_array_equal(pcm, expected["base"][1])
        base.close()
        gc.collect()
        assert codec() is None and decoders.live() == 0  # the last runner took the compiled codec with it
        assert eventually(lambda: not group.running) and group.members == ()
    finally:
        for engine in engines.values():
            engine.close()


def test_a_member_joins_again_after_the_group_emptied(models):
    """The group's thread ends with its last member and starts again with the next."""
    group = EngineGroup()
    for _ in range(2):
        with open_engine(models["custom_voice"], CONFIG, PLACEMENT, greedy=True, group=group) as engine:
            assert group.running
            result(submit(engine, "custom_voice"))
        assert eventually(lambda: not group.running)


def test_conversions_of_one_checkpoint_share_a_changed_codec_does_not(models, checkpoint_factory, tmp_path):
    again = convert(checkpoint_factory("tiny", "custom_voice"), tmp_path / "again", weights="int8")
    first = models["custom_voice"]
    assert (first / "codec_steady_8.xml").read_bytes() != (again / "codec_steady_8.xml").read_bytes()  # auto names
    renamed = Path(shutil.copytree(first, tmp_path / "renamed"))  # other numbers, with other digit counts
    for xml in renamed.glob("codec*.xml"):
        xml.write_text(re.sub(r'( name="[A-Za-z]+_)([0-9]+)"', r'\g<1>1\g<2>0"', xml.read_text()))
    changed = Path(shutil.copytree(first, tmp_path / "changed"))
    weights = bytearray((changed / "codec_steady_8.bin").read_bytes())
    weights[len(weights) // 2] ^= 0x40  # one codec weight, the file's size unchanged
    (changed / "codec_steady_8.bin").write_bytes(bytes(weights))

    decoders = Decoders()
    loaded = {name: LoadedModel(path, precision="f32", kv_precision="f32", threads=1) for name, path in
              {"first": first, "base": models["base"], "again": again, "renamed": renamed, "changed": changed}.items()}
    codecs = {name: decoders.codec(model, SCHEDULE) for name, model in loaded.items()}
    assert codecs["first"][1]  # (graphs, whether compiled now)
    for name in ("base", "again", "renamed"):
        assert not codecs[name][1] and codecs[name][0] is codecs["first"][0], name
    assert codecs["changed"][1] and codecs["changed"][0] is not codecs["first"][0]
    # another schedule, or other compile properties, is another compiled decoder
    assert decoders.codec(loaded["first"], ChunkSchedule(1, 4))[1]
    other = LoadedModel(first, precision="f32", kv_precision="f32", threads=2)
    assert decoders.codec(other, SCHEDULE)[1]
    # the codec lead is shared by the same rule
    leads = [decoders.lead(loaded[name]) for name in ("first", "again", "changed")]
    assert leads[0] is leads[1] and leads[2] is leads[0]  # the lead's own file is unchanged in "changed"
    assert decoders.compiled == 5
    ref = weakref.ref(codecs["first"][0])
    del codecs, leads
    gc.collect()
    assert ref() is None and decoders.live() == 0  # held weakly
