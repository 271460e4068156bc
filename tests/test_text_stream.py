"""SentenceStream (server/text_stream.py): normalized fragments of the open sentence, as soon as
they are final. Every case is checked against the sentence-at-a-time path: the fragments of each
sentence, joined, are normalize() of the sentences SentenceSplitter releases for the same pieces."""
from __future__ import annotations

import random
import time

import pytest

from wyoming_qwen3tts.server.text import SentenceSplitter, TextTooLong, normalize, split_sentences
from wyoming_qwen3tts.server.text_stream import Fragment, SentenceStream, final_prefix

FENCE = "`" * 3
LIMIT = 10_000  # normalize's max_chars in these tests


def spoken_today(pieces, max_sentence_chars=300) -> list[str]:
    """What the sentence-at-a-time path speaks for these pieces."""
    splitter = SentenceSplitter(max_sentence_chars)
    raw = [s for p in pieces for s in splitter.push(p)] + splitter.flush()
    return [t for t in (normalize(s, LIMIT) for s in raw) if t]


def feed(pieces, max_sentence_chars=300) -> list[list[Fragment]]:
    """The fragments of each push, then of flush; asserts invariants (a)-(c) on the way."""
    stream = SentenceStream(max_sentence_chars, max_chars=LIMIT)
    calls = [stream.push(p) for p in pieces] + [stream.flush()]
    fragments = [f for call in calls for f in call]
    texts: list[str] = []
    ended = True
    for f in fragments:
        if texts and f.sentence == len(texts) - 1:  # the open sentence grows
            assert not ended, f"fragment after the end of sentence {f.sentence}: {f}"
            texts[-1] += f.text
        else:  # the next sentence starts, once the one before has ended
            assert f.sentence == len(texts) and (not texts or ended), (f, fragments)
            assert any(ch.isalnum() for ch in f.text), f"first fragment before it is surely speakable: {f}"
            texts.append(f.text)
        ended = f.end
        assert f.text or f.end, f"empty fragment that does not end its sentence: {f}"
    assert not texts or ended, "the last sentence did not end"
    assert texts == spoken_today(pieces, max_sentence_chars), pieces
    return calls


def said(calls) -> list[list[tuple[int, str, bool]]]:
    return [[(f.sentence, f.text, f.end) for f in call] for call in calls]


def before_end(pieces, **kw) -> str:
    """What sentence 0 got before its end fragment (pushes only, no flush)."""
    calls = feed(pieces, **kw)
    return "".join(f.text for call in calls[:-1] for f in call if f.sentence == 0 and not f.end)


# --- (d) timely: words go out while the sentence is being written --------------------------


def test_words_go_out_one_behind_the_typing():
    words = "The weather today is sunny and warm".split()
    calls = feed([words[0]] + [" " + w for w in words[1:]])
    assert said(calls) == [[], [(0, "The", False)], [(0, " weather", False)], [(0, " today", False)],
                           [(0, " is", False)], [(0, " sunny", False)], [(0, " and", False)], [(0, " warm", True)]]


def test_a_word_goes_out_with_the_space_after_it():
    text = "The weather today is sunny and warm"
    stream, got = SentenceStream(), ""
    for i, ch in enumerate(text):
        got += "".join(f.text for f in stream.push(ch))
        assert got == text[: i + 1].rpartition(" ")[0]  # every word whose space has arrived
    assert stream.flush() == [Fragment(0, " warm", True)]


def test_cjk_goes_out_character_by_character():
    calls = feed(list("今天天气很好。明天下雨"))
    assert said(calls) == [[(0, ch, False)] for ch in "今天天气很好"] + [[(0, "。", True)]] + [
        [(1, ch, False)] for ch in "明天下雨"] + [[(1, "", True)]]


def test_timely_on_random_plain_text():
    """Plain words, spaces and sentence ends in random pieces: after every push, all words but the
    one still being typed have been given out (its "." included if it ended the sentence)."""
    rng = random.Random(11)
    words = ["the", "weather", "is", "sunny", "and", "warm", "today", "Hello", "3", "42", "café"]
    for _ in range(300):
        text = " ".join(rng.choice(words) + rng.choice(["", "", "", ",", "."]) for _ in range(rng.randint(1, 30)))
        stream, so_far, got = SentenceStream(), "", ""
        for piece in _split(rng, text):
            for f in stream.push(piece):
                got += " " + f.text if got and f.text and not f.text.startswith(" ") and f.sentence > 0 else f.text
            so_far += piece
            assert got == so_far.rpartition(" ")[0] or (got == so_far and so_far.endswith(".")), (text, so_far, got)


