"""qwen3tts-convert: IR per weight format, manifest, atomic output, hub source, manifest reader."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import openvino as ov
import pytest

from wyoming_qwen3tts.convert import cli, pipeline
from wyoming_qwen3tts.convert.pipeline import GRAPHS, INT4_GRAPHS, INT4_GROUP, ConvertError, convert
from wyoming_qwen3tts.model.checkpoint import Checkpoint, CheckpointError
from wyoming_qwen3tts.model.manifest import (
    FORMAT_VERSION,
    LEAD_GRAPH,
    MANIFEST,
    RUNTIME_FILES,
    ConvertedModelError,
    read_converted,
    source_digest,
)

REPO = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def converted(checkpoint_factory, tmp_path_factory):
    """fmt -> OUT of the tiny CustomVoice checkpoint, converted once per module."""
    cache: dict[str, Path] = {}

    def make(fmt: str) -> Path:
        if fmt not in cache:
            cache[fmt] = convert(checkpoint_factory("tiny"), tmp_path_factory.mktemp("conv") / fmt, weights=fmt)
        return cache[fmt]

    return make


def _bin_bytes(out: Path) -> dict[str, int]:
    return {name: (out / f"{name}.bin").stat().st_size for name in GRAPHS}


def _leftovers(parent: Path, name: str) -> list[Path]:
    return [p for p in parent.iterdir() if p.name.startswith(name + ".")]


def _failing(monkeypatch, exc: BaseException) -> None:
    """The GRAPHS table with its second graph raising after the first was saved."""
    def broken(ckpt, weights):
        raise exc

    graphs = dict(GRAPHS)
    graphs[list(graphs)[1]] = broken
    monkeypatch.setattr(pipeline, "GRAPHS", graphs)


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "int8", "int4", "mixed"])
def test_convert_writes_ir_manifest_and_runtime_files(converted, checkpoint_factory, fmt):
    src, out = checkpoint_factory("tiny"), converted(fmt)
    m, spec = read_converted(out, graphs=GRAPHS)
    assert spec == Checkpoint(src).spec
    for rel in RUNTIME_FILES + ("speech_tokenizer/preprocessor_config.json",):
        assert (out / rel).read_bytes() == (src / rel).read_bytes(), rel
    assert not list(out.rglob("*.safetensors"))
    assert m["format_version"] == FORMAT_VERSION and m["options"] == {
        "weights": fmt, "codec_weights": "fp32", "first_chunks": [1, 2, 4], "steady_chunks": [8, 24]}
    assert m["source"]["path"] == str(src.resolve()) and m["source"]["content_sha256"] == source_digest(src)[0]
    assert "model.safetensors" in m["source"]["files"]
    assert m["model"] == {"type": "custom_voice", "size": spec.model_size}
    assert set(m["versions"]) >= {"openvino", "nncf", "numpy"} and m["created"].endswith("+00:00")
    codec = ["codec", "codec_steady_1", "codec_steady_2", "codec_steady_4", "codec_steady_8", "codec_steady_24",
             LEAD_GRAPH]
    assert list(m["graphs"]) == list(GRAPHS) + codec
    core = ov.Core()
    for name, g in m["graphs"].items():
        # the fast preset: INT4 talker and subcode, INT8 embed; mixed: INT4 subcode alone
        int4 = (fmt == "int4" and name in INT4_GRAPHS) or (fmt == "mixed" and name == "subcode")
        stored = "int4" if int4 else "int8" if fmt in ("int4", "mixed") else fmt
        assert g["weights"] == ("fp32" if name.startswith("codec") else
                                {"int8": "int8_sym", "int4": f"int4_sym_g{INT4_GROUP}"}.get(stored, stored))
        assert g["bin_bytes"] == (out / g["bin"]).stat().st_size
        model = core.read_model(out / g["xml"])
        for ports, recorded in ((model.inputs, g["inputs"]), (model.outputs, g["outputs"])):
            assert [(p.get_any_name(), p.get_partial_shape(), p.get_element_type().get_type_name()) for p in ports] == \
                [(r["name"], ov.PartialShape(r["shape"]), r["type"]) for r in recorded]
        kinds, lm = g["constant_bytes"], not name.startswith("codec")  # the codec stays fp32
        assert ("i8" in kinds) == (lm and fmt in ("int8", "int4", "mixed")) and ("i4" in kinds) == int4, (name, kinds)
        assert ("f16" in kinds) == (lm and fmt != "fp32"), (name, kinds)
    assert m["graphs"]["talker"]["states"], "the talker IR is stateful"


def test_int4_int8_and_fp16_are_smaller_than_fp32(converted):
    fp32, fp16, int8, int4 = (_bin_bytes(converted(f)) for f in ("fp32", "fp16", "int8", "int4"))
    for name in GRAPHS:
        assert int8[name] < fp16[name] < fp32[name], name
        assert int8[name] < 0.35 * fp32[name], name  # weights dominate: ~1/4 plus scales
    for name in INT4_GRAPHS:  # tables and heads stay INT8 (most of a tiny model): smaller, not half
        assert int4[name] < int8[name], name
    mixed = _bin_bytes(converted("mixed"))  # INT8 but for the code predictor, INT4's
    assert mixed == {**int8, "subcode": int4["subcode"]}
    assert not _leftovers(converted("fp32").parent, "fp32")


@pytest.mark.parametrize("exc", [RuntimeError("builder failed"), KeyboardInterrupt()])
def test_failure_leaves_no_output_and_no_partial_dir(checkpoint_factory, tmp_path, monkeypatch, exc):
    _failing(monkeypatch, exc)
    with pytest.raises(type(exc)):
        convert(checkpoint_factory("tiny"), tmp_path / "out", weights="fp32")
    assert list(tmp_path.iterdir()) == []


def test_existing_output_needs_force_and_is_replaced(checkpoint_factory, tmp_path, monkeypatch):
    src, out = checkpoint_factory("tiny"), tmp_path / "out"
    convert(src, out, weights="fp32")
    first = (out / MANIFEST).read_text()
    with pytest.raises(ConvertError, match="already exists"):
        convert(src, out, weights="fp16")
    assert (out / MANIFEST).read_text() == first
    _failing(monkeypatch, RuntimeError("boom"))  # a failed forced conversion keeps the old one
    with pytest.raises(RuntimeError):
        convert(src, out, weights="fp16", force=True)
    assert (out / MANIFEST).read_text() == first and _leftovers(tmp_path, "out") == []
    monkeypatch.undo()
    convert(src, out, weights="fp16", force=True)
    m, _ = read_converted(out)
    assert m["options"]["weights"] == "fp16"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_force_never_replaces_an_unrelated_directory(checkpoint_factory, tmp_path):
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(ConvertError, match="not a converted model"):
        convert(checkpoint_factory("tiny"), precious, weights="fp32", force=True)
    assert (precious / "notes.txt").read_text() == "keep me" and len(list(tmp_path.iterdir())) == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    convert(checkpoint_factory("tiny"), empty, weights="fp32", force=True)
    read_converted(empty)


def test_hub_repo_id_is_downloaded(checkpoint_factory, tmp_path, monkeypatch):
    import huggingface_hub

    snapshot = tmp_path / "hub" / "snapshots" / COMMIT
    shutil.copytree(checkpoint_factory("tiny"), snapshot)
    calls = []

    def fake_download(repo_id, revision=None, **kwargs):
        calls.append((repo_id, revision))
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    out = convert(REPO, tmp_path / "out", weights="fp32", revision="v1.0")
    assert calls == [(REPO, "v1.0")]
    m, _ = read_converted(out)
    assert m["source"]["repo_id"] == REPO and m["source"]["revision"] == "v1.0" and m["source"]["commit"] == COMMIT
    assert m["source"]["content_sha256"] == source_digest(checkpoint_factory("tiny"))[0]


def test_hub_errors_are_clear(checkpoint_factory, tmp_path, monkeypatch):
    import huggingface_hub
    from huggingface_hub.utils import LocalEntryNotFoundError

    def offline(repo_id, revision=None, **kwargs):
        raise LocalEntryNotFoundError("Cannot find the requested files in the disk cache")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(ConvertError, match="offline"):
        convert(REPO, tmp_path / "out")
    with pytest.raises(ConvertError, match="only applies to a hub repo id"):
        convert(checkpoint_factory("tiny"), tmp_path / "out", revision="main")
    with pytest.raises(ConvertError, match="neither a checkpoint directory nor a hub repo id"):
        convert(str(tmp_path / "missing" / "dir"), tmp_path / "out")
    with pytest.raises(CheckpointError, match="missing file"):
        convert(tmp_path, tmp_path / "out")  # a directory that is not a checkpoint
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _broken(out: Path, how: str) -> None:
    m = json.loads((out / MANIFEST).read_text())
    if how == "missing manifest":
        (out / MANIFEST).unlink()
    elif how == "corrupt manifest":
        (out / MANIFEST).write_text('{"format": "wyoming-qwen3tts-ir", ')
    elif how == "newer format":
        (out / MANIFEST).write_text(json.dumps({**m, "format_version": FORMAT_VERSION + 1}))
    elif how == "truncated bin":
        with open(out / "talker.bin", "r+b") as f:
            f.truncate(100)
    elif how == "missing xml":
        (out / "embed.xml").unlink()
    elif how == "missing tokenizer":
        (out / "merges.txt").unlink()
    elif how == "bad config":
        (out / "config.json").write_text(json.dumps({"tts_model_type": "karaoke"}))


@pytest.mark.parametrize("how, message", [
    ("missing manifest", "no manifest.json"), ("corrupt manifest", "not valid JSON"),
    ("newer format", "format version"), ("truncated bin", "wrong size"), ("missing xml", "xml file missing"),
    ("missing tokenizer", "missing merges.txt"), ("bad config", "unknown tts_model_type"),
])
def test_read_converted_rejects_broken_directories(converted, tmp_path, how, message):
    out = tmp_path / "out"
    shutil.copytree(converted("fp32"), out)
    read_converted(out)
    _broken(out, how)
    with pytest.raises(ConvertedModelError, match=message):
        read_converted(out)


def test_read_converted_checks_directory_and_required_graphs(converted, tmp_path):
    with pytest.raises(ConvertedModelError, match="does not exist"):
        read_converted(tmp_path / "nothing")
    with pytest.raises(ConvertedModelError, match="graph 'codec_decoder' is missing"):
        read_converted(converted("fp32"), graphs=[*GRAPHS, "codec_decoder"])


def test_source_digest_covers_configs_and_headers_only(checkpoint_factory, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(checkpoint_factory("tiny"), src)
    digest, files = source_digest(src)
    assert {"config.json", "vocab.json", "model.safetensors", "speech_tokenizer/model.safetensors"} <= set(files)
    data = bytearray((src / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF  # a weight byte: not covered (hashing gigabytes would be slow)
    (src / "model.safetensors").write_bytes(bytes(data))
    assert source_digest(src)[0] == digest
    (src / "generation_config.json").write_text((src / "generation_config.json").read_text() + " ")
    assert source_digest(src)[0] != digest


def test_cli(checkpoint_factory, tmp_path, caplog):
    src, out = checkpoint_factory("tiny"), tmp_path / "out"
    assert cli.main([str(src), str(out), "--weights", "fp32"]) == 0
    assert read_converted(out)[0]["options"]["weights"] == "fp32"
    assert cli.main([str(src), str(out)]) == 1 and "--force" in caplog.text
    assert cli.main([str(src), str(out), "--weights", "fp16", "--force"]) == 0
    assert read_converted(out)[0]["options"]["weights"] == "fp16"
