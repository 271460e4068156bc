"""Text normalisation and the incremental sentence splitter (server/text.py)."""
from __future__ import annotations

import random
import time

import pytest

from wyoming_qwen3tts.server.text import (
    CLOSERS,
    TERMINATORS,
    SentenceSplitter,
    TextTooLong,
    normalize,
    split_sentences,
)

FENCE = "`" * 3


def stream(pieces, **kw) -> list[list[str]]:
    """What each push returns, then what flush returns, as one list per call."""
    splitter = SentenceSplitter(**kw)
    return [splitter.push(p) for p in pieces] + [splitter.flush()]


def streamed(pieces, **kw) -> list[str]:
    return [s for batch in stream(pieces, **kw) for s in batch]


# --- normalize -------------------------------------------------------------------------------


@pytest.mark.parametrize("raw,clean", [
    ("# Weather today\nIt is **sunny** and _warm_.", "Weather today It is sunny and warm."),
    ("### Heading", "Heading"),
    ("*one* __two__ ***three*** ~~four~~", "one two three four"),
    ("- eggs\n* milk\n+ bread\n• jam", "eggs milk bread jam"),
    ("1. eggs\n2. milk", "1. eggs 2. milk"),  # ordered list numbers are worth saying
    ("See [the docs](https://example.com/docs) now.", "See the docs now."),
    ("![a cat](cat.png) sleeps", "a cat sleeps"),
    ("See [Paris](https://en.wikipedia.org/wiki/Paris_(city)) today.", "See Paris today."),
    ("Run `make test` first.", "Run make test first."),
    ("Go to https://example.com/a?b=1. Then rest.", "Go to. Then rest."),
    ("Visit www.example.org, or <https://x.y/z>!", "Visit, or!"),
    ("> quoted text", "quoted text"),
    ("above\n\n---\n\nbelow", "above below"),
    ("Great job 👍🏽🎉!", "Great job!"),
    ("Family 👨‍👩‍👧 and flag 🇩🇪 here", "Family and flag here"),
    ("Stars ⭐ ☀️ ✅ ❤️ done", "Stars done"),
    ("  lots \t of\n\n  space  ", "lots of space"),
    ("snake_case_name and 5*3 stay", "snake_case_name and 5*3 stay"),
    ("It is 20°C, © Qwen, 3 – 4", "It is 20°C, © Qwen, 3 – 4"),
    ("你好，世界！今天天气很好。", "你好，世界！今天天气很好。"),
    ("Keycap 1️⃣ stays a digit", "Keycap 1 stays a digit"),
])
def test_normalize_strips_markup(raw, clean):
    assert normalize(raw, 1000) == clean


def test_normalize_removes_fenced_blocks():
    text = f"Before.\n{FENCE}python\nprint('never say this')\n{FENCE}\nAfter.\n~~~\nalso code\n~~~\nEnd."
    assert normalize(text, 1000) == "Before. After. End."
    assert normalize(f"Look:\n{FENCE}\nunclosed code. more", 1000) == "Look:"
    assert normalize(f"inline {FENCE}x{FENCE} is kept", 1000) == "inline x is kept"


@pytest.mark.parametrize("raw", ["", "   \n\t ", "😀🎉👍🏽", "!!! ...", "**", f"{FENCE}\ncode\n{FENCE}",
                                 "https://example.com", "- \n# \n---"])
def test_nothing_speakable_gives_empty(raw):
    assert normalize(raw, 1000) == ""


def test_too_long_is_refused_before_any_work():
    assert normalize("a" * 50, 50) == "a" * 50
    with pytest.raises(TextTooLong) as err:
        normalize("a" * 51, 50)
    assert isinstance(err.value, ValueError)
    assert err.value.code == "TextTooLong"
    assert "50" in str(err.value) and "max_text_chars" in str(err.value)
    with pytest.raises(TextTooLong):  # emoji-only or not, the raw size is what counts
        normalize("😀" * 10_000_000, 5000)


