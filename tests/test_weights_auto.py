"""`weights: auto` (docs/WEIGHTS.md): the choice with injected measurements, its record and
reuse, a changed CPU or a removed conversion measured again, rejected conversions deleted, a
failed conversion, the bounded measurement; then the real thing on a tiny checkpoint, in
process (explicit formats untouched) and as a server process forced past INT8."""
from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import huggingface_hub
import numpy as np
import pytest
from test_server import free_port
from test_server_cli import first_info

from wyoming_qwen3tts.client import synthesize
from wyoming_qwen3tts.config import ConfigError, ModelEntry, ServerConfig, apply_overrides, load_config
from wyoming_qwen3tts.engine.stream import AudioChunk
from wyoming_qwen3tts.model.manifest import read_converted
from wyoming_qwen3tts.server import loading, weights_choice
from wyoming_qwen3tts.server.app import parse_args
from wyoming_qwen3tts.server.models import conversion_dir
from wyoming_qwen3tts.server.weights_choice import NEEDS_ENV, RECORD, Records, choose, measure_stream

SIGNATURE = {"cpu": "Test CPU", "flags": ["avx2"], "threads": 2, "openvino": "1", "settings": {}}
SOURCE = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"


@dataclass
class FakeTrial:
    """A Trial whose conversions are names in a set and whose measurements are a table."""

    fps: dict[str, float | None]
    on_disk: set[str] = field(default_factory=set)
    fail: set[str] = field(default_factory=set)  # loading these fails (a conversion that cannot finish)
    events: list[tuple[str, str]] = field(default_factory=list)
    open: set[str] = field(default_factory=set)

    def present(self, weights: str) -> bool:
        return weights in self.on_disk

    def load(self, weights: str) -> str:
        assert not self.open, f"{weights} loaded while {self.open} still holds its memory"
        self.events.append(("load", weights))
        if weights in self.fail:
            raise OSError(28, "No space left on device")
        self.on_disk.add(weights)
        self.open.add(weights)
        return weights

    def measure(self, loaded: str) -> float | None:
        self.events.append(("measure", loaded))
        return self.fps[loaded]

    def close(self, loaded: str) -> None:
        self.events.append(("close", loaded))
        self.open.remove(loaded)

    def delete(self, weights: str) -> None:
        self.events.append(("delete", weights))
        self.on_disk.discard(weights)  # (a failed conversion left nothing)

    def measured(self) -> list[str]:
        return [w for kind, w in self.events if kind == "measure"]


def pick(trial: FakeTrial, records: Records, signature: dict = SIGNATURE, source: str = SOURCE) -> str:
    loaded, weights = choose("0b6", source, signature, records, trial, "9.9",
                             now=lambda: datetime.datetime(2026, 12, 5, tzinfo=datetime.timezone.utc))
    assert loaded == weights and trial.open == {weights}  # the chosen one is loaded, nothing else
    return weights


@pytest.fixture
def records(tmp_path, monkeypatch) -> Records:
    monkeypatch.delenv(NEEDS_ENV, raising=False)
    return Records(tmp_path / "converted" / RECORD)


def test_a_fast_int8_is_kept_and_nothing_else_is_tried(records, caplog):
    trial = FakeTrial({"int8": 16.0, "mixed": 22.0, "int4": 29.0})
    with caplog.at_level(logging.INFO, logger="wyoming-qwen3tts"):
        assert pick(trial, records) == "int8"
    assert trial.events == [("load", "int8"), ("measure", "int8")]
    assert "auto: int8, 16.0 frames/s here (real time needs 12.5 × 1.2; tried int8 16.0)" in caplog.text
    data = json.loads(records.path.read_text())["choices"]["0b6"]
    assert data["format"] == "int8" and data["frames_per_s"] == {"int8": 16.0}
    assert data["signature"] == SIGNATURE and data["needed_frames_per_s"] == 15.0
    assert (data["measured_with"], data["version"], data["date"]) == (SOURCE, "9.9", "2026-12-05T00:00:00+00:00")