# --- hand-picked cases --------------------------------------------------------------------


def test_numbers_split_at_the_dot_or_colon():
    calls = feed(["It is 3.", "14 now and 10:", "30 later. Next"])
    assert said(calls) == [[(0, "It is", False)], [(0, " 3.14 now and", False)],
                           [(0, " 10:30 later.", True)], [(1, "Next", True)]]


def test_abbreviations():
    calls = feed(["Use e.g.", " this, said Dr.", " Smith today. Bye"])
    assert said(calls) == [[(0, "Use", False)], [(0, " e.g. this, said", False)],
                           [(0, " Dr. Smith today.", True)], [(1, "Bye", True)]]


@pytest.mark.parametrize("pieces,held", [
    (["This is **ve", "ry** important", " stuff."], ["This is", " very"]),
    (["It is _warm", "_ and snake", "_case here."], ["It is", " warm and"]),
    (["See [the", " docs](https://exa", "mple.com/docs) now", " please."], ["See", "", " the docs"]),
    (["Look ![a", " cat](cat.png) sleeps", " now."], ["Look", " a cat"]),
    (["Go to https://exam", "ple.com/a?b=1 and", " rest."], ["Go to", ""]),
    (["Or <https://x.y", "/z> and", " more."], ["Or", ""]),
    (["Run `make", " test` first", " please."], ["Run", " make test"]),
    (["Great job 👍", "🏽🎉 really", " well!"], ["Great job", ""]),
    (["Family 👨\u200d", "👩\u200d👧 and", " more."], ["Family", ""]),
    (["## Wea", "ther today is nice"], ["", "Weather today is"]),
    (["> a quote", " here"], ["a", " quote"]),
])
def test_markdown_split_across_pieces(pieces, held):
    """`held`: what each push but the last adds to sentence 0 (open markup is held back)."""
    calls = feed(pieces)
    assert ["".join(f.text for f in call if f.sentence == 0) for call in calls[: len(held)]] == held
    assert not any(f.end for call in calls[: len(held)] for f in call)


def test_link_text_is_held_until_the_link_resolves():
    assert before_end(["See [the docs", " and more"]) == "See"  # may still become a link
    assert before_end(["See [the docs] and", " more"]) == "See [the docs] and"  # "]" not followed by "(": no link
    assert before_end(["A [b](c) [d", " e"]) == "A b"


def test_fenced_code_block_split_across_pieces():
    calls = feed(["Intro text.\n`", "``py", "thon\nprint('x. y')\n``", "`\nAfter that", " we rest."])
    assert said(calls) == [[(0, "Intro text.", True)], [], [], [(1, "After", False)], [(1, " that we rest.", True)], []]


def test_a_sentence_that_opens_a_fence_mid_line():
    # "```code" after a sentence end is removed whole by normalize, unless a backtick follows
    assert said(feed(["Done. ", FENCE, "code here and", " more"])) == [[(0, "Done.", True)], [], [], [], []]
    calls = feed(["Done. ", FENCE, "x and", " y", FENCE + " here"])
    assert said(calls)[:4] == [[(0, "Done.", True)], [], [], []]
    assert said(calls)[4:] == [[(1, "x and y", False)], [(1, " here", True)]]


def test_space_before_a_mark():
    assert said(feed(["Hello ", ", world", " !"])) == [
        [(0, "Hello", False)], [(0, ",", False)], [(0, " world!", True)], []]
    assert said(feed(["Wait  ", "   ", ". Then"])) == [[(0, "Wait", False)], [], [(0, ".", True)], [(1, "Then", True)]]


@pytest.mark.parametrize("text", [
    "First. ** Second.", "First.\n**\n🙂\nSecond.", "First. 🙂 ... Second.", "First.\n---\n# \nSecond.",
    f"First.\n{FENCE}\ncode. more\n{FENCE}\nSecond.", "First. [](x) ` ` Second.",
])
def test_unspeakable_sentences_in_between_get_no_index(text):
    for pieces in ([text], list(text)):
        fragments = [f for call in feed(pieces) for f in call]
        assert {f.sentence for f in fragments} == {0, 1}
        assert "".join(f.text for f in fragments if f.sentence == 1) == "Second."


def test_long_sentence_is_cut_like_the_splitter_cuts_it():
    text = " ".join(f"word{i}" for i in range(40)) + "."
    for pieces in (list(text), [w + " " for w in text.split(" ")]):
        fragments = [f for call in feed(pieces, max_sentence_chars=40) for f in call]
        assert max(f.sentence for f in fragments) == 7
        assert all(sum(1 for f in fragments if f.sentence == n and not f.end) >= 4 for n in range(7))