@pytest.mark.parametrize("unit", ["[", "](", "<http:", "[a](b(", "*_", "- ", "~~~ ", FENCE + "\n", "http://a.", "  "])
def test_normalize_is_linear_on_pathological_input(unit):
    text = unit * (50_000 // len(unit))
    start = time.perf_counter()
    normalize(text, 50_000)
    assert time.perf_counter() - start < 1.0  # quadratic patterns take ~10 s here, linear ones ~10 ms


# --- splitter: release as soon as a sentence is complete ------------------------------------


def test_sentence_released_on_its_terminator():
    assert stream(["Hello there", ".", " How are", " you?", " Fine"]) == [
        [], ["Hello there."], [], ["How are you?"], [], ["Fine"]]


@pytest.mark.parametrize("text,sentences", [
    ("Wait! Really? Yes; no: maybe.", ["Wait!", "Really?", "Yes;", "no:", "maybe."]),
    ("你好。我是小明！你呢？好；走：吧", ["你好。", "我是小明！", "你呢？", "好；", "走：", "吧"]),
    ("Line one\nLine two\r\nLine three", ["Line one", "Line two", "Line three"]),
    ("What?! Well... ok.", ["What?!", "Well...", "ok."]),
    ('He said "hi." Then left.', ['He said "hi."', "Then left."]),
    ("「はい。」と言った。", ["「はい。」", "と言った。"]),
    ("**Note:** be careful.", ["**Note:**", "be careful."]),
    ("Great!\n😀 🎉\n...\nNext.", ["Great!", "Next."]),  # emoji/punctuation-only lines dropped
])
def test_boundaries(text, sentences):
    assert split_sentences(text) == sentences


@pytest.mark.parametrize("text", [
    "Pi is 3.14159 today.", "Meet at 10:30 sharp.", "Dr. Smith is in.", "Mr. and Mrs. Jones came.",
    "Use e.g. this one.", "J. R. R. Tolkien wrote it.", "The U.S. team won.", "Visit example.com now.",
    "See https://example.com/a/b now.", "Das ist z.B. gut.", "Version 2.0.1 is out.",
])
def test_not_a_boundary(text):
    assert split_sentences(text) == [text]


def test_digit_terminator_waits_for_the_next_character():
    assert stream(["It is 3.", "14 now."]) == [[], ["It is 3.14 now."], []]
    assert stream(["At 10:", "30 we go."]) == [[], ["At 10:30 we go."], []]
    assert stream(["I have 2.", " Then more."]) == [[], ["I have 2.", "Then more."], []]
    assert stream(["Ratio 3:", " next"]) == [[], ["Ratio 3:"], ["next"]]
    assert stream(["Count to 3."]) == [[], ["Count to 3."]]  # flush releases a held terminator
    assert stream(["Wow 3!"]) == [["Wow 3!"], []]  # only "." and ":" are ambiguous after a digit


def test_punctuation_after_a_released_sentence_is_dropped():
    assert stream(['He said "hi.', '" Then', '!', '!! left.']) == [['He said "hi.'], [], ["Then!"], ["left."], []]
    assert stream(["Wait.", "..", ". Go on."]) == [["Wait."], [], ["Go on."], []]
    assert stream(["Wait.", " ..."]) == [["Wait."], [], []]  # not directly after: its own (dropped) sentence


def test_numbered_list_items_stay_whole():
    assert split_sentences("Steps:\n1. Boil water.\n2. Add tea\n10. Drink it") == [
        "Steps:", "1. Boil water.", "2. Add tea", "10. Drink it"]


def test_letter_dot_split_across_pieces_is_the_documented_limit():
    # within one piece "example.com" stays whole; across pieces the "." is already released
    assert streamed(["Visit example.com now."]) == ["Visit example.com now."]
    assert streamed(["Visit example.", "com now."]) == ["Visit example.", "com now."]


def test_arbitrary_piece_boundaries_give_the_same_sentences():
    text = ("Hello there! It is 3.14 degrees at 10:30, said Dr. Smith. 你好。我是小明！\n"
            "Shopping list:\n1. eggs\n2. milk\n"
            f"Here is code:\n{FENCE}python\nx = 1. # no. never\n{FENCE}\n"
            "What?! Really... yes. 1, 2, 3 and 4 or 5; done")
    whole = split_sentences(text)
    assert whole == ["Hello there!", "It is 3.14 degrees at 10:30, said Dr. Smith.", "你好。", "我是小明！",
                     "Shopping list:", "1. eggs", "2. milk", "Here is code:", "What?!", "Really...", "yes.",
                     "1, 2, 3 and 4 or 5;", "done"]
    # the same sentences; only punctuation arriving after its sentence was released is lost
    words = [s.rstrip(CLOSERS + TERMINATORS) for s in whole]
    by_char = streamed(list(text))
    assert [s.rstrip(CLOSERS + TERMINATORS) for s in by_char] == words
    assert by_char[8] == "What?"  # the "!" came after "What?" was released
    rng = random.Random(7)
    for _ in range(300):
        cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 40)))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
        assert [s.rstrip(CLOSERS + TERMINATORS) for s in streamed(pieces)] == words, pieces


