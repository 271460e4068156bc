"""Which models opened in one process share a compiled codec decoder (docs/ARCHITECTURE.md,
"Several models in one process").

Every 12 Hz Qwen3-TTS model has the same speech tokenizer, and its compiled decoder is the
largest thing a model holds after the talker (0.6B, bf16: ~0.3 GB per compiled chunk graph).
A server passes one `Decoders` to every model it opens; two models get the same compiled
decoder when it would be compiled alike — same device, same compile properties (precision,
threads), same chunk graphs for the same schedule — from the same files. The files are
compared by what they hold, never by their names: the weights files' sizes first, then the
sha256 of each weights file and of each IR with OpenVINO's auto-numbered layer names
("Constant_314974") taken out, since two conversions of one checkpoint differ only in those.

Entries are held weakly: a compiled decoder lives while a runner uses it, and goes with the
last one (Scheduler.close). The native runner's codec graphs (native/include/qwen3tts/
codec_graphs.hpp) and the codec lead (engine/codec_lead.py) are shared; the Python reference
runner (engine.backend: python, a debugging path) compiles its own chunk graphs.
"""
from __future__ import annotations

import hashlib
import logging
import re
import threading
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ..model.manifest import LEAD_GRAPH
from .codec_lead import CodecLead
from .loaded_model import LoadedModel
from .native import compile_codec
from .step import ChunkSchedule

if TYPE_CHECKING:
    from .. import _native

log = logging.getLogger(__name__)

T = TypeVar("T")

# OpenVINO names a node it was not given a name for "<type>_<global counter>": the counter
# depends on what else the converting process built, so it differs between two conversions.
_AUTO_NAME = re.compile(rb'( name="[A-Za-z][A-Za-z0-9]*_)[0-9]+"')
_HASH_BLOCK = 1 << 20


def ir_files(xml: Path) -> tuple[Path, Path]:
    """An IR's two files: the graph and its weights."""
    return xml, xml.with_suffix(".bin")


@dataclass
class _Entry:
    kind: str  # "codec" or "lead"
    settings: Hashable  # device, compile properties, graph layout and schedule
    files: tuple[Path, ...]  # .xml and .bin of each graph, in the layout's order
    sizes: tuple[int, ...]  # of each .bin
    ref: weakref.ref


class Decoders:
    """The compiled codec decoders of one process, by identity (module docstring). Pass the
    same instance to every `open_engine` of a server; thread-safe (a load waits for another's
    compiling, so one decoder is never compiled twice)."""

    def __init__(self) -> None:
        self._entries: list[_Entry] = []
        self._digests: dict[tuple[Path, int, int], str] = {}  # (path, size, mtime_ns) -> sha256
        self._lock = threading.Lock()
        self.compiled = 0  # decoders compiled through this registry (codec graphs and leads)

    def codec(self, model: LoadedModel, schedule: ChunkSchedule) -> tuple[_native.CodecGraphs, bool]:
        """(the native runner's compiled codec graphs for `schedule`, whether they were compiled
        now). The schedule must stream (not offline)."""
        graphs = model.codec_graphs((schedule.first, schedule.steady))
        layout = tuple((kind, size) for kind in ("first", "steady") for size in sorted(graphs[kind]))
        xmls = [graphs[kind][size] for kind, size in layout]
        settings = (model.devices["decoder"], _frozen(model.properties("decoder")), model.decoder_batch, layout,
                    schedule.first, schedule.steady)
        return self._shared("codec", settings, xmls, lambda: compile_codec(model, schedule))

    def lead(self, model: LoadedModel) -> CodecLead:
        """The model's codec lead (engine/codec_lead.py), compiled or shared."""
        settings = (model.devices["decoder"], _frozen(model.properties("decoder")))
        lead, _ = self._shared("lead", settings, [model.dir / f"{LEAD_GRAPH}.xml"], lambda: CodecLead(model))
        return lead

    def live(self) -> int:
        """Compiled decoders still in use."""
        with self._lock:
            self._prune()
            return len(self._entries)

    def _shared(self, kind: str, settings: Hashable, xmls: list[Path], build: Callable[[], T]) -> tuple[T, bool]:
        files = tuple(f for xml in xmls for f in ir_files(xml))
        # the weights' sizes: an IR's own size differs with the digits of its auto-numbered names
        sizes = tuple(f.stat().st_size for f in files if f.suffix == ".bin")
        with self._lock:
            self._prune()
            for entry in self._entries:
                if entry.kind == kind and entry.settings == settings and entry.sizes == sizes and \
                        self._same_files(entry.files, files):
                    shared = entry.ref()
                    if shared is not None:
                        log.info("%s: the %s decoder of %s is shared (the same files)", files[0].parent, kind,
                                 entry.files[0].parent)
                        return shared, False
            made = build()
            self.compiled += 1
            self._entries.append(_Entry(kind, settings, files, sizes, weakref.ref(made)))
            return made, True

    def _prune(self) -> None:
        self._entries = [e for e in self._entries if e.ref() is not None]

    def _same_files(self, ours: tuple[Path, ...], theirs: tuple[Path, ...]) -> bool:
        return all(a == b or self._digest(a) == self._digest(b) for a, b in zip(ours, theirs, strict=True))

    def _digest(self, path: Path) -> str:
        """sha256 of a weights file, or of an IR without its auto-numbered names (cached while
        the file's size and time are unchanged)."""
        stat = path.stat()
        key = (path.resolve(), stat.st_size, stat.st_mtime_ns)
        if key not in self._digests:
            h = hashlib.sha256()
            if path.suffix == ".xml":
                h.update(_AUTO_NAME.sub(rb'\1"', path.read_bytes()))
            else:
                with open(path, "rb") as f:
                    while block := f.read(_HASH_BLOCK):
                        h.update(block)
            self._digests[key] = h.hexdigest()
        return self._digests[key]


def _frozen(properties: dict) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in properties.items()))
