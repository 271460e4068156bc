"""Several models in one server (issue "Several models in one server"; docs/ARCHITECTURE.md,
"Several models in one server"): one voice list, each request on its voice's model, models
loaded at start or on a first request, unloaded beyond a memory budget, and configurations
that cannot work refused at start naming the key."""
from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab_server import free_port
from signals import speech_like, write_float_wav
from test_http_api import REF_TEXT as LAB_TEXT
from test_http_api import call, clip_wav, form
from test_server import Server, run
from wyoming.client import AsyncClient
from wyoming.info import Describe, Info

from wyoming_qwen3tts.client import synthesize
from wyoming_qwen3tts.config import ConfigError, ModelEntry, ServerConfig, VoiceConfig, apply_overrides, load_config
from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.model.manifest import read_converted
from wyoming_qwen3tts.server import loading
from wyoming_qwen3tts.server.directory import plan_models
from wyoming_qwen3tts.server.http_api import HttpServer, build_app, start_http
from wyoming_qwen3tts.server.model_set import ModelSet
from wyoming_qwen3tts.server.service import ServiceSlot
from wyoming_qwen3tts.server.voice_lab import VoiceLab

FRAMES = 12
REF_TEXT = "This is the reference recording of the voice."


def config_of(models: list[ModelEntry], data_dir: Path, voices: tuple[VoiceConfig, ...] = (), **model) -> ServerConfig:
    """Greedy, f32 (batch-independent numbers), one thread: exact and comparable."""
    config = apply_overrides(ServerConfig(engine=EngineConfig(max_frames=FRAMES, min_frames=FRAMES, kv_blocks=64)),
                             data_dir=str(data_dir), greedy=True, threads=1, samples_per_chunk=100_000,
                             precision="f32")
    config = dataclasses.replace(config, models=tuple(models), voices=voices,
                                 model=dataclasses.replace(config.model, **model))
    config.validate()
    return config


class Served:
    """A server as serve() runs it: plans, the voice list (with the voice lab's saved voices)
    before any load, a ModelSet preloading, the HTTP side at self.url."""

    def __init__(self, config: ServerConfig) -> None:
        self.slot = ServiceSlot(settings=config.server)
        self.server = Server(None, self.slot)
        self.models: ModelSet | None = None
        self.http: HttpServer | None = None
        self.url = f"http://127.0.0.1:{free_port()}"
        lab = VoiceLab(self.slot, config)

        async def start() -> None:
            self.http = await start_http(build_app(self.slot, config.server, lab), self.url.removeprefix("http://"))
            plans = await asyncio.to_thread(loading.plan, config)
            directory = lab.prepare(plans)
            assert directory is not None
            self.slot.publish(directory)
            self.models = self.slot.loader = ModelSet(config, plans, self.slot, asyncio.get_running_loop(),
                                                      lab.attach)
            await self.models.preload()

        asyncio.run_coroutine_threadsafe(start(), self.server.loop).result(600)
        self.uri = self.server.uri

    def close(self) -> None:
        if self.http is not None:
            asyncio.run_coroutine_threadsafe(self.http.stop(), self.server.loop).result(20)
        self.server.close()
        assert self.models is not None
        for service in self.models.close():
            service.engine.close()


@pytest.fixture
def served() -> Iterator[list[Served]]:
    started: list[Served] = []
    yield started
    for each in started:
        each.close()


def describe(uri: str) -> Info:
    async def ask() -> Info:
        async with AsyncClient.from_uri(uri) as client:
            await client.write_event(Describe().event())
            event = await client.read_event()
            assert event is not None
            return Info.from_event(event)

    return run(ask())


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Path:
    return write_float_wav(tmp_path_factory.mktemp("voices") / "grandma.wav", speech_like(int(2.5 * 24000), 3))


