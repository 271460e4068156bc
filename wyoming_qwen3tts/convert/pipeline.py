"""Checkpoint -> directory of OpenVINO IRs + runtime files + manifest.json, atomically.

Everything is written into a sibling `OUT.partial-<random>` and renamed into place only after
the manifest (written last) and all files are on disk, so OUT is either absent, the previous
conversion, or complete — never half-written, whatever interrupts the conversion. Graphs are
built, compressed and saved one at a time and dropped before the next, and a graph's f32
weights beyond `weight_budget` bytes live in a scratch file rather than RAM (convert/spill.py),
which bounds the peak memory (docs/OPENVINO.md §16).
"""
from __future__ import annotations

import gc
import glob
import json
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

import openvino as ov

from ..engine.memory import peak_mb
from ..hub import import_hub
from ..model import manifest as mf
from ..model.checkpoint import Checkpoint
from .blocked import row_blocked_quantiser
from .codec import PLAIN, Convs, build_codec_decoder
from .codec_encoder import build_codec_encoder
from .codec_int8 import Int8Convs, calibrate
from .codec_stream import build_codec_lead, build_codec_steady
from .embed_graph import build_embed
from .ops import WEIGHT_FORMATS, Weights
from .speaker_encoder import build_speaker_encoder
from .spill import WeightSpill
from .subcode import build_subcode
from .talker import build_talker

log = logging.getLogger(__name__)

Builder = Callable[[Checkpoint, Weights], ov.Model]

# The language-model graphs of a converted model, in conversion order (weights: --weights).
GRAPHS: dict[str, Builder] = {"embed": build_embed, "talker": build_talker, "subcode": build_subcode}
# A Base model's graphs for cloning voices from reference audio (always fp32: they run once
# per reference, and the reference codes must match the official ones exactly).
CLONE_GRAPHS: dict[str, Builder] = dict(zip(mf.CLONE_GRAPHS, (build_speaker_encoder, build_codec_encoder)))
# The codec's chunk graphs: fp32 (exact; run in bf16 where the CPU has it), fp16 (half the size), or
# int8: its last blocks' convolutions in INT8 with calibrated ranges (convert/codec_int8.py), about
# twice as fast on a CPU without BF16, ~24 dB from the exact decoder on random full-size weights.
CODEC_FORMATS = ("fp32", "fp16", "int8")  # as config.CODEC_FORMATS
FIRST_CHUNKS = (1, 2, 4)  # frames per first codec call the runtime may choose from
STEADY_CHUNKS = (8, 24)


def codec_graphs(first: Sequence[int] = FIRST_CHUNKS, steady: Sequence[int] = STEADY_CHUNKS,
                 clone: bool = False, convs: Convs = PLAIN) -> dict[str, Builder]:
    """The offline decoder plus a static-shape streaming graph per exported chunk size.

    Every chunk graph is a steady one (it takes the decoder state): a steady graph fed a zero
    state computes what a first-chunk graph does (~1 ms more for one frame, 0.6B bf16), and the
    graph that starts a stream then also decodes a paced stream's short chunks
    (engine/pacing.py) and an in-context clone's first chunk, which starts from the state the
    reference codes leave. A Base (clone) model always gets the 1-frame graph, with which a
    reference of any length primes the decoder exactly. convs: how the last blocks' convolutions
    multiply (codec.decode)."""
    sizes = set(first) | set(steady) | ({1} if clone else set())
    graphs: dict[str, Builder] = {"codec": partial(build_codec_decoder, convs=convs)}
    for n in sorted(sizes):
        if n < 1:
            raise ConvertError(f"codec chunk sizes must be at least 1 frame, got {n}")
        graphs[f"codec_steady_{n}"] = partial(build_codec_steady, frames=n, convs=convs)
    graphs[mf.LEAD_GRAPH] = partial(build_codec_lead, samples=mf.LEAD_SAMPLES, convs=convs)  # engine/codec_lead.py
    return graphs


