"""Voice cloning end to end against the official implementation (tiny Base checkpoint, f32).

A speech-like recording is written as a float WAV (read back bit-exactly) and given to both
sides: the official `create_voice_clone_prompt` / `generate_voice_clone`, and our Cloner,
prompt and runners. Reference codes and greedy generated codes must be identical, speaker
vectors and PCM within float rounding, in x-vector-only and in-context (ICL) modes; ICL
audio is the official decode of reference + generated codes with the reference cut off.
"""
from __future__ import annotations

import asyncio
import json
import logging
import math
import shutil
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import oracle  # first: stubs the unused 25 Hz deps
import pytest
from generate import generate_codes
from signals import read_wav, speech_like, write_float_wav
from test_server import Server
from wyoming.client import AsyncClient
from wyoming.info import Describe, Info

from wyoming_qwen3tts.client import synthesize
from wyoming_qwen3tts.clone.cloner import CloneError, Cloner
from wyoming_qwen3tts.config import ServerConfig, VoiceConfig, apply_overrides
from wyoming_qwen3tts.convert.pipeline import convert
from wyoming_qwen3tts.engine.audio import to_int16
from wyoming_qwen3tts.engine.config import EngineConfig
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.engine.scheduler import Scheduler
from wyoming_qwen3tts.model.manifest import MANIFEST, ConvertedModelError, read_converted
from wyoming_qwen3tts.say import main as say
from wyoming_qwen3tts.server.app import build_service
from wyoming_qwen3tts.server.voices import Catalogue


async def describe(uri: str) -> Info:
    async with AsyncClient.from_uri(uri) as client:
        await client.write_event(Describe().event())
        return Info.from_event(await client.read_event())


RATE = 24000
REF_TEXT = "This is the reference recording of the voice."
TEXT = "Hello world, this is a parity test of the cloned voice."
FRAMES = 40
log = logging.getLogger(__name__)


class OfficialClone(oracle.CodeCapture):
    """The official wrapper on a Base checkpoint, with its generated codes captured."""

    def run(self, **kwargs) -> tuple[np.ndarray, np.ndarray]:
        """(generated codes [T, 16], audio) of a greedy generate_voice_clone."""
        wavs, rate = self.wrapper.generate_voice_clone(**kwargs, do_sample=False, subtalker_dosample=False,
                                                       max_new_tokens=FRAMES + 1)
        assert rate == RATE
        (codes,) = self.codes
        return codes, np.asarray(wavs[0], np.float32)


@pytest.fixture(scope="module")
def base(checkpoint_factory, tmp_path_factory) -> tuple[Path, Path]:
    src = checkpoint_factory("tiny", "base", dtype="float32")
    return src, convert(src, tmp_path_factory.mktemp("ov") / "tiny-base", weights="fp32")


@pytest.fixture(scope="module")
def official(base) -> OfficialClone:
    return OfficialClone(base[0])


@pytest.fixture(scope="module")
def model(base) -> LoadedModel:
    return LoadedModel(base[1], precision="f32", kv_precision="f32")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, np.ndarray]:
    wav = speech_like(int(2.3 * RATE), 0)  # not a whole number of 1920-sample frames
    return write_float_wav(tmp_path_factory.mktemp("ref") / "ref.wav", wav), wav


def greedy(model: LoadedModel) -> SamplingParams:
    return SamplingParams.from_defaults(model.spec.generation, max_new_tokens=FRAMES + 1).greedy()


def test_reference_features_match_official(official, model, reference):
    path, wav = reference
    (item,) = official.wrapper.create_voice_clone_prompt(ref_audio=(wav, RATE), ref_text=REF_TEXT)
    ref = Cloner(model, use_cache=False).reference(path)
    expected = item.ref_code.numpy()
    assert ref.codes.shape == expected.shape == (math.ceil(wav.size / 1920), 16)
    np.testing.assert_array_equal(ref.codes, expected)
    assert min(len(np.unique(ref.codes[:, g])) for g in range(16)) >= 5  # codes that could differ
    vector = item.ref_spk_embedding.float().numpy()
    assert np.abs(vector).max() > 0.05
    assert np.abs(ref.speaker_vector - vector).max() <= 1e-4


