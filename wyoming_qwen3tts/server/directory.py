"""Which model serves which voice, and every served voice in one list.

Planned from each model's config.json before any model loads (seconds, not minutes), so a
configuration that cannot work fails at start and `describe` is answered at once. With one
model the catalogue keeps its lenient rule (a voice it cannot serve is skipped and reported);
with several, a voice no model can serve, or that two could serve without naming one, is a
ConfigError naming the key, and no name is served by two models (docs/ARCHITECTURE.md,
"Several models in one server").
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..config import ConfigError, ModelEntry, ServerConfig, VoiceConfig
from ..model.spec import VoiceSpec
from .voices import Catalogue, CatalogueError, VoiceEntry, VoiceNotFound, model_label, styles_speakers

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelPlan:
    """One served model: its entry, its voice spec (None: not known before it loads, one model
    only), the configured voices it serves and the served names of its preset speakers."""

    index: int
    entry: ModelEntry
    spec: VoiceSpec | None
    voices: tuple[VoiceConfig, ...] = ()
    renames: Mapping[str, str] = field(default_factory=dict)  # preset speaker -> served name

    @property
    def label(self) -> str:
        return model_label(self.spec) if self.spec else self.entry.source


def _serves(spec: VoiceSpec, voice: VoiceConfig) -> bool:
    """Whether a model of `spec` can serve `voice` at all (the catalogue checks the rest)."""
    if voice.ref_audio is not None:
        return spec.model_type == "base"
    if voice.speaker is not None:  # with a style (instruct): a 1.7B CustomVoice model, the 0.6B has none
        return spec.model_type == "custom_voice" and voice.speaker in {s.name for s in spec.speakers} and \
            (not voice.instruct or styles_speakers(spec))
    return spec.model_type == "voice_design"


def _size(spec: VoiceSpec) -> str:
    """"0b6" -> "0.6b"."""
    return spec.model_size.replace("b", ".", 1) + "b" if "b" in spec.model_size else spec.model_size


def plan_models(config: ServerConfig, specs: Sequence[VoiceSpec | None]) -> list[ModelPlan]:
    """Each model with the voices it serves. Raises ConfigError (several models) for a voice
    no model or two models could serve, a spec that could not be read, or a name two models
    would serve."""
    entries = config.model_entries
    if len(entries) == 1:
        return [ModelPlan(0, entries[0], specs[0], config.voices)]
    for entry, spec in zip(entries, specs):
        if spec is None:
            raise ConfigError(f"models: the voices of {entry.source} cannot be read before loading it "
                              f"(see the warning above); several models need every model's config.json")
    known: list[VoiceSpec] = [s for s in specs if s is not None]
    assigned: list[list[VoiceConfig]] = [[] for _ in entries]
    for i, voice in enumerate(config.voices):
        named = config.model_index(i)
        if named is not None:
            if not _serves(known[named], voice):
                raise ConfigError(f"voices[{i}].model: {model_label(known[named])} cannot serve {voice.name!r} "
                                  f"({_kind(voice)})")
            assigned[named].append(voice)
            continue
        able = [m for m, spec in enumerate(known) if _serves(spec, voice)]
        if not able:
            raise ConfigError(f"voices[{i}]: no served model can serve {voice.name!r} ({_kind(voice)}); "
                              f"models: {', '.join(model_label(s) for s in known)}")
        if len(able) > 1:
            raise ConfigError(f"voices[{i}].model: {voice.name!r} could be served by models "
                              f"{' and '.join(str(m) for m in able)}; name one (model: <index or source>)")
        assigned[able[0]].append(voice)
    plans: list[ModelPlan] = []
    taken: dict[str, str] = {}  # served name (casefolded) -> the model serving it
    for m, (entry, spec) in enumerate(zip(entries, known)):
        renames = {}
        for speaker in sorted(s.name for s in spec.speakers):
            name = speaker
            for candidate in (f"{speaker}-{_size(spec)}", f"{speaker}-{m}"):
                if name.casefold() not in taken:
                    break
                name = candidate
            if name != speaker:
                renames[speaker] = name
                log.info("preset speaker %s of model %d (%s) is served as %s: model %s has one of that name",
                         speaker, m, model_label(spec), name, taken[speaker.casefold()])
            taken[name.casefold()] = f"{m} ({model_label(spec)})"
        plans.append(ModelPlan(m, entry, spec, tuple(assigned[m]), renames))
    for i, voice in enumerate(config.voices):
        if voice.name.casefold() in taken:
            raise ConfigError(f"voices[{i}].name: {voice.name!r} is already a preset speaker of model "
                              f"{taken[voice.name.casefold()]}")
    return plans


def _kind(voice: VoiceConfig) -> str:
    if voice.ref_audio is not None:
        return "a clone: a Base model"
    if voice.speaker is not None:
        size = "1.7B " if voice.instruct else ""
        return f"preset speaker {voice.speaker!r}: a {size}CustomVoice model with it"
    return "a designed voice: a VoiceDesign model"


class Directory:
    """Every served voice in model order, each with the index of the model serving it."""

    def __init__(self, catalogues: Mapping[int, Catalogue], default_voice: str | None = None) -> None:
        self.catalogues = dict(sorted(catalogues.items()))
        pairs = [(index, entry) for index, c in self.catalogues.items() for entry in c.voices]
        self._by_name: dict[str, tuple[int, VoiceEntry]] = {}
        for index, entry in pairs:
            other = self._by_name.setdefault(entry.name.casefold(), (index, entry))
            if other[0] != index:
                raise CatalogueError(f"voice {entry.name!r} is served by models {other[0]} and {index}")
        if not pairs:
            reasons = "; ".join(e for c in self.catalogues.values() for e in c.errors)
            raise CatalogueError(f"no voice can be served: {reasons or 'no model has a voice'}")
        self.voices: tuple[VoiceEntry, ...] = tuple(entry for _, entry in pairs)
        labels = list(dict.fromkeys(c.label for c in self.catalogues.values()))
        self.label = " + ".join(labels[:1] + [label.removeprefix("Qwen3-TTS ") for label in labels[1:]])
        self.errors = tuple(e for c in self.catalogues.values() for e in c.errors)
        self.default = pairs[0]
        if default_voice is not None:
            if default_voice.casefold() not in self._by_name:
                raise CatalogueError(f"server.default_voice {default_voice!r} is not a served voice "
                                     f"(voices: {', '.join(e.name for e in self.voices)})")
            self.default = self._by_name[default_voice.casefold()]

    def model_of(self, name: str | None) -> int:
        """The index of the model serving voice `name` (None: the default voice)."""
        return self._find(name)[0]

    def resolve(self, name: str | None, language: str | None = None) -> tuple[int, VoiceEntry, str]:
        """(model index, voice, model language) for a request, as Catalogue.resolve."""
        index, entry = self._find(name)
        entry, language_name = self.catalogues[index].resolve(entry.name, language)
        return index, entry, language_name

    def _find(self, name: str | None) -> tuple[int, VoiceEntry]:
        found = self.default if not name else self._by_name.get(name.casefold())
        if found is None:
            raise VoiceNotFound(f"unknown voice {name!r} (voices: {', '.join(e.name for e in self.voices)})")
        return found

    def replaced(self, index: int, catalogue: Catalogue, default_voice: str | None) -> Directory:
        """This directory with model `index`'s catalogue replaced (it loaded, or its voices changed)."""
        return Directory({**self.catalogues, index: catalogue}, default_voice)