_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
# INT4 (the fast preset): symmetric, one scale per group of input channels. nncf keeps the
# embedding tables and the output head of each graph in the backup format (INT8_SYM); the
# prompt-embedding graph is INT8 whole (it gathers rows, it reads no full matrix per step).
INT4_GROUP = 128
INT4_GRAPHS = ("talker", "subcode")
# A weight format by stage: `mixed` keeps the talker (which picks each frame's first code, what
# is said and how) at INT8 and gives the code predictor, whose 5 layers are read 15 times per
# frame, INT4's half-size working set (docs/BENCHMARKS.md, "The default preset, and `mixed`").
STAGE_FORMATS: dict[str, dict[str, str]] = {"mixed": {"talker": "int8", "subcode": "int4"}}
# formats whose graphs are built from f32 constants and quantized by the builder itself, not by nncf
_BUILT_FROM = {"int8_conv": "fp32"}
_PRECISION = {"int8": "int8_sym", "int4": f"int4_sym_g{INT4_GROUP}", "fp16": "fp16", "fp32": "fp32",
              "int8_conv": "fp32+int8_conv"}  # the codec's INT8: only its quantized convolutions in int8
# f32 weights of one graph held in RAM before the rest go to a scratch file: with the compressed
# copy, nncf's per-matrix work and the libraries, a full-size 1.7B INT4 converts in 1.6 GB peak RSS
# and a 0.6B INT8 in 1.3 (docs/BENCHMARKS.md), which an 8 GB box beside Home Assistant can give.
WEIGHT_BUDGET = 512 * 2**20


def graph_format(weights: str, name: str) -> str:
    """The weight format of language-model graph `name` in a `weights` conversion: INT4 only
    where the format puts it (its other graphs, and any graph of a format by stage that does
    not name it, are INT8)."""
    if weights in STAGE_FORMATS:
        return STAGE_FORMATS[weights].get(name, "int8")
    return "int8" if weights == "int4" and name not in INT4_GRAPHS else weights


class ConvertError(RuntimeError):
    """A conversion that cannot start or finish; the message says what to do."""


def _peak_rss_gb() -> float:
    return peak_mb() / 1024


def resolve_source(src: str | Path, revision: str | None) -> tuple[Path, dict[str, Any]]:
    """A local checkpoint directory, or a hub repo id downloaded (or found in the HF cache)."""
    path = Path(src)
    if path.is_dir():
        if revision is not None:
            raise ConvertError(f"--revision only applies to a hub repo id, but {src} is a local directory")
        return path, {"path": str(path.resolve())}
    if not _REPO_ID.match(str(src)):
        raise ConvertError(f"{src} is neither a checkpoint directory nor a hub repo id "
                           f"(like Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice)")
    try:
        snapshot_download = import_hub().snapshot_download
        from huggingface_hub.utils import (
            GatedRepoError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError:
        raise ConvertError("downloading from the hub needs huggingface_hub: "
                           "pip install 'wyoming-qwen3tts[convert]'") from None
    log.info("%s is not a local directory: fetching it from the Hugging Face hub (revision %s)",
             src, revision or "main")
    start = time.perf_counter()
    try:
        local = Path(snapshot_download(str(src), revision=revision,
                                       allow_patterns=["*.json", "*.txt", "*.safetensors"]))
    except GatedRepoError:
        raise ConvertError(f"{src} is gated: accept its terms on huggingface.co and log in (hf auth login)") from None
    except RepositoryNotFoundError:
        raise ConvertError(f"hub repository {src} not found (misspelt, or private without a login)") from None
    except RevisionNotFoundError:
        raise ConvertError(f"revision {revision!r} not found in hub repository {src}") from None
    except LocalEntryNotFoundError:
        raise ConvertError(f"{src} is not a local directory, and downloading it failed: the Hugging Face hub is "
                           f"unreachable (offline?) and it is not in the local cache; download it elsewhere "
                           f"and pass the directory instead") from None
    except OSError as e:  # connection errors, full disk; huggingface_hub's HTTP errors derive from OSError
        raise ConvertError(f"downloading {src} failed: {e}") from None
    commit = local.name if _COMMIT.match(local.name) else None
    log.info("downloaded %s (commit %s) to %s in %.1f s", src, commit or "unknown", local, time.perf_counter() - start)
    return local, {"repo_id": str(src), "revision": revision, "commit": commit, "path": str(local)}


def _compress(model: ov.Model, fmt: str) -> ov.Model:
    try:
        import nncf
    except ImportError:
        raise ConvertError(f"--weights {fmt} needs nncf: pip install 'wyoming-qwen3tts[convert]' "
                           "(or use --weights fp16)") from None
    with row_blocked_quantiser():
        if fmt == "int4":  # a matrix narrower than a group (tiny test models) gets the largest group that fits
            narrow = nncf.AdvancedCompressionParameters(group_size_fallback_mode=nncf.GroupSizeFallbackMode.ADJUST,
                                                        min_adjusted_group_size=16)
            return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT4_SYM, group_size=INT4_GROUP,
                                         ratio=1.0, backup_mode=nncf.BackupMode.INT8_SYM,
                                         advanced_parameters=narrow)
        return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_SYM)