@pytest.mark.parametrize("x_vector_only", [True, False], ids=["x-vector", "icl"])
def test_cloned_speech_matches_official(official, model, reference, x_vector_only):
    path, wav = reference
    ref_text = None if x_vector_only else REF_TEXT
    expected_codes, expected_pcm = official.run(text=TEXT, language="english", ref_audio=(wav, RATE),
                                                ref_text=ref_text, x_vector_only_mode=x_vector_only)
    clone = Cloner(model, use_cache=False).prompt(path, ref_text, x_vector_only)
    assert (clone.ref_codes is None) == x_vector_only
    embeds = model.embed_prompt(model.prompt(clone.request(TEXT, "english")))
    (seq,) = generate_codes(model, [embeds], [greedy(model)])  # audio streamed: 1 frame, then 8
    assert expected_codes.shape == (FRAMES, 16)
    np.testing.assert_array_equal(seq.codes, expected_codes)
    assert seq.pcm.shape == expected_pcm.shape == (FRAMES * 1920,)
    assert np.abs(expected_pcm).max() > 0.05
    assert np.abs(seq.pcm - expected_pcm).max() <= 1e-4
    if not x_vector_only:  # the reference must matter: a fresh decoder gives other audio
        fresh = model.decode_offline(seq.codes)
        assert np.abs(fresh - expected_pcm).max() > 1e-2
        assert np.abs(model.decode_offline(seq.codes, clone.ref_codes) - expected_pcm).max() <= 1e-4


def run_engine(model: LoadedModel, runner: str, requests: list) -> list[tuple[np.ndarray, np.ndarray]]:
    config = EngineConfig(kv_blocks=64, prefill_chunk=16, steady_chunk=8, max_frames=FRAMES, backend=runner)
    with Scheduler(model, config) as engine:
        streams = [engine.submit(r, greedy(model)) for r in requests]
        pcms = [s.read_all(120) for s in streams]
    return [(s.result.codes, pcm) for s, pcm in zip(streams, pcms)]


def test_native_runner_primes_the_codec_like_the_python_one(model, reference):
    clone = Cloner(model, use_cache=False).prompt(reference[0], REF_TEXT)
    requests = [clone.request(TEXT, "english"), clone.request("Another sentence.", "english"),
                clone.request(TEXT, "english")]  # the third reuses the primed state of the first
    native, python = run_engine(model, "auto", requests), run_engine(model, "python", requests)
    for (codes_n, pcm_n), (codes_p, pcm_p) in zip(native, python):
        np.testing.assert_array_equal(codes_n, codes_p)
        assert codes_n.shape[0] > 0 and np.array_equal(pcm_n, pcm_p)
    assert np.array_equal(native[0][1], native[2][1])


# ------------------------------------------------------------------------------ cache


@pytest.fixture
def encodings(monkeypatch) -> list[int]:
    """Counts the recordings the encoders run on (cache misses)."""
    count: list[int] = []
    encode = Cloner.encode
    monkeypatch.setattr(Cloner, "encode", lambda self, *a, **k: count.append(1) or encode(self, *a, **k))
    return count


def test_clone_cache_is_reused_and_follows_the_recording(model, reference, tmp_path, encodings):
    path = Path(shutil.copy(reference[0], tmp_path / "voice.wav"))
    cache = tmp_path / "cache"
    made = Cloner(model, cache_dir=cache).prompt(path, REF_TEXT)
    assert len(encodings) == 1 and len(list(cache.glob("*.npz"))) == 1
    again = Cloner(model, cache_dir=cache).prompt(path, REF_TEXT)  # a second start: nothing is encoded
    assert len(encodings) == 1
    np.testing.assert_array_equal(again.ref_codes, made.ref_codes)
    np.testing.assert_array_equal(again.speaker_vector, made.speaker_vector)

    write_float_wav(path, speech_like(int(2.3 * RATE), 5))  # the recording changes
    changed = Cloner(model, cache_dir=cache).prompt(path, REF_TEXT)
    assert len(encodings) == 2 and not np.array_equal(changed.ref_codes, made.ref_codes)


@pytest.mark.parametrize("damage", [b"", b"PK\x03\x04 truncated", b"not numpy at all"])
def test_a_damaged_cache_entry_is_encoded_again(model, reference, tmp_path, encodings, damage):
    cache = tmp_path / "cache"
    made = Cloner(model, cache_dir=cache).prompt(reference[0], REF_TEXT)
    (entry,) = cache.glob("*.npz")
    entry.write_bytes(damage)  # a power cut, a full disk, a stray file
    again = Cloner(model, cache_dir=cache).prompt(reference[0], REF_TEXT)
    assert len(encodings) == 2 and np.array_equal(again.ref_codes, made.ref_codes)
    assert entry.stat().st_size > 100  # rewritten


