"""Streamed text → normalized fragments of each sentence as soon as they are final.

An LLM's reply arrives in pieces. `SentenceSplitter` releases a sentence only once it ends;
`SentenceStream` also hands out the start of the sentence still being written, so that its
utterance can be opened with the first words and grown as more arrive. The fragments of a
sentence, joined, are exactly `normalize(sentence)` of the sentence the splitter releases (the
text the sentence-at-a-time path speaks), and a fragment is never taken back, so the stream
only gives out text that no later piece can change. Two questions decide that:

Which raw text is surely in the open sentence? `SentenceSplitter.settled()`: what it has
scanned without finding a boundary, minus what a cut at max_sentence_chars could still move to
the next sentence.

How much of that normalizes to a final prefix? `normalize` works on the whole sentence, so a
prefix is only safe at a cut point after which no later character can change how the text
before it is cleaned. We cut after a whitespace character or after a CJK character (scripts
written without spaces), and normalize the sentence up to and including it. That is exact
because every cleaning rule of `normalize` either cannot cross such a point, or is checked here:

- URLs, autolinks, emoji runs, backtick/tilde/star/underscore runs contain no whitespace, and
  their one-character look-arounds see the (already known) character at the cut. A CJK cut is
  not taken in a word that contains "<", "://" or "www." (a URL or autolink may continue).
- A markdown link `[text](url)` may contain spaces: no cut after an unfinished one (`[the do`,
  `[a](http`); the cut goes before its "[" until it is closed or can no longer close.
- A sentence starting with ``` or ~~~ is removed whole unless a backtick follows: nothing is
  given out for it until one does (or, if none comes, ever).
- Heading, quote, bullet and rule markers only apply at the start of the sentence, and only
  to characters that are no letter or digit: once the prefix holds a letter or digit they are
  decided, and before that nothing is given out (a sentence gets its first fragment only once
  it is certain to be speakable).
- Whitespace collapsing and "word ," → "word,": the prefix's own whitespace is final; the
  space at the cut is left out (the next fragment starts with " word" or ",").

The sentence is also read out (wyoming_qwen3tts/normalize: numbers, times, units... in words)
when a `SentenceNormalizer` is given. Its rules look ahead: "21,5" reads differently before
"°C", "1.000" before ",5", "1" before "Stunde". Every rule keeps to the contract in
normalize/__init__.py (a rewrite stays within LOOKAHEAD tokens of a token with a digit or
symbol in it), so the clean prefix is cut once more, before the first of its last LOOKAHEAD
tokens that holds a digit or symbol (`held_back`), and only that is read out and given: it
reads the same whatever follows. The sentence's language (when detected) is chosen once, from
the text known when its first digit or symbol is given out; the end fragment reads the whole
sentence in that language. So a number holds back at most the two words after it.

So at most the word being typed is held back (in CJK text without spaces, nothing), plus
markup that is still open, plus what the splitter itself has not decided (a "." or ":" after a
digit, a line start that may open a code fence). Exceptions, where the splitter's length cut makes more text
undecided: after a clause mark (`,` `，` `、`) in the second half of max_sentence_chars, or, in
text without spaces, after any clause mark, the text up to the next one is held until it
arrives or the sentence ends, since the sentence may still be cut at that mark.
"""
from __future__ import annotations

import logging
import re
import sys
from dataclasses import dataclass
from itertools import accumulate

from ..normalize import SentenceNormalizer
from .text import _AUTOLINK, _LINK, DEFAULT_MAX_SENTENCE_CHARS, SentenceSplitter, _opens_fence, normalize

log = logging.getLogger(__name__)

# The longest start of a markdown link that later text could still complete: "[", "[the docs",
# "[a]", "[a](http://x", with at most the one nested "(" _LINK allows.
_LINK_START = re.compile(r"\[[^\[\]\n]*(?:\](?:\((?:[^()\n]|\([^()\n]*\))*(?:\([^()\n]*)?)?)?")
# characters a cut may follow: whitespace, and scripts written without spaces (and their punctuation)
_CUT_POINT = re.compile(r"[\s" "\u3001-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
                        "\uff01-\uff0f\uff1a-\uff1f\U00020000-\U0002ffff]")
_URLISH = re.compile(r"(?:<|://|www\.)\S*")  # the rest of a word from where a URL or autolink may begin


@dataclass(frozen=True)
class Fragment:
    """Text to append to sentence `sentence`'s utterance (sentences count 0, 1, 2… over the
    speakable ones); `end`: the sentence is complete. `text` is empty only in an end fragment."""

    sentence: int
    text: str
    end: bool