def _convert_graph(name: str, build: Builder, src: Path, fmt: str, work: Path, budget: int) -> dict[str, Any]:
    """Build, compress and save one graph; nothing of it stays in memory afterwards."""
    start = time.perf_counter()
    log.info("%s: building (%s weights)", name, fmt)
    with WeightSpill(work / f".{name}.spill", budget) as spill:
        # a fresh checkpoint: its mapped pages go with it
        model = build(Checkpoint(src), Weights(_BUILT_FROM.get(fmt, fmt), spill))
        if spill.spilled:
            log.info("%s: %.0f MB of weights in RAM, %.0f MB in a scratch file", name, spill.held / 1e6,
                     spill.spilled / 1e6)
        if fmt in ("int8", "int4"):
            log.info("%s: built in %.1f s; %s weight compression", name, time.perf_counter() - start,
                     _PRECISION[fmt])
            model = _compress(model, fmt)
        entry = mf.describe_graph(model, f"{name}.xml", _PRECISION[fmt])
        ov.save_model(model, work / entry["xml"], compress_to_fp16=False)
        del model
        gc.collect()
    entry["xml_bytes"] = (work / entry["xml"]).stat().st_size
    entry["bin_bytes"] = (work / entry["bin"]).stat().st_size
    log.info("%s: %s + %s, %.1f MB, in %.1f s (peak RSS so far %.2f GB)", name, entry["xml"], entry["bin"],
             (entry["xml_bytes"] + entry["bin_bytes"]) / 1e6, time.perf_counter() - start, _peak_rss_gb())
    return entry


def _copy_runtime_files(src: Path, work: Path) -> list[str]:
    copied = []
    for rel in mf.RUNTIME_FILES + mf.OPTIONAL_RUNTIME_FILES:
        if (src / rel).is_file():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / rel, work / rel)  # follows the HF cache's symlinks to blobs
            copied.append(rel)
    return copied