def test_cjk_after_a_clause_mark_waits_for_the_next_one():
    """Without spaces, a sentence that reaches max_sentence_chars is cut at its last clause mark:
    the text after one is only settled by the next mark or the sentence end."""
    calls = feed(list("你好，今天天气很好，我们走吧。"))
    got = [f.text for call in calls for f in call]
    assert got == ["你", "好", "，", "今天天气很好，", "我们走吧。", ""][:len(got)]
    assert "".join(got) == "你好，今天天气很好，我们走吧。"


def test_the_stream_follows_the_splitter_where_pieces_matter():
    """A terminator at the end of a piece is released at once (SentenceSplitter's documented rule),
    so "https:" in its own piece ends a sentence; the stream speaks what the splitter releases."""
    calls = feed(["See https:", "//x.y now."])
    assert said(calls) == [[(0, "See https:", True)], [(1, "//x.y now.", True)], []]


def test_flush_resets_and_limits_apply():
    stream = SentenceStream(max_text_chars=30)
    assert stream.push("Hi there. One") == [Fragment(0, "Hi there.", True)]
    assert stream.flush() == [Fragment(1, "One", True)]
    assert stream.push("Again now") == [Fragment(0, "Again", False)]  # counts from 0 again
    with pytest.raises(TextTooLong):
        stream.push(" and a lot more text than allowed")
    assert stream.flush() == [Fragment(0, " now", True)]
    with pytest.raises(TextTooLong):  # normalize's own limit
        SentenceStream(max_chars=10).push("a sentence longer than ten ")


def test_settled_start_of_the_open_sentence():
    splitter = SentenceSplitter()
    assert splitter.push("One. Two thr") == ["One."]
    assert splitter.settled() == " Two "  # a length cut could still fall at the last space
    splitter.push("ee 3.14 and 3.")  # "3." may become "3.14": the "." is not settled
    assert splitter.settled() == " Two three 3.14 and "
    splitter.push("14\n`")  # a line start that may open a code fence
    assert splitter.settled() == ""
    splitter.push("x")
    assert splitter.settled() == "`x"
    splitter.flush()
    assert splitter.settled() == ""
    # a cut at max_sentence_chars would fall at the last space: the word after it is not settled
    splitter = SentenceSplitter(max_sentence_chars=20)
    splitter.push("aaaa bbbb cccc")
    assert splitter.settled() == "aaaa bbbb "
    splitter.push(", dddd")  # a clause mark in the second half: the cut is there or later
    assert splitter.settled() == "aaaa bbbb cccc, "


def test_final_prefix_cut_points():
    assert final_prefix("  Hello wor", LIMIT) == "Hello"
    assert final_prefix("**Bold** and [a link", LIMIT) == "Bold and"
    assert final_prefix("```sh run it ", LIMIT) == ""
    assert final_prefix("```x` run it", LIMIT) == "x run"
    assert final_prefix("see http://x.y/你好", LIMIT) == "see"
    assert final_prefix("你好http", LIMIT) == "你好"
    assert final_prefix("- ", LIMIT) == ""


def test_work_per_piece_is_bounded_by_the_open_sentence():
    """Each push re-reads at most the open sentence (<= max_sentence_chars), never the whole text:
    8000 one-character pushes of pathological text take well under a second of CPU each."""
    for unit in ("a ", "[", "[ ", "[a](b ", "[a](b[c](d ", "你", "<http:", "x, ", "` ", "*_"):
        text = (unit * 8000)[:8000]
        stream = SentenceStream()
        start = time.process_time()
        for ch in text:
            stream.push(ch)
        stream.flush()
        assert time.process_time() - start < 4.0, unit  # ~0.6 s at worst; quadratic in the text: minutes


def test_one_piece_gives_the_one_shot_sentences():
    text = ("# Weather\nIt is **sunny** today, see [the forecast](https://x.y/f). Pi is 3.14! "
            f"Code:\n{FENCE}\nx = 1\n{FENCE}\n你好，世界！Great 👍 job")
    fragments = [f for call in feed([text]) for f in call]
    joined = ["".join(f.text for f in fragments if f.sentence == n) for n in range(fragments[-1].sentence + 1)]
    assert joined == [t for t in (normalize(s, LIMIT) for s in split_sentences(text)) if t]
    assert joined[-1] == "Great job" and fragments[-1] == Fragment(5, " job", True)


