"""TextTokenStream: text arriving in pieces gives exactly the ids of the whole text, early.

The reference is `text_ids`, `encode(assistant_text(text))[3:-5]`, the slice build_prompt
uses. Every check also asserts, after each piece, that what was returned so far is a prefix
of the reference (an id once returned is never revised). The tiny synthetic vocabulary has
few merges (most pre-tokens become several ids), the real Qwen2 one many; the split regex,
NFC and added tokens are the same in both.
"""
from __future__ import annotations

import random
import time
import unicodedata
from pathlib import Path

import pytest
from tokenizers import Regex, pre_tokenizers

from qwen3tts_tools.synthetic.vocab import qwen_base_ranks, tiny_ranks, write_tokenizer_files
from wyoming_qwen3tts.model.prompt import assistant_text
from wyoming_qwen3tts.model.token_stream import TextTokenStream, _maybe_space
from wyoming_qwen3tts.model.tokenizer import QWEN2_PATTERN, TextTokenizer


def text_ids(tokenizer, text: str) -> list[int]:
    """The reference: the text's slice of the whole turn, as the official generate() takes it."""
    return tokenizer.encode(assistant_text(text))[3:-5]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TextTokenizer:
    out = tmp_path_factory.mktemp("tiny_tokenizer")
    write_tokenizer_files(out, tiny_ranks())
    return TextTokenizer.from_dir(out)


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> TextTokenizer:
    out: Path = tmp_path_factory.mktemp("real_tokenizer")
    write_tokenizer_files(out, qwen_base_ranks())
    return TextTokenizer.from_dir(out)


@pytest.fixture(params=["tiny", "real"])
def tokenizer(request: pytest.FixtureRequest) -> TextTokenizer:
    return request.getfixturevalue(request.param)


def stream_ids(tokenizer: TextTokenizer, pieces: list[str]) -> list[int]:
    """Feed `pieces`; check after each that nothing returned differs from the whole text's ids."""
    text = "".join(pieces)
    expected, role = text_ids(tokenizer, text), tokenizer.encode(assistant_text(text))[:3]
    stream, got = TextTokenStream(tokenizer), []
    for piece in pieces:
        got += stream.push(piece)
        assert got == expected[: len(got)], (pieces, piece)
        assert stream.role_ids in (None, role) and (stream.role_ids or not got)
    got += stream.finish()
    assert got == expected, pieces
    assert stream.role_ids == role
    return got


def splits(text: str) -> list[list[str]]:
    """Whole, per character, and cut once at every position."""
    out = [[text], list(text)]
    out += [[text[:i], text[i:]] for i in range(1, len(text))]
    return out


HARD_CASES = [
    "", "Hello", " world", "!", "Hello world!", "Hello, world! How are you?",
    "a b", "a  b", "  two  spaces  ", "trailing ", "   ",
    "3.14", "1,000", "1,000,000 and 2024-06-01, $42.50", "x86_64 0.5%",
    "don't", "I'm", "it's", "we'll", "they've", "you're", "she'd", "DON'T", "it'sam", "'llama", "rock 'n' roll",
    "line1\nline2", "\nstarts with a newline", "\n\nHello", "\n", " \n x", "a\r\nb", "\r\n\r\n", "end\n", "tab\there\t",
    "...", "Wait... what?!", "?!", "!!!\n\nNext", "(hello) [world] {x}", "“quoted” — dash … ellipsis",
    "😀", "Hi 😀👍🏽 there 👨‍👩‍👧!", "🇩🇪🇯🇵",
    "你好，世界！今天天气很好。", "mixed 中文 English 123",
    "e\u0301", "cafe\u0301 na\u0131ve", "Ünïcödé e\u0301te\u0301 A\u030a", "q\u0301x", "e\u0323\u0302",
    "\u1100\u1161\u11a8 \u1100\u1161", "\u0b47\u0b3e", "\u212a Kelvin",
    "x\u0301\u0332", "x\u0301\u0334y", "\u0f40\u0f74\u0f73",  # marks NFC reorders; U+0F73 decomposes to marks
    "non\u00a0breaking\u3000ideographic", "zero\u200bwidth",
    "<|im_end|>", "say <|im_end|> then", "<think>x</think>", "<tts_text_bos_single>", "<tts_text_bos> x",
    "<|im_", "a<b>c",
]


@pytest.mark.parametrize("text", HARD_CASES)
def test_hard_cases_every_split(tokenizer: TextTokenizer, text: str) -> None:
    for pieces in splits(text):
        stream_ids(tokenizer, pieces)


@pytest.mark.parametrize(
    "pieces",
    [
        ["Hel", "lo"], ["a ", "b"], ["a", " ", "b"], ["3", ".", "1", "4"], ["1", ",", "000"], ["don", "'", "t"],
        ["it", "'", "s"], ["we'", "l", "l"], ["I", "'m"], ["e", "\u0301"], ["cafe", "\u0301", " ok"], ["\r", "\n"],
        [".", ".", "."], ["?", "!"], ["\n", "Hello"], ["\n", "\n", "x"], [" ", "\n"], ["你", "好", "，", "世", "界"],
        ["<|im_", "end|>"], ["<", "|", "im_end", "|", ">"], ["<tts_text_bos", "_single>"], ["<tts_text_bos", ">"],
        ["\u1100", "\u1161", "\u11a8"], ["\u0b47", "\u0b3e"], ["😀", "\u200d", "👍"],
    ],
)
def test_named_splits(tokenizer: TextTokenizer, pieces: list[str]) -> None:
    stream_ids(tokenizer, pieces)


