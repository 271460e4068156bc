"""Runtime text tokenizer: Qwen2 byte-level BPE built from the checkpoint's tokenizer files.

Torch-free and transformers-free: only the `tokenizers` library. The Qwen3-TTS repos ship
`vocab.json`, `merges.txt` and `tokenizer_config.json` (no `tokenizer.json`), so the
pipeline transformers' `Qwen2Converter` would build is rebuilt here:

    NFC normaliser -> Split(QWEN2_PATTERN, isolated) -> ByteLevel(no prefix space, no regex)
    -> BPE (no unk token) ; ByteLevel decoder ; added tokens at their exact ids.

Which split regex. `QWEN2_PATTERN` is the canonical Qwen2 regex: the one of the original
tiktoken tokenizer, of transformers' `Qwen2Converter` and of every Qwen2/Qwen3 `tokenizer.json`.
The official qwen-tts package loads its processor with
`AutoProcessor.from_pretrained(path, fix_mistral_regex=True)`. In transformers 4.57.3 that
flag makes `_patch_mistral_regex` replace the split regex with a Mistral-fix regex (which
splits "HelloWorld" into "Hello", "World", has no contraction branch and ends punctuation
runs with `[\\r\\n/]*`) when all of these hold: the path is a local directory, its
`config.json` has a `transformers_version` above 4.57.2 and below 5.0 (the shipped configs
say 4.57.3) or none at all, and the vocabulary has more than 100,000 tokens. Loading by hub
id ("Qwen/Qwen3-TTS-12Hz-...") skips the patch because those repos carry no `mistralai`
base-model tag. We use the canonical regex: it is the regex of the tiktoken tokenizer the
vocabulary was built with, and what users of the official package get through the usual
hub-id path. The local-directory path differs mostly on mixed-case words: "GitHub" is
[75615] canonically but [46562, 19316] ("Git", "Hub") with the Mistral fix; likewise
"iPhone", "WiFi", "NaN", "LaTeX" (GitHub is a test in tests/test_tokenizer.py).

Added tokens come from `added_tokens_decoder` with their ids taken literally. A fast
tokenizer would otherwise give them the next free ids after the vocabulary, which is wrong
whenever `vocab.json` holds fewer than 151,643 entries; they are therefore put into the BPE
model's vocabulary at their exact ids first (no merge can produce them), so registering
them as added tokens reuses those ids.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

logger = logging.getLogger(__name__)

QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
"""Canonical Qwen2 pre-tokenisation regex (see the module docstring for why not the Mistral fix)."""


class TokenizerFileError(ValueError):
    """A tokenizer file exists but does not have the expected content."""


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file missing: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerFileError(f"{path}: not valid JSON ({exc})") from exc


def _read_vocab(path: Path) -> dict[str, int]:
    vocab = _read_json(path)
    if not isinstance(vocab, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in vocab.items()
    ):
        raise TokenizerFileError(f"{path}: expected a JSON object mapping token strings to integer ids")
    return vocab


def _read_merges(path: Path, vocab: dict[str, int]) -> list[tuple[str, str]]:
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file missing: {path}")
    merges: list[tuple[str, str]] = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if not line or (line_no == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts):
            raise TokenizerFileError(f"{path}:{line_no}: expected two space-separated tokens, got {line!r}")
        if parts[0] not in vocab or parts[1] not in vocab or parts[0] + parts[1] not in vocab:
            raise TokenizerFileError(f"{path}:{line_no}: merge {line!r} uses or makes a token missing from vocab.json")
        merges.append((parts[0], parts[1]))
    return merges


def _read_added_tokens(path: Path) -> dict[int, AddedToken]:
    config = _read_json(path)
    decoder = config.get("added_tokens_decoder") if isinstance(config, dict) else None
    if not isinstance(decoder, dict):
        raise TokenizerFileError(f"{path}: expected an object with an 'added_tokens_decoder' object")
    added: dict[int, AddedToken] = {}
    for key, entry in decoder.items():
        if not key.isdigit() or not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            raise TokenizerFileError(f"{path}: bad added_tokens_decoder entry {key!r}: {entry!r}")
        added[int(key)] = AddedToken(
            entry["content"],
            single_word=bool(entry.get("single_word", False)),
            lstrip=bool(entry.get("lstrip", False)),
            rstrip=bool(entry.get("rstrip", False)),
            normalized=bool(entry.get("normalized", False)),
            special=bool(entry.get("special", False)),
        )
    return added


class TextTokenizer:
    """Qwen2 byte-level BPE text tokenizer; adds no BOS/EOS, matches special tokens in text."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> TextTokenizer:
        """Build from `vocab.json`, `merges.txt` and `tokenizer_config.json` in `model_dir`."""
        model_dir = Path(model_dir)
        vocab = _read_vocab(model_dir / "vocab.json")
        merges = _read_merges(model_dir / "merges.txt", vocab)
        added = _read_added_tokens(model_dir / "tokenizer_config.json")

        taken = {i: t for t, i in vocab.items()}
        for token_id, token in sorted(added.items()):
            if vocab.get(token.content, token_id) != token_id or taken.get(token_id, token.content) != token.content:
                raise TokenizerFileError(
                    f"added token {token.content!r} id {token_id} clashes with vocab.json "
                    f"({token.content!r} -> {vocab.get(token.content)}, {token_id} -> {taken.get(token_id)!r})"
                )
            vocab[token.content] = token_id

        bpe = models.BPE(vocab=vocab, merges=merges, unk_token=None, fuse_unk=False, byte_fallback=False)
        tokenizer = Tokenizer(bpe)
        tokenizer.normalizer = normalizers.NFC()
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        tokenizer.decoder = decoders.ByteLevel()
        ordered = [added[i] for i in sorted(added)]
        tokenizer.add_special_tokens([t for t in ordered if t.special])
        tokenizer.add_tokens([t for t in ordered if not t.special])
        for token_id, token in added.items():
            if tokenizer.token_to_id(token.content) != token_id:  # a tokenizers-library change would show here
                raise RuntimeError(f"added token {token.content!r} registered at a wrong id")
        logger.debug(
            "text tokenizer from %s: %d base tokens, %d merges, %d added",
            model_dir, len(vocab) - len(added), len(merges), len(added),
        )
        return cls(tokenizer)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; special tokens written in the text become their ids."""
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    # The stages of `encode`, for callers that tokenize text arriving in pieces (token_stream.py).

    def added_tokens(self) -> dict[int, AddedToken]:
        """Added tokens by id; `encode` cuts these out of the raw text before anything else runs."""
        return self._tokenizer.get_added_tokens_decoder()

    def normalize(self, text: str) -> str:
        """`text` after the normaliser (NFC), as `encode` normalises the text between added tokens."""
        return self._tokenizer.normalizer.normalize_str(text)

    def split(self, normalized: str) -> list[tuple[int, int]]:
        """Character spans of the pre-tokens of normalised text (the split regex alone).

        BPE never merges across these spans, so ids of a span depend on that span only.
        """
        return [span for _, span in self._tokenizer.pre_tokenizer[0].pre_tokenize_str(normalized)]

    def encode_pre_token(self, pre_token: str) -> list[int]:
        """BPE ids of one pre-token: no normalising, no regex split, no added-token matching."""
        if not pre_token:
            return []
        mapped = "".join(piece for piece, _ in self._tokenizer.pre_tokenizer[1].pre_tokenize_str(pre_token))
        return [token.id for token in self._tokenizer.model.tokenize(mapped)]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Text of `ids` (invalid UTF-8 byte sequences become U+FFFD)."""
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int:
        """Id of a vocabulary or added token given by its string; KeyError if unknown."""
        token_id = self._tokenizer.token_to_id(token)
        if token_id is None:
            raise KeyError(f"token {token!r} is not in the tokenizer vocabulary")
        return token_id