def test_preset_and_cloned_voices_in_one_list_each_as_served_alone(converted_factory, recording, tmp_path, served):
    custom = str(converted_factory("tiny", "custom_voice", "int8"))
    base = str(converted_factory("tiny", "base", "int8"))
    grandma = VoiceConfig(name="grandma", ref_audio=str(recording), ref_text=REF_TEXT, description="Grandma")
    together = Served(config_of([ModelEntry(custom), ModelEntry(base)], tmp_path / "a", (grandma,)))
    served.append(together)
    (program,) = describe(together.uri).tts
    names = [v.name for v in program.voices]
    assert names[-1] == "grandma" and "ryan" in names and len(names) == 10
    assert "0.6B" in program.description or "Base" in program.description
    assert all(v.languages and v.description for v in program.voices)

    async def both() -> tuple[bytes, bytes]:
        a, b = await asyncio.gather(synthesize(together.uri, "Hello there, how are you?", voice="ryan"),
                                    synthesize(together.uri, "Good morning to you all.", voice="grandma"))
        return a.audio, b.audio

    ryan_together, grandma_together = run(both())
    alone_custom = Served(config_of([ModelEntry(custom)], tmp_path / "b"))
    served.append(alone_custom)
    ryan_alone = run(synthesize(alone_custom.uri, "Hello there, how are you?", voice="ryan")).audio
    alone_base = Served(config_of([ModelEntry(base)], tmp_path / "c", (grandma,)))
    served.append(alone_base)
    grandma_alone = run(synthesize(alone_base.uri, "Good morning to you all.", voice="grandma")).audio
    assert len(ryan_alone) == FRAMES * 1920 * 2 and len(grandma_alone) == FRAMES * 1920 * 2
    assert ryan_together == ryan_alone
    assert grandma_together == grandma_alone


def test_a_lazy_model_is_listed_at_once_and_loads_on_its_first_request(converted_factory, recording, tmp_path,
                                                                       served):
    custom = str(converted_factory("tiny", "custom_voice", "int8"))
    base = str(converted_factory("tiny", "base", "int8"))
    grandma = VoiceConfig(name="grandma", ref_audio=str(recording), ref_text=REF_TEXT)
    server = Served(config_of([ModelEntry(custom), ModelEntry(base, preload=False)], tmp_path, (grandma,)))
    served.append(server)
    assert list(server.slot.services) == [0]
    assert "grandma" in [v.name for v in describe(server.uri).tts[0].voices]
    reply = run(synthesize(server.uri, "Good morning.", voice="grandma"))  # waits for the load
    assert len(reply.audio) == FRAMES * 1920 * 2
    assert sorted(server.slot.services) == [0, 1]


def test_the_memory_budget_unloads_the_least_recently_used_idle_model(converted_factory, tmp_path, served):
    custom = str(converted_factory("tiny", "custom_voice", "int8"))
    design = str(converted_factory("tiny", "voice_design", "int8"))
    calm = VoiceConfig(name="calm", instruct="A calm, warm voice.")
    server = Served(config_of([ModelEntry(custom), ModelEntry(design, preload=False)], tmp_path, (calm,),
                              memory_budget_mb=1))  # below any model: every load unloads the idle ones
    served.append(server)
    assert list(server.slot.services) == [0]
    assert len(run(synthesize(server.uri, "Hello.", voice="calm")).audio) == FRAMES * 1920 * 2
    assert list(server.slot.services) == [1]  # the CustomVoice model was idle: unloaded for it
    assert len(run(synthesize(server.uri, "Hello.", voice="ryan")).audio) == FRAMES * 1920 * 2
    assert list(server.slot.services) == [0]


def test_the_voice_lab_saves_a_clone_next_to_the_preset_voices(converted_factory, tmp_path, served):
    """Preset voices + my own voice: the lab clones with the Base model, the voice joins the one
    list at once and at the next start (listed before any model loads), and speaks."""
    custom = str(converted_factory("tiny", "custom_voice", "int8"))
    base = str(converted_factory("tiny", "base", "int8"))
    config = config_of([ModelEntry(custom), ModelEntry(base)], tmp_path)
    first = Served(config)
    served.append(first)
    info = json.loads(call("GET", f"{first.url}/api/info")[1])
    assert info["can_clone"] and not info["can_design"] and "en" in info["languages"]
    status, body, _ = call("POST", f"{first.url}/api/voices", data=form(clip_wav(), name="Grandma",
                                                                       transcript=LAB_TEXT, language="en"))
    assert status == 201, body
    names = [v.name for v in describe(first.uri).tts[0].voices]
    assert "ryan" in names and names[-1] == "Grandma" and len(names) == 10
    listed = {v["name"]: v for v in json.loads(call("GET", f"{first.url}/api/voices")[1])}
    assert listed["Grandma"]["kind"] == "saved" and "Base" in listed["Grandma"]["model"]
    assert listed["ryan"]["kind"] == "preset" and "CustomVoice" in listed["ryan"]["model"]
    assert len(run(synthesize(first.uri, "Good morning.", voice="Grandma")).audio) == FRAMES * 1920 * 2
    first.close()
    served.remove(first)
    second = Served(dataclasses.replace(config, models=(ModelEntry(custom), ModelEntry(base, preload=False))))
    served.append(second)
    assert list(second.slot.services) == [0] and "Grandma" in [v.name for v in describe(second.uri).tts[0].voices]
    assert len(run(synthesize(second.uri, "Good morning.", voice="Grandma")).audio) == FRAMES * 1920 * 2


