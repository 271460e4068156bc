"""The accuracy tool's figures mean what they say: f32 against itself is exact, an INT8
conversion is close but not exact, and the JSON carries every figure."""
from __future__ import annotations

import json

import numpy as np
import pytest

from qwen3tts_tools.bench.accuracy import first_difference, main, rel_err

FRAMES = 8
ROW = {"weights", "precision", "kv_precision", "model_dir", "talker", "subcode", "decoder", "seconds"}
TALKER = {"prompt_rel_err", "logits_rel_err", "top1_agreement", "greedy_prefix", "greedy_agreement"}
SUBCODE = {"logits_rel_err", "group_rel_err", "code_agreement", "prefix_mean", "frames_equal", "audio_snr_db"}
DECODER = {"codec_weights", "snr_db", "max_abs_err"}
SPREAD = {"median", "min", "max", "n"}


@pytest.fixture(scope="module")
def report(converted_factory, tmp_path_factory) -> dict:
    reference = converted_factory("tiny", weights="fp32")
    int8 = converted_factory("tiny", weights="int8")
    out = tmp_path_factory.mktemp("accuracy")
    assert main(["--reference", str(reference), "--model", str(reference), "--model", str(int8),
                 "--precisions", "f32,bf16", "--kv", "f32", "--frames", str(FRAMES), "--threads", "1",
                 "--cache-dir", str(out / "ov-cache"), "-o", str(out)]) == 0
    data = json.loads((out / "accuracy.json").read_text())
    data["markdown"] = (out / "accuracy.md").read_text()
    return data


def _row(report: dict, weights: str) -> dict:
    (row,) = [r for r in report["rows"] if r["weights"] == weights]
    return row


def test_every_field(report):
    assert {"created", "command", "note", "case", "reference", "machine", "versions", "rows", "skipped"} <= set(report)
    assert {"talker_margin", "subcode_margin", "pcm_peak", "prompt_tokens"} <= set(report["reference"])
    assert len(report["rows"]) == 2
    for row in report["rows"]:
        assert set(row) == ROW
        assert set(row["talker"]) == TALKER and set(row["subcode"]) == SUBCODE and set(row["decoder"]) == DECODER
        assert set(row["talker"]["logits_rel_err"]) == SPREAD and row["talker"]["logits_rel_err"]["n"] == FRAMES
        assert len(row["subcode"]["group_rel_err"]) == 15
    assert "random weights" in report["note"]
    assert "| fp32 / f32 / KV f32 |" in report["markdown"] and "| int8 / f32 / KV f32 |" in report["markdown"]


def test_refused_presets_are_listed(report):
    # the CPU's paged attention keeps its cache in u8 or the compute precision: f32 at bf16 does not compile
    assert sorted(s["weights"] for s in report["skipped"]) == ["fp32", "int8"]
    assert all(s["precision"] == "bf16" and s["kv_precision"] == "f32" and s["reason"] for s in report["skipped"])
    assert "Not compiled: fp32 / bf16 / KV f32, int8 / bf16 / KV f32" in report["markdown"]


def test_f32_against_itself_is_exact(report):
    row = _row(report, "fp32")
    talker, subcode, decoder = row["talker"], row["subcode"], row["decoder"]
    assert talker["prompt_rel_err"] == 0 and talker["logits_rel_err"]["max"] == 0
    assert talker["top1_agreement"] == 1 and talker["greedy_agreement"] == 1 and talker["greedy_prefix"] == FRAMES
    assert subcode["logits_rel_err"]["max"] == 0 and subcode["code_agreement"] == 1 and subcode["prefix_mean"] == 15
    assert subcode["logits_rel_err"]["n"] == FRAMES * 15  # every group compared: no code ever differed
    assert decoder["snr_db"] is None and decoder["max_abs_err"] == 0  # bit-identical: infinite SNR
    assert subcode["audio_snr_db"] is None  # its codes are the reference's: the same audio


def test_int8_is_close_but_not_exact(report):
    talker, subcode, decoder = (_row(report, "int8")[k] for k in ("talker", "subcode", "decoder"))
    assert 0 < talker["prompt_rel_err"] < 0.05
    assert 0 < talker["logits_rel_err"]["median"] <= talker["logits_rel_err"]["max"] < 0.1
    assert 0 < subcode["logits_rel_err"]["median"] <= subcode["logits_rel_err"]["max"] < 0.2
    assert subcode["group_rel_err"][0] > 0  # group 1 is compared on every frame
    assert talker["top1_agreement"] >= 0.5 and subcode["code_agreement"] >= 0.3
    # a code that differs is heard (finite SNR, the audio not lost entirely); equal codes are not
    assert (subcode["audio_snr_db"] is None) == (subcode["code_agreement"] == 1)
    assert subcode["audio_snr_db"] is None or subcode["audio_snr_db"] > -10
    # the codec is not quantised (fp32 codec weights), and at f32 it is the reference's graph
    assert decoder["codec_weights"] == "fp32" and decoder["snr_db"] is None


def test_refuses_other_checkpoints_and_references(converted_factory, tmp_path):
    reference = converted_factory("tiny", weights="fp32")
    other = converted_factory("tiny-1.7b", weights="fp32")  # its source digest differs (tensor shapes)
    with pytest.raises(SystemExit, match="another checkpoint"):
        main(["--reference", str(reference), "--model", str(other), "-o", str(tmp_path)])
    with pytest.raises(SystemExit, match="must be an fp32 conversion"):
        main(["--reference", str(converted_factory("tiny", weights="int8")), "--model", str(reference),
              "-o", str(tmp_path)])


def test_helpers():
    same = np.array([[True, True, False], [True, True, True], [False, True, True]])
    assert first_difference(same).tolist() == [2, 3, 0]
    assert rel_err(np.array([[3.0, 4.0]]), np.array([[0.0, 5.0]])).tolist() == pytest.approx([np.sqrt(10) / 5])