# --- (a)-(c) on random texts and random pieces ----------------------------------------------

WORDS = ["the", "weather", "Hello", "is", "3.14", "10:30", "e.g.", "Dr.", "U.S.", "J.", "snake_case", "5*3",
         "x", "Über", "naïve", "2", "1.", "café", "A1", "2024"]
SPACES = [" ", " ", " ", "  ", "\t", "\u00a0", "\u3000", " \t "]
PUNCT = [".", ",", "!", "?", ";", ":", "...", " ,", '"', "'", "(", ")", "[", "]", "?!", "-", "—", "、"]
MARKDOWN = ["**", "*", "_", "__", "`", FENCE, "``", "~~", "~~~", "# ", "## ", "#", "> ", "- ", "* ", "1. ",
            "[link text](https://example.com/a_(b))", "[", "](", "](https://x.y/z)", "![alt](img.png)",
            "<https://x.y/z>", "<mailto:a@b.c>", "---", "<", ">", "(", ")"]
URLS = ["https://example.com/a?b=1", "www.example.org", "http://x.y", "ftp://f.g/h.", "https://例子.com/路径"]
EMOJI = ["🙂", "👍🏽", "👨\u200d👩\u200d👧", "🇩🇪", "1️⃣", "❤️", "⭐", "\u200d", "\ufe0f"]
NEWLINES = ["\n", "\r\n", "\n\n", "\r"]
CJK = ["你好", "世界", "今天天气很好", "。", "，", "、", "！", "？", "「", "」", "はい", "カタカナ", "ー", "１２"]
OTHER = ["\x0b", "\x1c", "\x00", "\u2028"]
GRAMMAR = [(WORDS, 30), (SPACES, 25), (PUNCT, 12), (MARKDOWN, 12), (URLS, 3), (EMOJI, 5), (NEWLINES, 5),
           (CJK, 10), (OTHER, 1)]


def random_text(rng: random.Random) -> str:
    kinds, weights = zip(*GRAMMAR)
    return "".join(rng.choice(rng.choices(kinds, weights)[0]) for _ in range(rng.randint(1, 60)))


def _split(rng: random.Random, text: str) -> list[str]:
    """Random pieces: single characters, a few big ones, or anything between."""
    if len(text) < 2:
        return [text]
    mode = rng.random()
    if mode < 0.25:
        return list(text)
    count = rng.randint(1, min(len(text) - 1, 4 if mode < 0.5 else 40))
    cuts = sorted(rng.sample(range(1, len(text)), count))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]


def test_random_texts_in_random_pieces():
    rng = random.Random(2024)
    given = ended = 0
    for _ in range(3000):
        text = random_text(rng)
        limit = rng.choice([8, 20, 40, 300])
        feed([text], limit)  # one piece: also the one-shot path
        assert spoken_today([text], limit) == [
            t for t in (normalize(s, LIMIT) for s in split_sentences(text, limit)) if t]
        for _ in range(2):
            calls = feed(_split(rng, text), limit)
            given += sum(1 for call in calls[:-1] for f in call if not f.end)
            ended += sum(1 for call in calls for f in call if f.end)
    assert given > ended // 4  # many sentences are started before they end (short random ones often are not)


def test_final_prefix_holds_for_any_continuation():
    """The claim behind every fragment: what final_prefix gives for the start of a sentence is a
    prefix of normalize() of that start followed by anything at all: here the rest of a random
    text, or text that starts with what could re-read the end of the start (a closing ")" or
    "]", more stars, digits, a URL's rest, emoji glue, a mark after a space)."""
    rng = random.Random(99)
    risky = [")", "](x)", "]", "(", "*", "**", "_", "~", "`", FENCE, "#", "3", ".14", ",", " ,", " .", "://x",
             "ww.x.y", "tp://a", ">", "\u200d👩", "\ufe0f", "🏽", "x", "你", "\t", "\u00a0", ")\u3000"]
    checked = 0
    for _ in range(6000):
        text = random_text(rng).replace("\r", " ").replace("\n", " ")  # a sentence is one line
        cut = rng.randint(0, len(text))
        head = text[:cut]
        given = final_prefix(head, LIMIT)
        if not given:
            continue
        checked += 1
        assert any(ch.isalnum() for ch in given)
        more = random_text(rng).replace("\r", " ").replace("\n", " ")
        for tail in (text[cut:], rng.choice(risky) + more, rng.choice(risky), ""):
            whole = (head + tail).strip()  # as _emit hands it to normalize
            assert normalize(whole, LIMIT).startswith(given), (head, tail, given)
    assert checked > 3000