def test_a_slow_int8_gives_way_to_a_fast_mixed_and_its_conversion_goes(records):
    trial = FakeTrial({"int8": 11.6, "mixed": 22.0, "int4": 29.0})
    assert pick(trial, records) == "mixed"
    # INT8 measured twice before it is rejected, closed before mixed loads, its conversion deleted
    assert trial.events == [("load", "int8"), ("measure", "int8"), ("measure", "int8"), ("close", "int8"),
                            ("load", "mixed"), ("measure", "mixed"), ("delete", "int8")]
    assert trial.on_disk == {"mixed"}
    assert records.get("0b6").frames_per_s == {"int8": 11.6, "mixed": 22.0}


def test_nothing_real_time_keeps_the_fastest_with_a_warning(records, caplog):
    trial = FakeTrial({"int8": 4.0, "mixed": 5.5, "int4": 7.0})
    with caplog.at_level(logging.INFO, logger="wyoming-qwen3tts"):
        assert pick(trial, records) == "int4"
    assert trial.on_disk == {"int4"} and trial.measured() == ["int8", "int8", "mixed", "mixed", "int4", "int4"]
    warning = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1 and "this CPU does not speak in real time" in warning[0].getMessage()
    assert records.get("0b6").format == "int4"  # recorded: every format was tried


def test_the_fastest_need_not_be_the_last_tried(records):
    trial = FakeTrial({"int8": 4.0, "mixed": 9.0, "int4": 7.0})
    assert pick(trial, records) == "mixed"
    assert trial.events[-3:] == [("close", "int4"), ("delete", "int4"), ("load", "mixed")]  # loaded again
    assert trial.on_disk == {"mixed"}


def test_a_conversion_the_user_had_is_not_deleted(records):
    trial = FakeTrial({"int8": 11.0, "mixed": 20.0, "int4": 29.0}, on_disk={"int8"})
    assert pick(trial, records) == "mixed"
    assert trial.on_disk == {"int8", "mixed"} and ("delete", "int8") not in trial.events


def test_the_record_is_reused_without_measuring(records, caplog):
    pick(FakeTrial({"int8": 11.0, "mixed": 20.0, "int4": 29.0}), records)
    again = FakeTrial({"int8": 99.0, "mixed": 99.0, "int4": 99.0}, on_disk={"mixed"})
    with caplog.at_level(logging.INFO, logger="wyoming-qwen3tts"):
        assert pick(again, records) == "mixed"
    assert again.events == [("load", "mixed")]
    assert "auto: mixed, recorded on 2026-12-05T00:00:00+00:00 (20.0 frames/s here" in caplog.text
    # another checkpoint of the same size: the size's choice, converted for it, not measured again
    other = FakeTrial({"int8": 99.0, "mixed": 99.0, "int4": 99.0})
    assert pick(other, records, source="Qwen/Qwen3-TTS-12Hz-0.6B-Base") == "mixed"
    assert other.events == [("load", "mixed")]


def test_another_cpu_or_a_removed_conversion_measures_again(records):
    pick(FakeTrial({"int8": 11.0, "mixed": 20.0, "int4": 29.0}), records)
    moved = FakeTrial({"int8": 30.0, "mixed": 40.0, "int4": 50.0}, on_disk={"mixed"})
    assert pick(moved, records, signature={**SIGNATURE, "cpu": "Another CPU"}) == "int8"
    assert moved.measured() == ["int8"] and records.get("0b6").signature["cpu"] == "Another CPU"
    removed = FakeTrial({"int8": 12.0, "mixed": 21.0, "int4": 29.0})  # the recorded int8 conversion is gone
    assert pick(removed, records, signature={**SIGNATURE, "cpu": "Another CPU"}) == "mixed"
    assert removed.measured() == ["int8", "int8", "mixed"]


def test_another_bar_measures_again(records, monkeypatch):
    pick(FakeTrial({"int8": 16.0, "mixed": 22.0, "int4": 29.0}), records)
    monkeypatch.setenv(NEEDS_ENV, "20")
    trial = FakeTrial({"int8": 16.0, "mixed": 22.0, "int4": 29.0}, on_disk={"int8"})
    assert pick(trial, records) == "mixed" and trial.on_disk == {"int8", "mixed"}
    assert records.get("0b6").needed_frames_per_s == 20.0


def test_an_unreadable_record_measures_again(records):
    records.path.parent.mkdir(parents=True)
    records.path.write_text("{not json")
    trial = FakeTrial({"int8": 16.0, "mixed": 22.0, "int4": 29.0})
    assert pick(trial, records) == "int8" and trial.measured() == ["int8"]
    assert [p.name for p in records.path.parent.iterdir()] == [RECORD]  # no temporary file left


