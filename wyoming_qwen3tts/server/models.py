"""`--model` to a converted directory: use a conversion as is, or convert a checkpoint
directory or hub repo id (`owner/name`, or `owner/name@revision`) once into the data dir,
keyed by source, revision and weight formats, and reuse it on every later start. A missing,
half-written or outdated conversion (manifest.read_converted checks files and sizes) is
converted again."""
from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

from ..model.manifest import FORMAT_VERSION, MANIFEST, ConvertedModelError, older_format, read_converted

log = logging.getLogger(__name__)

_REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+(@[\w./-]+)?$")


class ModelSourceError(ValueError):
    """--model names nothing usable."""


def formats_name(weights: str, codec_weights: str = "fp32") -> str:
    """A conversion's formats as its folder name ends: an exact codec, the default, adds
    nothing (the folders of earlier versions stay valid)."""
    return weights if codec_weights == "fp32" else f"{weights}-codec_{codec_weights}"


def conversion_dir(source: str, data_dir: Path, weights: str, codec_weights: str = "fp32") -> Path:
    """Where the conversion of `source` with these options lives in the data dir."""
    path = Path(source).expanduser()
    formats = formats_name(weights, codec_weights)
    if path.is_dir():
        digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:10]
        return data_dir / "converted" / f"{path.resolve().name}-{digest}-{formats}"
    if _REPO_ID.match(source):
        return data_dir / "converted" / f"{source.replace('/', '--')}-{formats}"  # revision included
    raise ModelSourceError(f"--model {source}: neither a directory nor a hub repo id "
                           f"(like Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice)")


def prepare_model(source: str, data_dir: Path, weights: str = "int8", codec_weights: str = "fp32") -> Path:
    """A converted model directory for `source`, converting it first if needed. A conversion of
    an older, still readable format is converted again, and used as it is if that fails (no
    conversion extra, no network): the server never stops starting where it started before."""
    path = Path(source).expanduser()
    if (path / MANIFEST).is_file():
        return path  # already converted: qwen3tts-convert output
    out = conversion_dir(source, data_dir, weights, codec_weights)
    older = False
    try:
        manifest, _ = read_converted(out)
        lacks = older_format(manifest)
        if lacks is None:
            log.info("using the conversion of %s in %s", source, out)
            return out
        older = True
        log.warning("%s is an older conversion (format %s, now %s: %s); converting again", out,
                    manifest["format_version"], FORMAT_VERSION, lacks)
    except ConvertedModelError as e:
        if out.exists():
            log.warning("%s; converting again", e)
    try:
        return _convert(source, out, weights, codec_weights)
    except ModelSourceError as e:
        if not older:
            raise
        log.warning("%s; using the older conversion in %s as it is", e, out)
        return out


def _convert(source: str, out: Path, weights: str, codec_weights: str) -> Path:
    """Converts in a child process (convert/child.py): the server keeps none of its memory."""
    try:
        from ..convert.child import convert_in_child
        from ..convert.pipeline import ConvertError
    except ImportError as e:
        raise ModelSourceError(f"converting {source} needs the conversion extra: "
                               f"pip install 'wyoming-qwen3tts[convert]' ({e})") from None
    log.info("converting %s into %s (once; later starts reuse it)", source, out)
    path = Path(source).expanduser()
    repo, _, revision = source.partition("@")
    try:
        if path.is_dir():
            return convert_in_child(str(path), out, weights=weights, codec_weights=codec_weights, force=out.exists())
        return convert_in_child(repo, out, weights=weights, codec_weights=codec_weights, force=out.exists(),
                                revision=revision or None)
    except ConvertError as e:
        raise ModelSourceError(f"--model {source}: {e}") from None