# --- splitter: length cap -------------------------------------------------------------------


def test_long_sentence_cut_at_last_clause_mark():
    text = "one two three four five six, seven eight nine ten eleven twelve thirteen"
    out = split_sentences(text, max_sentence_chars=40)
    assert out == ["one two three four five six,", "seven eight nine ten eleven twelve", "thirteen"]
    assert all(len(s) <= 40 for s in out)


def test_long_sentence_without_clause_mark_cut_at_whitespace():
    words = " ".join(f"word{i}" for i in range(60))
    out = split_sentences(words + ".", max_sentence_chars=50)
    assert all(len(s) <= 50 for s in out) and len(out) > 5
    assert " ".join(out) == words + "."  # nothing lost, no word split


def test_early_comma_is_not_preferred_over_a_late_space():
    out = split_sentences("Yes, " + "x" * 10 + " " + "y" * 30, max_sentence_chars=30)
    assert out[0] == "Yes, " + "x" * 10


def test_cjk_cut_at_clause_mark_else_hard():
    text = "甲" * 20 + "，" + "乙" * 25
    assert split_sentences(text, max_sentence_chars=30) == ["甲" * 20 + "，", "乙" * 25]
    out = split_sentences("丙" * 70, max_sentence_chars=30)
    assert out == ["丙" * 30, "丙" * 30, "丙" * 10]


def test_length_cap_holds_while_streaming():
    text = ("a fairly long clause, " * 30).strip()
    for pieces in (list(text), [text[i:i + 7] for i in range(0, len(text), 7)]):
        out = streamed(pieces, max_sentence_chars=60)
        assert all(len(s) <= 60 for s in out)
        assert " ".join(out).replace(" ", "") == text.replace(" ", "")


# --- splitter: code blocks, state, limits ---------------------------------------------------


def test_fenced_code_dropped_while_streaming():
    pieces = ["Run this:\n`", "``sh\nrm -rf x. Then y!\n", "echo done.\n``", "`\nAll done."]
    assert stream(pieces) == [["Run this:"], [], [], ["All done."], []]


def test_tilde_fence_and_unclosed_fence():
    assert split_sentences("A.\n~~~\nB. C.\n~~~\nD.") == ["A.", "D."]
    assert split_sentences(f"A.\n{FENCE}js\nB. C.") == ["A."]
    assert split_sentences(f"{FENCE}x{FENCE} inline. Next.") == [f"{FENCE}x{FENCE} inline.", "Next."]


def test_flush_resets_for_the_next_text():
    splitter = SentenceSplitter()
    assert splitter.push(f"Hi.\n{FENCE}\ncode") == ["Hi."]
    assert splitter.flush() == []
    assert splitter.push("New text. ") == ["New text."]  # no longer inside the code block
    assert splitter.flush() == []


def test_max_text_chars_bounds_a_stream():
    splitter = SentenceSplitter(max_text_chars=20)
    assert splitter.push("Hello there. Hi") == ["Hello there."]
    with pytest.raises(TextTooLong):
        splitter.push(" and a lot more")
    assert splitter.flush() == ["Hi"]  # the refused piece was not taken in
    with pytest.raises(TextTooLong):
        split_sentences("x" * 21, max_text_chars=20)


def test_bad_max_sentence_chars():
    with pytest.raises(ValueError, match="max_sentence_chars"):
        SentenceSplitter(max_sentence_chars=0)


def test_split_sentences_of_nothing():
    assert split_sentences("") == []
    assert split_sentences("  \n\n ... 😀 \n") == []
