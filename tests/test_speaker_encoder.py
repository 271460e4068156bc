"""The voice-clone x-vector: numpy log-mel front-end and ECAPA-TDNN graph against the official
`mel_spectrogram` / `Qwen3TTSSpeakerEncoder` / `extract_speaker_embedding` (tiny Base checkpoint,
always after an IR round trip)."""
from __future__ import annotations

from pathlib import Path

import librosa
import numpy as np
import openvino as ov
import oracle  # before qwen_tts: installs stand-ins for its unused imports
import pytest
import torch
from ir import round_trip
from qwen_tts.core.models.modeling_qwen3_tts import mel_spectrogram
from signals import speech_like

from wyoming_qwen3tts.convert.ops import Weights
from wyoming_qwen3tts.convert.speaker_encoder import build_speaker_encoder, min_frames
from wyoming_qwen3tts.model.checkpoint import Checkpoint
from wyoming_qwen3tts.model.mel import hann_window, log_mel, mel_filterbank

SR = 24000
# 1 s, 3.3 s, a length that is not a multiple of the 256-sample hop, and a short clip
LENGTHS = [SR, 79200, 3 * SR + 123, 4000]


def official_mels(audio: np.ndarray) -> np.ndarray:
    """[T, 128] exactly as extract_speaker_embedding computes them."""
    mels = mel_spectrogram(torch.from_numpy(audio).unsqueeze(0), n_fft=1024, num_mels=128, sampling_rate=SR,
                           hop_size=256, win_size=1024, fmin=0, fmax=12000)
    return mels.transpose(1, 2)[0].numpy()


@pytest.fixture(scope="module")
def tiny(checkpoint_factory) -> Path:
    return checkpoint_factory("tiny", "base")


@pytest.fixture(scope="module")
def official(tiny):
    """Qwen3TTSForConditionalGeneration in float32."""
    return oracle.load_official(tiny).model


@pytest.fixture(scope="module")
def encoder(tiny, tmp_path_factory) -> ov.CompiledModel:
    """Saved, read back and compiled: CPU-plugin bugs have shown only after this."""
    return round_trip(build_speaker_encoder(Checkpoint(tiny), Weights("fp32")),
                      tmp_path_factory.mktemp("speaker") / "speaker_encoder.xml")


def test_filterbank_and_window_match_librosa_and_torch() -> None:
    ref = librosa.filters.mel(sr=SR, n_fft=1024, n_mels=128, fmin=0, fmax=12000)
    assert np.array_equal(mel_filterbank(), ref)  # bit-identical, float32
    assert np.abs(hann_window(1024) - torch.hann_window(1024).numpy()).max() <= 6e-8  # ≤ 1 ulp


@pytest.mark.parametrize("samples", LENGTHS)
def test_log_mel_matches_official(samples: int) -> None:
    audio = speech_like(samples, seed=samples % 7)
    ref = official_mels(audio)
    got = log_mel(audio)
    assert got.dtype == np.float32 and got.shape == ref.shape == (samples // 256, 128)
    assert np.abs(ref).mean() > 1.0 and np.ptp(ref) > 5.0  # real log-mels, not a clamped floor
    assert np.abs(got - ref).max() <= 1e-4


def test_log_mel_rejects_what_it_cannot_frame() -> None:
    with pytest.raises(ValueError, match="too short"):
        log_mel(np.zeros(384, np.float32))  # reflect padding of 384 needs more samples
    with pytest.raises(ValueError, match="mono"):
        log_mel(np.zeros((2, SR), np.float32))


def test_graph_interface(tiny) -> None:
    model = build_speaker_encoder(Checkpoint(tiny), Weights("fp32"))
    assert [p.get_any_name() for p in model.inputs] == ["mels"]
    assert [r.get_any_name() for r in model.outputs] == ["xvector"]
    assert model.input("mels").get_element_type() == model.output("xvector").get_element_type() == ov.Type.f32
    enc_dim = Checkpoint(tiny).spec.speaker_encoder.enc_dim
    assert str(model.input("mels").get_partial_shape()) == "[?,?,128]"
    assert str(model.output("xvector").get_partial_shape()) == f"[?,{enc_dim}]"


@pytest.mark.parametrize("samples", LENGTHS)
def test_xvector_matches_official(encoder, official, samples: int) -> None:
    """Our front-end + graph against extract_speaker_embedding end to end."""
    audio = speech_like(samples, seed=samples % 7)
    ref = official.extract_speaker_embedding(audio, SR).float().numpy()
    got = encoder([log_mel(audio)[None]])["xvector"]
    assert got.shape == (1, ref.shape[0])
    assert np.abs(ref).mean() > 0.05  # not a comparison between near-zeros
    assert np.abs(got[0] - ref).max() <= 1e-4


def test_graph_matches_official_module_on_the_same_mels(tiny, encoder, official) -> None:
    """The graph alone (same input features), including the shortest clip reflection allows."""
    shortest = min_frames(Checkpoint(tiny).spec.speaker_encoder)
    assert shortest == 5  # dilation 4, kernel 3: four reflected frames on each side
    for frames in (shortest, 7, 150):
        mels = official_mels(speech_like(frames * 256, seed=frames))[None]
        assert mels.shape[1] == frames
        with torch.no_grad():
            ref = official.speaker_encoder(torch.from_numpy(mels)).numpy()
        got = encoder([mels])["xvector"]
        assert np.abs(ref).mean() > 0.05
        assert np.abs(got - ref).max() <= 1e-5


def test_xvector_depends_on_the_voice(encoder) -> None:
    """Different voices give x-vectors far apart compared with the parity tolerance."""
    a, b = (encoder([log_mel(speech_like(2 * SR, seed))[None]])["xvector"][0] for seed in (1, 4))
    assert np.abs(a - b).max() > 100 * 1e-4


def test_batch_rows_equal_single_rows(encoder) -> None:
    mels = np.stack([log_mel(speech_like(37 * 256 + 11, seed)) for seed in (2, 5)])
    both = encoder([mels])["xvector"]
    assert both.shape[0] == 2
    for row in range(2):
        alone = encoder([mels[row:row + 1]])["xvector"]
        assert np.abs(both[row:row + 1] - alone).max() <= 1e-6