def test_a_conversion_that_fails_keeps_the_best_so_far_unrecorded(records, caplog):
    trial = FakeTrial({"int8": 11.0, "mixed": 20.0, "int4": 29.0}, fail={"mixed"})
    with caplog.at_level(logging.INFO, logger="wyoming-qwen3tts"):
        assert pick(trial, records) == "int8"
    assert "auto: loading mixed failed ([Errno 28] No space left on device); staying with int8" in caplog.text
    assert records.get("0b6") is None  # the next start tries again
    first = FakeTrial({"int8": 11.0, "mixed": 20.0, "int4": 29.0}, fail={"int8"})
    with pytest.raises(OSError, match="No space left"):
        pick(first, records)
    assert not first.open


def test_a_model_that_cannot_be_measured_serves_unrecorded(records, caplog):
    trial = FakeTrial({"int8": None, "mixed": 22.0, "int4": 29.0})
    with caplog.at_level(logging.INFO, logger="wyoming-qwen3tts"):
        assert pick(trial, records) == "int8"
    assert "could not be measured" in caplog.text and records.get("0b6") is None


def test_the_bar_can_be_set_for_tests(records, monkeypatch):
    monkeypatch.setenv(NEEDS_ENV, "1e9")
    trial = FakeTrial({"int8": 600.0, "mixed": 590.0, "int4": 580.0})
    assert pick(trial, records) == "int8"  # the fastest, none made the bar
    assert trial.on_disk == {"int8"} and len(trial.measured()) == 6


class SlowStream:
    """An AudioStream whose chunks come every `every_s`, forever, until cancelled."""

    def __init__(self, every_s: float, frames: int = 2) -> None:
        self.every_s, self.frames, self.cancelled = every_s, frames, False

    def get(self, timeout: float | None = None) -> AudioChunk:
        time.sleep(min(self.every_s, timeout or self.every_s))
        return AudioChunk(np.zeros(self.frames * 1920, np.float32))

    def cancel(self) -> None:
        self.cancelled = True

    def read_all(self, timeout: float | None = None) -> np.ndarray:
        return np.zeros(0, np.float32)


class FakeEngine:
    def __init__(self, stream: SlowStream) -> None:
        self.stream = stream
        self.submitted: list[tuple[int, int]] = []

    def submit(self, voice, params, *, max_frames=None):
        self.submitted.append((params.min_frames, max_frames))
        return self.stream


def test_measuring_is_bounded_in_time():
    from wyoming_qwen3tts.engine.sampling import SamplingParams

    stream = SlowStream(every_s=0.1)
    engine = FakeEngine(stream)
    start = time.monotonic()
    fps = measure_stream(engine, None, SamplingParams(), frames=100, bound_s=0.55)  # type: ignore[arg-type]
    assert time.monotonic() - start < 1.0 and stream.cancelled
    assert engine.submitted == [(100, 100)]  # EOS held off for the frames measured
    assert 15 < fps < 25  # 2 frames per 0.1 s after the first chunk


def test_auto_is_the_default_and_a_setting_everywhere(tmp_path):
    assert ServerConfig().model.weights == "auto" and parse_args([]).weights is None  # the flag keeps config's
    assert parse_args(["--weights", "auto"]).weights == "auto"
    file = tmp_path / "config.yaml"
    file.write_text("model:\n  weights: int8\nmodels:\n  - source: a\n    weights: auto\n  - source: b\n")
    config = load_config(file)
    assert [(m.source, m.weights) for m in config.model_entries] == [("a", "auto"), ("b", "int8")]
    assert apply_overrides(config, weights="auto").model.weights == "auto"
    file.write_text("model:\n  weights: automatic\n")
    with pytest.raises(ConfigError, match="model.weights: 'automatic' is not one of auto, int8"):
        load_config(file)


# --- the real thing on a tiny checkpoint ----------------------------------------------------------

def tiny_config(checkpoint: Path, data_dir: Path, weights: str) -> ServerConfig:
    return apply_overrides(ServerConfig(), model=[str(checkpoint)], data_dir=str(data_dir), weights=weights,
                           threads=1, greedy=True)


