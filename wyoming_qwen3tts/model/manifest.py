"""`manifest.json` of a converted model: what was converted, from what, how — and the reader.

The runtime opens a converted directory only through `read_converted`, so a directory left
behind by an interrupted conversion (it has no manifest: the manifest is written last) or by
an incompatible converter is rejected with a message instead of failing somewhere deep in
OpenVINO. This module is imported at run time: it must not import nncf or huggingface_hub.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from .. import __version__
from .spec import ConfigError, ModelSpec, parse_model_config

MANIFEST = "manifest.json"
FORMAT = "wyoming-qwen3tts-ir"
FORMAT_VERSION = 5
READABLE_VERSIONS = (1, 2, 3, 4, 5)  # older readable formats load with what they have
# What each format version added (a managed conversion of an older one is converted again for it).
FORMAT_CHANGES = {2: "the subcode graph names its weights, so the native runner can run the code predictor itself "
                     "(older: OpenVINO's subcode graph, slower)",
                  3: "the short codec chunk graphs take the decoder state, so a streamed response comes in short "
                     "chunks until it is ahead of playback (older: its start is held longer)",
                  4: "the talker graph names its weights, so the native runner can run the talker itself "
                     "(older: OpenVINO's paged talker, slower)",
                  5: "a codec graph decodes the first 40 ms of a stream ahead of the rest of its first frame, so the "
                     "first audio comes sooner (older: after the whole frame's decoding)"}
CLONE_GRAPHS = ("speaker_encoder", "codec_encoder")  # a Base model's encoders of reference audio
LEAD_SAMPLES = 2  # of a frame's 4 latent samples: a stream's first 40 ms, decoded ahead (engine/codec_lead.py)
LEAD_GRAPH = f"codec_lead_{LEAD_SAMPLES}"
PRIMING_GRAPH = "codec_steady_1"  # a Base model's decoder hears reference codes of any length

# What the runtime reads besides the IR: the spec (three JSON documents) and the text tokenizer.
RUNTIME_FILES = ("config.json", "generation_config.json", "vocab.json", "merges.txt", "tokenizer_config.json",
                 "speech_tokenizer/config.json")
OPTIONAL_RUNTIME_FILES = ("speech_tokenizer/preprocessor_config.json",)


class ConvertedModelError(ValueError):
    """A directory that is not a usable converted model; the message says why and what to do."""


def _versions() -> dict[str, str | None]:
    def dist(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {"python": platform.python_version(), "openvino": ov.get_version(), "nncf": dist("nncf"),
            "numpy": np.__version__}


def source_digest(root: Path) -> tuple[str, list[str]]:
    """sha256 identifying a checkpoint's contents, and the files it covers.

    Covers every *.json / *.txt / *.safetensors in the checkpoint root and speech_tokenizer/.
    Small files are hashed whole; of a safetensors file only the header (tensor names, dtypes,
    shapes, offsets, metadata) and the file size — hashing gigabytes of weights would make every
    conversion slow, and the releases never change weights without changing a file's size or
    header (a re-upload shows in the hub commit hash, which the manifest records too).
    """
    h = hashlib.sha256()
    files = sorted(p for d in (root, root / "speech_tokenizer") if d.is_dir() for p in d.iterdir()
                   if p.is_file() and p.suffix in (".json", ".txt", ".safetensors"))
    rels = []
    for p in files:
        rel = p.relative_to(root).as_posix()
        rels.append(rel)
        h.update(rel.encode() + b"\0")
        with open(p, "rb") as f:
            if p.suffix == ".safetensors":
                head = f.read(8)
                n = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
                h.update(p.stat().st_size.to_bytes(8, "little") + head + f.read(min(n, 100 * 1024 * 1024)))
            else:
                h.update(len(data := f.read()).to_bytes(8, "little") + data)
    return h.hexdigest(), rels


def _port(port: ov.Output) -> dict[str, Any]:
    # the shape as OpenVINO prints it ("[?,16]", "[1..16,2048]"): ov.PartialShape(text) parses it back
    return {"name": port.get_any_name(), "shape": str(port.get_partial_shape()),
            "type": port.get_element_type().get_type_name()}


def constant_bytes(model: ov.Model) -> dict[str, int]:
    """Bytes of constants by element type: shows what the weights really are (i8 after nncf)."""
    sizes: dict[str, int] = {}
    for node in model.get_ordered_ops():
        if node.get_type_name() == "Constant":
            t = node.get_output_element_type(0)
            n = int(np.prod(node.get_output_shape(0), dtype=np.int64)) * t.size
            sizes[t.get_type_name()] = sizes.get(t.get_type_name(), 0) + n
    return dict(sorted(sizes.items()))


def describe_graph(model: ov.Model, xml: str, weights: str) -> dict[str, Any]:
    """Manifest entry of one graph (before saving; the pipeline adds the file sizes)."""
    return {"xml": xml, "bin": Path(xml).with_suffix(".bin").name, "weights": weights,
            "inputs": [_port(p) for p in model.inputs], "outputs": [_port(p) for p in model.outputs],
            "states": sorted(v.get_info().variable_id for v in model.get_variables()),
            "constant_bytes": constant_bytes(model)}


def build_manifest(source: dict[str, Any], options: dict[str, Any], graphs: dict[str, Any],
                   files: list[str], spec: ModelSpec, created: str) -> dict[str, Any]:
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "package_version": __version__,
            "created": created, "source": source, "options": options,
            "model": {"type": spec.model_type, "size": spec.model_size},
            "graphs": graphs, "files": files, "versions": _versions()}


def _fail(out: Path, why: str) -> ConvertedModelError:
    return ConvertedModelError(f"{out} is not a usable converted model: {why} "
                               f"(convert the checkpoint again with qwen3tts-convert)")


def _json(path: Path, out: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _fail(out, f"missing {path.relative_to(out)}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _fail(out, f"{path.relative_to(out)} is not valid JSON ({e})") from None


def older_format(manifest: dict[str, Any]) -> str | None:
    """What a conversion with this manifest lacks against the current format ("" if nothing
    is known), or None when it is current."""
    version = manifest.get("format_version", 0)
    if version >= FORMAT_VERSION:
        return None
    return "; ".join(FORMAT_CHANGES[v] for v in range(version + 1, FORMAT_VERSION + 1) if v in FORMAT_CHANGES)


def read_converted(out: str | Path, graphs: Iterable[str] = ()) -> tuple[dict[str, Any], ModelSpec]:
    """Validate a converted directory and parse its model spec; `graphs` must all be present."""
    out = Path(out)
    if not out.is_dir():
        raise ConvertedModelError(f"converted model directory {out} does not exist")
    if not (out / MANIFEST).is_file():
        raise _fail(out, f"no {MANIFEST} (not converted, or an interrupted conversion)")
    m = _json(out / MANIFEST, out)
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise _fail(out, f"{MANIFEST} is not a {FORMAT} manifest")
    if m.get("format_version") not in READABLE_VERSIONS:
        raise _fail(out, f"{MANIFEST} has format version {m.get('format_version')!r}, "
                         f"this version of wyoming-qwen3tts ({__version__}) reads versions "
                         f"{', '.join(map(str, READABLE_VERSIONS))}")
    entries = m.get("graphs")
    if not isinstance(entries, dict) or not entries:
        raise _fail(out, f"{MANIFEST} lists no graphs")
    for name in graphs:
        if name not in entries:
            raise _fail(out, f"graph {name!r} is missing (has: {', '.join(entries)})")
    for name, g in entries.items():
        for key in ("xml", "bin"):
            if not isinstance(g, dict) or not isinstance(g.get(key), str) or not (out / g[key]).is_file():
                raise _fail(out, f"graph {name!r}: {key} file missing")
        if g.get("bin_bytes") is not None and (out / g["bin"]).stat().st_size != g["bin_bytes"]:
            raise _fail(out, f"graph {name!r}: {g['bin']} has the wrong size (truncated?)")
    for rel in RUNTIME_FILES:
        if not (out / rel).is_file():
            raise _fail(out, f"missing {rel}")
    config, generation, codec = (_json(out / rel, out) for rel in
                                 ("config.json", "generation_config.json", "speech_tokenizer/config.json"))
    try:
        spec = parse_model_config(config, generation, codec, where=str(out / "config.json"))
    except ConfigError as e:
        raise _fail(out, str(e)) from None
    if spec.model_type == "base":  # conversions made before voice cloning lack these
        for name in (*CLONE_GRAPHS, PRIMING_GRAPH):
            if name not in entries:
                raise _fail(out, f"graph {name!r} is missing: a Base model needs it to clone voices")
    return m, spec