def test_a_recording_at_another_rate_gives_the_official_features(official, model, tmp_path):
    wav = speech_like(2 * 44100, 2, rate=44100)
    (item,) = official.wrapper.create_voice_clone_prompt(ref_audio=(wav, 44100), ref_text=REF_TEXT)
    ref = Cloner(model, use_cache=False).reference(write_float_wav(tmp_path / "cd.wav", wav, 44100))
    np.testing.assert_array_equal(ref.codes, item.ref_code.numpy())  # both resample with soxr HQ
    assert np.abs(ref.speaker_vector - item.ref_spk_embedding.float().numpy()).max() <= 1e-4


def test_server_reuses_the_clone_cache_on_its_second_start(base, reference, tmp_path, encodings):
    model_dir = tmp_path / "model"
    shutil.copytree(base[1], model_dir)
    bad = write_float_wav(tmp_path / "short.wav", speech_like(int(0.4 * RATE), 0))
    voices = (VoiceConfig("anna", description="Anna", ref_audio=str(reference[0]), ref_text=REF_TEXT),
              VoiceConfig("timbre", ref_audio=str(reference[0]), x_vector_only=True),
              VoiceConfig("broken", ref_audio=str(bad), ref_text="Too short."))
    config = replace(apply_overrides(ServerConfig(engine=EngineConfig(max_frames=8, kv_blocks=64)),
                                     model=str(model_dir), data_dir=str(tmp_path / "data"), greedy=True),
                     voices=voices)
    for start, expected in ((1, 2), (2, 1)):  # the short one is tried (and refused) every start
        service = build_service(config)
        try:
            catalogue = service.catalogue
            assert [v.name for v in catalogue.voices] == ["anna", "timbre"]
            (error,) = catalogue.errors
            assert "'broken'" in error and "0.4 s" in error
            pcm = service.engine.submit(catalogue.resolve("anna")[0].request("Hi there.", "auto"),
                                        service.params).read_all(60)
            assert pcm.size == 8 * 1920
            server = Server(service)  # and through Wyoming, as Home Assistant asks for it
            try:
                info = asyncio.run(asyncio.wait_for(describe(server.uri), 30))
                assert [(v.name, v.description) for v in info.tts[0].voices] == [("anna", "Anna"),
                                                                                 ("timbre", "timbre")]
                for voice in ("anna", "timbre"):
                    reply = asyncio.run(asyncio.wait_for(synthesize(server.uri, "Hi there.", voice=voice), 60))
                    assert len(reply.audio) == 8 * 1920 * 2
                    if voice == "anna":  # greedy: the same samples as the engine gave directly
                        assert np.array_equal(np.frombuffer(bytes(reply.audio), "<i2"), to_int16(pcm))
            finally:
                server.close()
        finally:
            service.engine.close()
        assert len(encodings) == expected, f"start {start}"
        encodings.clear()
    assert len(list((model_dir / "clones").glob("*.npz"))) == 1


def test_a_clone_that_cannot_speak_is_skipped_and_the_others_are_served(base, reference, tmp_path):
    long = write_float_wav(tmp_path / "long.wav", speech_like(int(20.0 * RATE), 3))  # 250 reference frames
    voices = (VoiceConfig("long", ref_audio=str(long), ref_text=REF_TEXT),
              VoiceConfig("timbre", ref_audio=str(reference[0]), x_vector_only=True))
    engine = EngineConfig(max_frames=8, kv_blocks=6, prefill_chunk=16)  # 192 tokens: too few for the long one
    config = replace(apply_overrides(ServerConfig(engine=engine), model=str(base[1]),
                                     data_dir=str(tmp_path / "data"), greedy=True), voices=voices)
    service = build_service(config)
    try:
        assert [v.name for v in service.catalogue.voices] == ["timbre"]
        (error,) = service.catalogue.errors
        assert "voice 'long'" in error and "first synthesis failed" in error and "KV cache" in error
        pool = service.engine.batch.pool
        assert pool.free == pool.num_blocks
    finally:
        service.engine.close()


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("make,message", [
    (lambda p: p, "cannot read"),
    (lambda p: (p.write_bytes(b"ID3\x04 not audio at all" * 10), p)[1], "not a WAV file"),
    (lambda p: write_float_wav(p, speech_like(int(0.5 * RATE), 0)), "0.5 s long"),
    (lambda p: write_float_wav(p, speech_like(int(31.0 * RATE), 0)), "31.0 s long"),
    (lambda p: write_float_wav(p, np.zeros(RATE * 2, np.float32)), "silent"),
], ids=["missing", "not-wav", "too-short", "too-long", "silent"])
def test_unusable_recordings_are_refused_with_the_voice_named(model, tmp_path, make, message):
    path = make(tmp_path / "ref.wav")
    with pytest.raises(CloneError, match=message) as e:
        Cloner(model, use_cache=False).prompt(path, REF_TEXT, where="voice 'anna'")
    assert "voice 'anna'" in str(e.value)