def test_known_ids(real: TextTokenizer) -> None:
    assert stream_ids(real, ["Hel", "lo", " wor", "ld"]) == [9707, 1879]
    assert text_ids(real, "") == [] and stream_ids(real, []) == []
    assert stream_ids(real, ["\n"]) == []  # "\n\n" merges with the role's newline, which [3:] drops
    stream = TextTokenStream(real)
    assert stream.push("Hello") == [] and stream.role_ids == [151644, 77091, 198]
    stream = TextTokenStream(real)
    assert stream.push("\n") == [] and stream.role_ids is None  # "\n" + more may merge further
    assert stream.push("\nHi") == [] and stream.role_ids == real.encode("<|im_start|>assistant\n\n\n")


_FRAGMENTS = [
    *"abeEHlosStTrRvVmMdDxq", "Hello", "world", " the", *"0123456789", "3.14", "1,000",
    " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r", "\r\n", "\u00a0", "\u3000", "\x1c", "\u200b",
    *",.!?;:-'\"()[]/", "...", "?!", "…", "—", "'s", "'ll", "'re", "n't",
    *"你好世界今天。，！", "가", "\u1100", "\u1161", "\u11a8", "\u0b47", "\u0b3e",
    "\u0301", "\u0302", "\u0308", "\u0323", "\u0327", "\u0332", "\u0334", "\u0f40", "\u0f73", "\u0f74", "\u212a",
    "😀", "👍", "\U0001f3fd", "\u200d", "\U0001fae8",  # U+1FAE8 is newer than Python 3.11's Unicode 14
    "<|im_end|>", "<|im_start|>", "<think>", "<tts_text_bos>", "<tts_text_bos_single>", "<", "|", ">", "im_end",
]


def random_case(rng: random.Random) -> list[str]:
    text = "".join(rng.choice(_FRAGMENTS) for _ in range(rng.randint(0, 24)))
    if len(text) < 2 or rng.random() < 0.25:
        return list(text)  # single characters
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(0, len(text) - 1)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]


@pytest.mark.parametrize("name, cases", [("tiny", 4000), ("real", 1000)])
def test_random_texts_and_splits(request: pytest.FixtureRequest, name: str, cases: int) -> None:
    tokenizer = request.getfixturevalue(name)
    rng = random.Random(20240601)
    for _ in range(cases):
        stream_ids(tokenizer, random_case(rng))


def test_commits_before_the_text_is_complete(real: TextTokenizer) -> None:
    """A stream that held everything until finish() would fail every assertion here."""
    stream = TextTokenStream(real)
    got = stream.push("Hello world, how are")
    assert got[: len(text_ids(real, "Hello world,"))] == text_ids(real, "Hello world,")
    assert len(got) >= len(text_ids(real, "Hello world, how"))

    words = ["Hello", " world", ",", " how", " are", " you", " today", "?"]
    stream, got = TextTokenStream(real), []
    for k, word in enumerate(words):
        got += stream.push(word)
        if k >= 2:  # at most the last two words are pending
            assert len(got) >= len(text_ids(real, "".join(words[: k - 1]))), word

    stream, got = TextTokenStream(real), []
    for char in "你好，世":
        got += stream.push(char)
    assert got == text_ids(real, "你好")


def test_long_utterance_keeps_only_a_short_tail(tiny: TextTokenizer) -> None:
    """Work per piece depends on the uncommitted tail, not on the text so far."""
    rng = random.Random(3)
    vocabulary = [" hello", " world", ",", " it's", " 42", ".", "\n", " 你好", " cafe\u0301"]
    words = [rng.choice(vocabulary) for _ in range(3000)]
    stream, got = TextTokenStream(tiny), []
    start = time.perf_counter()
    for word in words:
        got += stream.push(word)
        pending = stream._raw + stream._unnormalized + stream._normalized  # private: the uncommitted text
        assert len(pending) < 40
    got += stream.finish()
    elapsed = time.perf_counter() - start
    assert got == text_ids(tiny, "".join(words))
    assert elapsed < 5, elapsed


def test_push_after_finish_is_an_error(tiny: TextTokenizer) -> None:
    stream = TextTokenStream(tiny)
    stream.push("hi")
    stream.finish()
    with pytest.raises(RuntimeError):
        stream.push("more")
    with pytest.raises(RuntimeError):
        stream.finish()


def test_space_test_covers_the_regex_whitespace() -> None:
    r"""Every character the split regex treats as \s is one `_maybe_space` admits (BMP and SMP).

    Probe: "1cc1" splits into four pre-tokens only when c is a non-newline space (digits excluded).
    """
    split = pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated")
    for code in range(0x20000):
        char = chr(code)
        if 0xD800 <= code < 0xE000 or unicodedata.category(char).startswith("N") or _maybe_space(char):
            continue
        assert char not in "\r\n" and len(split.pre_tokenize_str(f"1{char}{char}1")) != 4, hex(code)