class SentenceStream:
    """`push` pieces as they arrive, `flush` at the end of the text; both return the fragments
    that became final. One instance per stream; after `flush` it starts over at sentence 0.

    `max_sentence_chars` and `max_text_chars` are SentenceSplitter's; `max_chars` is
    normalize's limit (default: max_text_chars, else none). TextTooLong comes from either.
    `spoken`: reads each sentence out (None: the clean text as it is).
    Work per piece is bounded by the open sentence (at most max_sentence_chars), not the text.
    """

    def __init__(self, max_sentence_chars: int = DEFAULT_MAX_SENTENCE_CHARS, max_text_chars: int | None = None,
                 max_chars: int | None = None, spoken: SentenceNormalizer | None = None) -> None:
        self._splitter = SentenceSplitter(max_sentence_chars, max_text_chars)
        self._spoken = spoken
        limit = max_chars if max_chars is not None else max_text_chars
        self.max_chars = limit if limit is not None else sys.maxsize
        self._reset()

    def _reset(self) -> None:
        self._sentence = 0  # index of the open sentence
        self._said = ""  # the normalized text given out for it so far
        self._settled: str | None = None  # the raw text _said was worked out from
        self._language: str | None = None  # what the open sentence is read in, once chosen

    def push(self, piece: str) -> list[Fragment]:
        """Fragments that `piece` made final, in order."""
        return self._fragments(self._splitter.push(piece), self._splitter.settled())

    def flush(self) -> list[Fragment]:
        """The rest, up to the end of the last sentence. The stream is empty afterwards."""
        out = self._fragments(self._splitter.flush(), "")
        self._reset()
        return out

    def _fragments(self, sentences: list[str], settled: str) -> list[Fragment]:
        out = []
        for raw in sentences:  # the first is the open sentence, if it has been given fragments
            text = normalize(raw, self.max_chars)
            if text:
                if self._spoken is not None:
                    text = self._spoken.sentence(text, self._language)
                if not text.startswith(self._said):  # a normaliser rule broke its contract: a bug
                    log.error("sentence %d read out as %r, but %r was given out already", self._sentence, text,
                              self._said)
                out.append(Fragment(self._sentence, text[len(self._said):], True))
                self._sentence += 1
            self._said, self._settled, self._language = "", None, None
        if settled != self._settled:
            self._settled = settled
            text = final_prefix(settled, self.max_chars)
            if self._spoken is not None:
                text, self._language = self._spoken.prefix(text, self._language)
            # (it always starts with _said, by the rules above; checked, as nothing can be taken back)
            if len(text) > len(self._said) and text.startswith(self._said):
                out.append(Fragment(self._sentence, text[len(self._said):], False))
                self._said = text
        return out


def final_prefix(settled: str, max_chars: int) -> str:
    """The normalized text of `settled` (the settled raw start of an open sentence) up to its last
    safe cut: a prefix of normalize() of every sentence that starts this way. "" if none yet,
    including when it has no letter or digit (normalize's "nothing speakable")."""
    text = settled.lstrip()
    if _opens_fence(text):  # the whole sentence goes unless a backtick comes
        return ""
    # a cut after whitespace, or after a CJK character outside a possible URL or autolink
    ends = [m.end() for m in _CUT_POINT.finditer(_URLISH.sub(_blank, text))]
    if ends and "[" in text:
        open_links = _open_links(text)
        ends = [end for end in ends if not open_links[end]]
    return normalize(text[: ends[-1]], max_chars) if ends else ""


def _open_links(text: str) -> list[int]:
    """For each cut position 0..len(text): how many markdown link attempts a cut there leaves
    open (later text could still make them links, or not)."""
    # Each attempt, scanned the way _LINK.sub scans, is open from its "[" until the character
    # that completes or breaks it; one pass marks those spans.
    text = _AUTOLINK.sub(_blank, text)  # normalize removes autolinks first
    edges = [0] * (len(text) + 2)
    start = text.find("[")
    while start >= 0:
        link = _LINK.match(text, start)
        # decided by its closing ")", else by the first character that breaks it (if one came)
        if link:
            decided = link.end()
        else:
            opened = _LINK_START.match(text, start)
            assert opened  # it matches the "[" at `start` alone
            decided = opened.end() + 1
        edges[start + 1] += 1
        edges[min(decided, len(text) + 1)] -= 1
        start = text.find("[", link.end() if link else start + 1)
    return list(accumulate(edges))


def _blank(match: re.Match[str]) -> str:
    """Filler of the same length, which no pattern here treats as special."""
    return "x" * len(match.group())