def _fsync_tree(root: Path) -> None:
    for dirpath, _, names in os.walk(root):
        for n in names:
            with open(os.path.join(dirpath, n), "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_replaceable(out: Path, force: bool) -> None:
    """An existing OUT is replaced only with force, and only if it is a conversion or empty:
    --force must never delete an unrelated directory given by mistake."""
    if not os.path.lexists(out):
        return
    if not force:
        raise ConvertError(f"{out} already exists (use --force to replace it)")
    if not out.is_dir() or out.is_symlink():
        raise ConvertError(f"{out} exists and is not a directory; refusing to replace it")
    if not (out / mf.MANIFEST).is_file() and any(out.iterdir()):
        raise ConvertError(f"{out} is not empty and has no {mf.MANIFEST}: not a converted model, "
                           f"refusing to replace it")


def _publish(work: Path, out: Path, force: bool) -> None:
    """Rename the finished directory into place (replacing an old conversion with force)."""
    _check_replaceable(out, force)
    old = None
    if os.path.lexists(out):
        old = out.with_name(f"{out.name}.old-{secrets.token_hex(4)}")
        os.rename(out, old)
    try:
        os.rename(work, out)
    except BaseException:
        if old is not None:
            os.rename(old, out)
        raise
    _fsync_dir(out.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _int8_convs(root: Path) -> Convs:
    try:
        convs = Int8Convs(calibrate(root))
    except ValueError as e:
        raise ConvertError(f"{e}; convert with --codec-weights fp32") from None
    gc.collect()  # the calibration's compiled float decoder goes before the graphs are built
    log.info("codec: int8 convolutions calibrated (peak RSS so far %.2f GB)", _peak_rss_gb())
    return convs


def convert(src: str | Path, out: Path, weights: str = "int8", force: bool = False,
            revision: str | None = None, codec_weights: str = "fp32", first_chunks: Sequence[int] = FIRST_CHUNKS,
            steady_chunks: Sequence[int] = STEADY_CHUNKS, weight_budget: int = WEIGHT_BUDGET) -> Path:
    """Convert checkpoint `src` (directory or hub repo id) into `out`; returns `out`.
    weight_budget: bytes of a graph's f32 weights held in RAM (the rest in a scratch file)."""
    if weights not in WEIGHT_FORMATS:
        raise ConvertError(f"unknown weight format {weights!r} (expected one of {', '.join(WEIGHT_FORMATS)})")
    if codec_weights not in CODEC_FORMATS:
        raise ConvertError(f"unknown codec weight format {codec_weights!r} "
                           f"(expected one of {', '.join(CODEC_FORMATS)})")
    if not steady_chunks:
        raise ConvertError("export at least one steady codec chunk size")
    out = Path(out).absolute()
    _check_replaceable(out, force)  # fail before a long download or conversion
    for stale in out.parent.glob(f"{glob.escape(out.name)}.partial-*"):
        log.warning("%s is left from a killed conversion (or one still running); delete it if not", stale)
    root, source = resolve_source(src, revision)
    spec = Checkpoint(root).spec  # validates the checkpoint before any work
    clone = spec.model_type == "base"
    plan = [(name, build, graph_format(weights, name)) for name, build in GRAPHS.items()]
    codec_format, convs = codec_weights, PLAIN
    if codec_weights == "int8":  # the float graph's ranges, before any graph is written
        codec_format, convs = "int8_conv", _int8_convs(root)
    codec = codec_graphs(first_chunks, steady_chunks, clone, convs)
    plan += [(name, build, codec_format) for name, build in codec.items()]
    plan += [(name, build, "fp32") for name, build in (CLONE_GRAPHS.items() if clone else ())]
    source["content_sha256"], source["files"] = mf.source_digest(root)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = out.with_name(f"{out.name}.partial-{secrets.token_hex(4)}")
    work.mkdir()
    start = time.perf_counter()
    try:
        graphs = {name: _convert_graph(name, build, root, fmt, work, weight_budget) for name, build, fmt in plan}
        files = _copy_runtime_files(root, work)
        created = datetime.now(timezone.utc).isoformat(timespec="seconds")
        options = {"weights": weights, "codec_weights": codec_weights, "first_chunks": sorted(set(first_chunks)),
                   "steady_chunks": sorted(set(steady_chunks))}
        manifest = mf.build_manifest(source, options, graphs, files, spec, created)
        _fsync_tree(work)
        tmp = work / (mf.MANIFEST + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:  # last: a directory without it is never valid
            f.write(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, work / mf.MANIFEST)
        _fsync_dir(work)
        _publish(work, out, force)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    total = sum(g["xml_bytes"] + g["bin_bytes"] for g in graphs.values())
    log.info("converted %s -> %s (%s weights, %d graphs, %.1f MB) in %.1f s, peak RSS %.2f GB", src, out, weights,
             len(graphs), total / 1e6, time.perf_counter() - start, _peak_rss_gb())
    return out
