"""Memory: the native runner holds each weight once — the IR pages it compiled from are not
left resident next to the CPU plugin's own copies (native/include/qwen3tts/mapped_ir.hpp)."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.engine.scheduler import Scheduler
from wyoming_qwen3tts.model.prompt import VoiceRequest

RUNNER_GRAPHS = ("talker", "subcode", "codec_steady_1", "codec_steady_8")  # the short chunks have their own graph


def resident_kb(directory: Path) -> dict[str, int]:
    """Resident kB of every mapping of a file in `directory`, by file name (summed over mappings)."""
    resident: dict[str, int] = {}
    name = None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                fields = line.split(maxsplit=5)
                path = Path(fields[5].strip()) if len(fields) > 5 else None
                name = path.name if path is not None and path.parent == directory else None
                if name:
                    resident.setdefault(name, 0)
            elif name and line.startswith("Rss:"):
                resident[name] += int(line.split()[1])
    return resident


@pytest.fixture
def model_dir(converted_factory, tmp_path) -> Path:
    """A private copy: no other test's compiled graphs map these files."""
    return Path(shutil.copytree(converted_factory("tiny", "custom_voice", "int8"), tmp_path / "model"))


def test_native_runner_keeps_no_ir_page_resident(model_dir):
    model = LoadedModel(model_dir, precision="f32", kv_precision="u8")
    engine = Scheduler(model, EngineConfig(kv_blocks=16, max_frames=12))
    try:
        bins = [f"{g}.bin" for g in RUNNER_GRAPHS]
        resident = resident_kb(model_dir)
        assert set(bins) <= set(resident), "the runner maps its graphs' weights for their whole life"
        assert not any(name.startswith(("codec_steady_2", "codec_steady_4", "codec_steady_24")) for name in resident)
        assert {b: resident[b] for b in bins} == dict.fromkeys(bins, 0), resident  # compiled, run once, released
        marks = engine.runner.load_memory  # what the bench's memory table is made of
        assert [stage for stage, _, _ in marks] == ["before", "codec", "talker", "subcode"]
        assert all(anon > 0 and file > 0 for _, anon, file in marks), marks
        assert marks[2][1] > marks[1][1], marks  # the talker's packed weights: anonymous memory of the plugin
        params = SamplingParams.from_defaults(model.spec.generation, seed=1)
        stream = engine.submit(VoiceRequest("Hello there.", "english", "ryan"), params, max_frames=10)
        while not stream.done:
            engine.tick()
        assert sum(len(c.pcm) for c in stream) > 0  # what the plugin still reads faults back in
    finally:
        engine.close()
    # closing frees the graphs and unmaps their weights at once, not whenever the engine is collected
    assert not set(bins) & set(resident_kb(model_dir)), resident_kb(model_dir)


def test_lead_and_text_table_pages_go_once_read(model_dir):
    """The pages of the codec lead's weights (read whole by compiling it) and of the text
    embedding table (a row per id, and the kernel maps ~64 KB around each) are not left
    resident: both graphs are read over a mapping of their own (engine/graphs.py MappedIr)."""
    import numpy as np

    model = LoadedModel(model_dir, precision="f32", kv_precision="u8")
    engine = Scheduler(model, EngineConfig(kv_blocks=16, max_frames=12, codec_lead=True))
    try:
        assert engine.batch.lead is not None
        resident = resident_kb(model_dir)
        assert resident.get("codec_lead_2.bin") == 0, resident  # mapped for its Gather table, not resident
        vocab = model.spec.talker.text_vocab_size
        for ids in np.random.default_rng(3).integers(0, vocab, (20, 50)):
            model.embed_text(list(ids))
        table = 2 * 2**20  # more than the rest of the tiny embedding graph's weights
        assert resident_kb(model_dir).get("embed.bin", 0) * 1024 < table, resident_kb(model_dir)
    finally:
        engine.close()


def test_code_predictor_tables_are_read_in_place(model_dir):
    """The runner's own code predictor reads its codebook tables (a row per code) where
    subcode.bin has them, over a mapping it keeps, and hands the pages back after each call:
    no private copy, and no file page left resident (native/include/qwen3tts/embedding_table.hpp)."""
    model = LoadedModel(model_dir, precision="f32", kv_precision="u8")
    engine = Scheduler(model, EngineConfig(kv_blocks=16, max_frames=12, backend="native"))
    try:
        assert engine.runner.subcode_runtime.startswith("subcode_cpu"), engine.runner.subcode_runtime
        params = SamplingParams.from_defaults(model.spec.generation, seed=2)
        stream = engine.submit(VoiceRequest("Hello there, again.", "english", "ryan"), params, max_frames=10)
        while not stream.done:
            engine.tick()
            resident = resident_kb(model_dir)
            assert "subcode.bin" in resident, "the tables are read in place: the mapping stays with the runner"
            # whole pages are handed back: at most a table's first and last page (shared with a neighbour) stay
            assert resident["subcode.bin"] <= 2 * 4 * 16, resident
        assert engine.metrics().frames_total > 0 and sum(len(c.pcm) for c in stream) > 0  # the tables were read
    finally:
        engine.close()
    assert "subcode.bin" not in resident_kb(model_dir)  # closing unmaps it