def specs_of(*converted: Path) -> list:
    return [read_converted(c)[1] for c in converted]


def test_a_preset_speaker_of_two_models_is_served_under_two_names(converted_factory, tmp_path):
    one = converted_factory("tiny", "custom_voice", "int8")
    two = converted_factory("tiny", "custom_voice", "fp32")
    config = config_of([ModelEntry(str(one)), ModelEntry(str(two))], tmp_path)
    first, second = plan_models(config, specs_of(one, two))
    assert first.renames == {}
    assert set(second.renames) == {s.name for s in second.spec.speakers}
    assert all(name.startswith(f"{speaker}-") for speaker, name in second.renames.items())
    directory = loading.preview_directory(config, [first, second])
    assert len(directory.voices) == 18
    renamed = directory.resolve(second.renames["ryan"])
    assert renamed[0] == 1 and renamed[1].speaker == "ryan" and "CustomVoice" in renamed[1].description
    taken = dataclasses.replace(config, voices=(VoiceConfig(name="Ryan", instruct="A calm voice."),))
    with pytest.raises(ConfigError, match=r"voices\[0\]"):
        plan_models(taken, specs_of(one, two))


@pytest.mark.parametrize(("voice", "model", "message"), [
    (VoiceConfig(name="grandma", ref_audio="x.wav", x_vector_only=True), None, r"voices\[0\]\.model: .*models 1 and 2"),
    (VoiceConfig(name="calm", instruct="A calm voice."), None, r"voices\[0\]: no served model can serve"),
    (VoiceConfig(name="grandma", ref_audio="x.wav", x_vector_only=True), 0, r"voices\[0\]\.model: .*cannot serve"),
])
def test_a_voice_no_model_or_two_models_could_serve_fails_at_start(converted_factory, tmp_path, voice, model,
                                                                   message):
    converted = [converted_factory("tiny", v, "int8") for v in ("custom_voice", "base", "base")]
    converted[2] = converted_factory("tiny", "base", "fp32")
    config = config_of([ModelEntry(str(c)) for c in converted], tmp_path, (dataclasses.replace(voice, model=model),))
    with pytest.raises(ConfigError, match=message):
        plan_models(config, specs_of(*converted))


def test_a_voice_naming_a_model_not_served_fails_when_the_config_loads(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("models:\n  - source: a\n  - source: b\nvoices:\n"
                      "  - {name: calm, instruct: A calm voice., model: c}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"voices\[0\]\.model: 'c' is not the source of a served model"):
        load_config(config)
    config.write_text("models:\n  - source: a\nvoices:\n  - {name: calm, instruct: A calm voice., model: 3}\n",
                      encoding="utf-8")
    with pytest.raises(ConfigError, match=r"voices\[0\]\.model: 3 is not a model index"):
        load_config(config)


def test_openai_lists_every_model_and_the_voice_picks_the_one_that_speaks(converted_factory, recording, tmp_path,
                                                                         served):
    custom = str(converted_factory("tiny", "custom_voice", "int8"))
    base = str(converted_factory("tiny", "base", "int8"))
    grandma = VoiceConfig(name="grandma", ref_audio=str(recording), ref_text=REF_TEXT)
    server = Served(config_of([ModelEntry(custom), ModelEntry(base)], tmp_path, (grandma,)))
    served.append(server)
    ids = [m["id"] for m in json.loads(call("GET", f"{server.url}/v1/models")[1])["data"]]
    assert len(ids) == 2 and "customvoice" in ids[0] and "base" in ids[1]
    voices = json.loads(call("GET", f"{server.url}/v1/audio/voices")[1])["voices"]
    assert {v["id"]: v["model"] for v in voices}["grandma"] == ids[1]
    for model, voice in (("tts-1", "ryan"), (ids[1], "grandma")):
        request = {"model": model, "input": "Good morning.", "voice": voice, "response_format": "pcm"}
        status, audio, _ = call("POST", f"{server.url}/v1/audio/speech", json=request)
        assert status == 200 and len(audio) == FRAMES * 1920 * 2, (model, voice, audio[:200])
    status, body, _ = call("POST", f"{server.url}/v1/audio/speech",
                           json={"model": ids[1], "input": "Hello.", "voice": "ryan", "response_format": "pcm"})
    assert status == 400 and json.loads(body)["error"]["param"] == "model"