def test_in_context_cloning_needs_the_transcript(model, reference):
    for text in (None, "  "):
        with pytest.raises(CloneError, match="transcript"):
            Cloner(model, use_cache=False).prompt(reference[0], text)


def test_only_base_models_clone(converted_factory):
    other = LoadedModel(converted_factory("tiny", "custom_voice", "int8"), precision="f32")
    with pytest.raises(CloneError, match="needs a Base model"):
        Cloner(other)


def test_a_base_conversion_without_the_priming_graph_is_refused(base, tmp_path):
    out = Path(shutil.copytree(base[1], tmp_path / "old"))
    manifest = json.loads((out / MANIFEST).read_text())
    del manifest["graphs"]["codec_steady_1"]
    (out / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ConvertedModelError, match="codec_steady_1"):
        read_converted(out)


def test_an_unexpected_cloning_failure_costs_only_its_voice(model, reference):
    def clone(voice: VoiceConfig):
        if voice.name == "odd":
            raise struct.error("unpack requires a buffer of 8 bytes")
        return Cloner(model, use_cache=False).prompt(voice.ref_audio, voice.ref_text)

    voices = [VoiceConfig("odd", ref_audio="odd.wav", ref_text=REF_TEXT),
              VoiceConfig("fine", ref_audio=str(reference[0]), ref_text=REF_TEXT)]
    catalogue = Catalogue(model.spec, voices, clone=clone)
    assert [v.name for v in catalogue.voices] == ["fine"]
    assert "voice 'odd': cloning failed (error: unpack requires" in catalogue.errors[0]


def test_catalogue_serves_the_good_voices_when_one_recording_is_bad(model, reference, tmp_path):
    cloner = Cloner(model, use_cache=False)
    voices = [VoiceConfig("good", ref_audio=str(reference[0]), ref_text=REF_TEXT),
              VoiceConfig("gone", ref_audio=str(tmp_path / "missing.wav"), ref_text=REF_TEXT)]
    catalogue = Catalogue(model.spec, voices,
                          clone=lambda v: cloner.prompt(v.ref_audio, v.ref_text, v.x_vector_only,
                                                        where=f"voice {v.name!r}"))
    assert [v.name for v in catalogue.voices] == ["good"]
    (error,) = catalogue.errors
    assert "voice 'gone'" in error and "missing.wav" in error
    request = catalogue.resolve(None)[0].request("Hello.", "english")
    assert request.ref_codes is not None and request.ref_text == REF_TEXT and request.speaker_vector is not None


# ------------------------------------------------------------------------------ qwen3tts-say


def test_say_clones_a_recording(base, reference, tmp_path):
    outputs = []
    for name, options in (("streamed", []), ("offline", ["--offline"]), ("python", ["--backend", "python"])):
        wav = tmp_path / f"{name}.wav"
        assert say([TEXT, "--model", str(base[1]), "--clone", str(reference[0]), "--ref-text", REF_TEXT,
                    "--language", "english", "--greedy", "--precision", "f32", "--kv-precision", "f32",
                    "--max-frames", "20", "-o", str(wav)] + options) == 0
        samples, rate = read_wav(wav)
        assert rate == RATE and samples.shape == (20 * 1920,)
        outputs.append(samples.astype(np.int32))
    assert np.abs(outputs[0]).max() > 1000
    assert np.abs(outputs[0] - outputs[1]).max() <= 1 and np.array_equal(outputs[0], outputs[2])
    assert say([TEXT, "--model", str(base[1]), "--clone", str(tmp_path / "missing.wav"), "--x-vector-only",
                "-o", str(tmp_path / "x.wav")]) == 2


@pytest.mark.parametrize("argv,message", [
    (["--clone", "r.wav"], "--ref-text"),
    (["--clone", "r.wav", "--ref-text", "Hi.", "--x-vector-only"], "--ref-text"),
    (["--ref-text", "Hi."], "go with --clone"),
    (["--clone", "r.wav", "--ref-text", "Hi.", "--voice", "ryan"], "no --voice"),
])
def test_say_clone_arguments(argv, message, capsys):
    with pytest.raises(SystemExit):
        say(["Hello.", "--model", "m", "-o", "o.wav"] + argv)
    assert message in capsys.readouterr().err


def test_say_clone_needs_a_local_model(capsys):
    with pytest.raises(SystemExit):
        say(["Hello.", "--uri", "tcp://127.0.0.1:1", "--clone", "r.wav", "--ref-text", "Hi.", "-o", "o.wav"])
    assert "--clone need --model" in capsys.readouterr().err
