"""The server path to the first audio: each request's steps timed (server.profile), and no
work ahead of the first audio that it does not need."""
from __future__ import annotations

import dataclasses
import logging
import re

import pytest
from test_server import THREE, Server, run, tiny_server

from wyoming_qwen3tts.client import synthesize
from wyoming_qwen3tts.server.handler import ServiceSlot
from wyoming_qwen3tts.server.profile import STEPS, FirstAudio, Profile


@pytest.fixture(scope="module")
def server(converted_factory, tmp_path_factory):
    yield from tiny_server(converted_factory, tmp_path_factory)


@pytest.fixture
def profiled(server):
    """The same service behind a slot with server.profile on."""
    service = server.service
    slot = ServiceSlot(service=service, settings=dataclasses.replace(service.settings, profile=True))
    profiled = Server(service, slot)
    yield profiled
    profiled.close()


def test_first_audio_line_and_summary():
    first = FirstAudio(arrival=10.0)
    for i, step in enumerate(STEPS):
        first.mark(step, 10.0 + i / 1000)
    first.mark("text", 99.0)  # a later sentence does not move the first one's mark
    assert first.line() == ("first audio after 6.0 ms: text 0.0, ready 1.0, submitted 2.0, admitted 3.0, "
                            "first_pcm 4.0, received 5.0, written 6.0 (ms from arrival)")
    with pytest.raises(ValueError):
        first.mark("prefill")
    profile = Profile(enabled=True, limit=2)
    for _ in range(3):
        profile.add(first)
    profile.add(FirstAudio())  # no audio written: not a first-audio sample
    assert len(profile.requests) == 2
    assert profile.summary().startswith("profile of 2 requests") and "written 6.0/6.0" in profile.summary()
    assert Profile().summary() == "profile: no request got audio"


def test_each_request_logs_its_steps_in_order(profiled, caplog):
    caplog.set_level(logging.INFO, "wyoming_qwen3tts.server.speech")
    reply = run(synthesize(profiled.uri, THREE, voice="ryan"))
    assert reply.seconds > 0
    lines = [r.getMessage() for r in caplog.records if "first audio after" in r.getMessage()]
    assert len(lines) == 1, lines
    steps = re.findall(r"(\w+) (\d+\.\d)", lines[0].split(": ", 2)[-1])
    assert [name for name, _ in steps] == list(STEPS)
    times = [float(t) for _, t in steps]
    assert times == sorted(times) and times[-1] == pytest.approx(float(re.search(r"after (\d+\.\d)", lines[0])[1]))
    assert profiled.slot.profile.requests and "written" in profiled.slot.profile.summary()


def test_the_next_sentence_waits_for_the_first_audio(server, monkeypatch):
    """Submitted at once, the second sentence's prompt would be prefilled in the same engine
    step as the first's, before the first audio."""
    engine = server.service.engine
    streams = []
    submit = engine.submit

    def recording(*args, **kwargs):
        streams.append(submit(*args, **kwargs))
        return streams[-1]

    monkeypatch.setattr(engine, "submit", recording)
    run(synthesize(server.uri, THREE, voice="ryan"))
    assert len(streams) == 3
    for before, after in zip(streams, streams[1:]):
        assert after.marks["queued"] >= before.marks["first_audio"], (before.marks, after.marks)


def test_every_override_flag_reaches_the_config():
    from wyoming_qwen3tts.server.app import config_from_args, parse_args
    config = config_from_args(parse_args(["--profile", "--greedy", "--device-decoder", "NPU", "--seed", "3",
                                          "--text-feeding", "sentence", "--holdback", "0.2"]))
    assert config.server.profile and config.server.greedy and config.server.seed == 3
    assert config.server.text_feeding == "sentence" and config.server.holdback_s == 0.2
    assert config.devices.decoder == "NPU" and config.devices.talker == "CPU"
    assert not config_from_args(parse_args([])).server.profile