def test_explicit_formats_never_measure(checkpoint_factory, tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("an explicit format must not be measured")

    monkeypatch.setattr(loading, "choose", refuse)
    monkeypatch.setattr(loading, "measure_stream", refuse)
    service = loading.build_service(tiny_config(checkpoint_factory("tiny", "custom_voice"), tmp_path, "int4"))
    service.engine.close()
    assert [p.name.rsplit("-", 1)[1] for p in (tmp_path / "converted").iterdir()] == ["int4"]  # no record


def test_auto_in_process_deletes_what_it_rejected(checkpoint_factory, tmp_path, monkeypatch):
    """INT8 measured slow by an injected measurement: mixed is converted, measured, kept."""
    checkpoint = checkpoint_factory("tiny", "custom_voice")
    real = weights_choice.measure_stream
    rates = iter([0.5, 0.5])  # INT8 twice; then mixed measured for real (over 1 frame/s, however busy)

    def measured(engine, request, params):
        return next(rates, None) or real(engine, request, params)

    monkeypatch.setattr(loading, "measure_stream", measured)
    monkeypatch.setenv(NEEDS_ENV, "1")
    service = loading.build_service(tiny_config(checkpoint, tmp_path, "auto"))
    try:
        manifest, _ = read_converted(conversion_dir(str(checkpoint), tmp_path, "mixed"))
        assert manifest["options"]["weights"] == "mixed"
        assert str(service.engine.model.dir).endswith("-mixed")
    finally:
        service.engine.close()
    assert sorted(p.name for p in (tmp_path / "converted").iterdir()) == sorted(
        [conversion_dir(str(checkpoint), tmp_path, "mixed").name, RECORD])
    choice = Records(tmp_path / "converted" / RECORD).get("0b6")
    assert choice is not None and choice.format == "mixed" and choice.frames_per_s["int8"] == 0.5


def test_auto_measures_with_the_codec_it_is_given(checkpoint_factory, tmp_path, monkeypatch):
    """`model.codec_weights` changes what a format measures (the INT8 codec halves the decoder
    where it runs f32): auto converts with it, and records it in the signature, so a change of
    it measures again rather than reusing a choice made with the other decoder."""
    checkpoint = checkpoint_factory("tiny", "custom_voice")
    monkeypatch.setenv(NEEDS_ENV, "1")
    config = apply_overrides(tiny_config(checkpoint, tmp_path, "auto"), codec_weights="int8")
    service = loading.build_service(config)
    try:
        assert service.engine.model.dir == conversion_dir(str(checkpoint), tmp_path, "int8", "int8")
        assert service.engine.model.manifest["options"]["codec_weights"] == "int8"
    finally:
        service.engine.close()
    choice = Records(tmp_path / "converted" / RECORD).get("0b6")
    assert choice is not None and choice.signature["settings"]["codec_weights"] == "int8"


def _server(checkpoint: Path, data_dir: Path, uri: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "wyoming_qwen3tts", "--model", str(checkpoint), "--weights",
                             "auto", "--uri", uri, "--data-dir", str(data_dir), "--greedy", "--threads", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, NEEDS_ENV: "1e9"})


def _stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.stdout is not None
    return proc.stdout.read()


def test_the_server_started_with_auto_measures_once(checkpoint_factory, tmp_path):
    """A bar no format makes (1e9 frames/s): all three measured, the fastest kept, the others'
    conversions deleted, the choice recorded; the next start loads it without measuring."""
    checkpoint, data = checkpoint_factory("tiny", "custom_voice"), tmp_path / "data"
    logs = []
    for _ in range(2):
        uri = f"tcp://127.0.0.1:{free_port()}"
        proc = _server(checkpoint, data, uri)
        try:
            first_info(proc, uri, bound_s=300)
            reply = asyncio.run(synthesize(uri, "Hello there.", voice="ryan"))
            assert len(reply.audio) > 0
        finally:
            logs.append(_stop(proc))
    first, second = logs
    assert "Traceback" not in first + second
    choice = json.loads((data / "converted" / RECORD).read_text())["choices"]["0b6"]
    assert list(choice["frames_per_s"]) == ["int8", "mixed", "int4"]
    fastest = max(choice["frames_per_s"], key=choice["frames_per_s"].get)
    assert choice["format"] == fastest and choice["needed_frames_per_s"] == 1e9
    assert sorted(p.name for p in (data / "converted").iterdir()) == sorted(
        [conversion_dir(str(checkpoint), data, fastest).name, RECORD])
    assert first.count("auto: measuring one stream:") == 6  # each format twice: none made the bar
    assert f"auto: {fastest}, the fastest" in first and "this CPU does not speak in real time" in first
    assert "auto: measuring" not in second and f"auto: {fastest}, recorded on {choice['date']}" in second
    assert "converting" not in second


def test_auto_survives_a_conversion_that_fails(checkpoint_factory, tmp_path, monkeypatch, caplog):
    """The disk fills while mixed converts: INT8 serves, nothing of mixed is left, nothing is
    recorded (the next start tries again)."""
    checkpoint = checkpoint_factory("tiny", "custom_voice")
    prepare = loading.prepare_model

    def full_disk(source, data_dir, weights, codec_weights):
        if weights == "mixed":  # (the converter removes its own partial output: convert/pipeline.py)
            raise loading.ModelSourceError(f"--model {source}: [Errno 28] No space left on device")
        return prepare(source, data_dir, weights, codec_weights)

    monkeypatch.setattr(loading, "prepare_model", full_disk)
    monkeypatch.setattr(loading, "measure_stream", lambda *args: 5.0)
    monkeypatch.delenv(NEEDS_ENV, raising=False)
    with caplog.at_level(logging.INFO, logger="wyoming-qwen3tts"):
        service = loading.build_service(tiny_config(checkpoint, tmp_path, "auto"))
    try:
        assert str(service.engine.model.dir).endswith("-int8")
        assert len(service.engine.submit(service.catalogue.default.request("Hi.", "auto"),
                                         max_frames=4).read_all(60)) > 0
    finally:
        service.engine.close()
    assert "auto: loading mixed failed (--model" in caplog.text and "No space left on device" in caplog.text
    assert [p.name for p in (tmp_path / "converted").iterdir()] == [
        conversion_dir(str(checkpoint), tmp_path, "int8").name]  # no record, no mixed


def test_several_models_measure_once_per_checkpoint_size(checkpoint_factory, tmp_path, monkeypatch, caplog):
    """A CustomVoice and a Base model of one size (both tiny, "0b6"): the first measures, the
    second takes its choice; a model with an explicit format keeps it."""
    custom, base = checkpoint_factory("tiny", "custom_voice"), checkpoint_factory("tiny", "base")
    calls = []
    real = weights_choice.measure_stream

    def counted(engine, request, params):
        calls.append(engine.model.dir.name)
        return real(engine, request, params)

    monkeypatch.setattr(loading, "measure_stream", counted)
    monkeypatch.setenv(NEEDS_ENV, "1")  # INT8 makes it however busy the host
    config = tiny_config(custom, tmp_path, "auto")
    config = dataclasses.replace(config, models=(ModelEntry(str(custom)), ModelEntry(str(base)),
                                                 ModelEntry(str(base), weights="int4")))
    with caplog.at_level(logging.INFO, logger="wyoming-qwen3tts"):
        services = loading.build_services(config)
    try:
        assert [s.engine.model.dir.name.rsplit("-", 1)[1] for s in services] == ["int8", "int8", "int4"]
    finally:
        for service in services:
            service.engine.close()
    assert len(calls) == 1 and calls[0].endswith("-int8")
    assert caplog.text.count("auto: int8, recorded on") == 1
    assert list(Records(tmp_path / "converted" / RECORD).read()) == ["0b6"]


def test_the_voice_list_comes_from_whichever_conversion_auto_made(checkpoint_factory, tmp_path, monkeypatch):
    """A hub id with weights auto: an earlier start's conversion (here mixed) gives config.json,
    nothing is downloaded."""
    def refuse(*args, **kwargs):
        raise AssertionError("config.json must not be downloaded here")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    converted = conversion_dir(SOURCE, tmp_path, "mixed")
    converted.mkdir(parents=True)
    (converted / "config.json").write_bytes((checkpoint_factory("tiny", "custom_voice") / "config.json").read_bytes())
    config = apply_overrides(ServerConfig(), model=[SOURCE], data_dir=str(tmp_path))
    spec = loading.read_voice_spec(config.model_entries[0], config.model.data_path)
    assert spec is not None and spec.model_type == "custom_voice" and len(spec.speakers) == 9
