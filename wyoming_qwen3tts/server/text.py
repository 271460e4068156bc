"""Text from Home Assistant (often an LLM's markdown) → speakable sentences.

The handler splits the *raw* text with `SentenceSplitter` (or `split_sentences` for a one-shot
request), then cleans each sentence with `normalize`. Splitting comes first because text
arrives in arbitrary pieces and synthesis of sentence 1 should start while sentence 2 is still
being written; the splitter also drops fenced code blocks line by line, which `normalize` could
not do once a block is spread over several sentences. `SentenceSplitter.settled()` gives the
already final start of the sentence still being written (for text_stream.SentenceStream).

Splitting rules (each decision uses only what has arrived, and is never revised):

- Boundaries are `. ! ? ; :`, CJK `。！？；：` and line ends. Closing quotes and brackets,
  markdown emphasis markers and further terminators that directly follow ("?!", "...", `."`,
  `.**`) stay with the sentence if they have already arrived, and are dropped if they arrive
  after it was released (so piece boundaries never change the sentences' words).
- A terminator at the end of the buffer is released at once ("Hello there." on the push of the
  "."), except an ASCII "." or ":" right after a digit: it is held for one more character,
  so that "3.14" and "10:30" never split.
- An ASCII terminator directly followed by anything but whitespace, a closer or another
  terminator is not a boundary: "3.14", "10:30", "e.g.", "example.com", "https://". (This sees
  only what has arrived: "example." and "com" in separate pieces do split.)
- A "." is not a boundary after an abbreviation: a dotted initialism ("e.g", "U.S", "z.B"),
  a single capital (the initial in "J. Smith"), a title (Mr, Mrs, Ms, Dr, Prof, Sr, Jr, St,
  vs), or when the sentence so far is only a number (the "1." of a numbered list); nor after a
  German ordinal, a number of one or two digits after an article or preposition ("der 4.
  Dezember", Home Assistant's own date answer; "im 2. Stock").
- A sentence longer than `max_sentence_chars` is cut at the last clause mark (`,` `，` `、`) in
  the second half of the window, else at the last whitespace, else at any clause mark, else
  hard at the limit. No sentence is longer than the limit.
- A line that starts with ``` or ~~~ opens a code block: it and every line up to the closing
  fence are dropped (an unclosed block to the end of the text).
- Sentences are stripped; those without a letter or digit (".", "**", an emoji) are dropped.
"""
from __future__ import annotations

import re

ASCII_TERMINATORS = ".!?;:"
CJK_TERMINATORS = "。！？；："
TERMINATORS = ASCII_TERMINATORS + CJK_TERMINATORS
CLOSERS = "\"')]}»”’」』】》*_`"
CLAUSE_MARKS = ",，、"
LINE_ENDS = "\n\r"
FENCES = ("```", "~~~")
DEFAULT_MAX_SENTENCE_CHARS = 300

_ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs"})
# German words after which "4." is an ordinal ("der 4. Dezember"), not a sentence's end
_BEFORE_ORDINAL = frozenset({"der", "den", "dem", "des", "am", "im", "vom", "zum", "beim", "ab", "bis", "seit"})
_INITIALISM = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")
_OPENERS = "\"'([{«“‘「『"
_LAST_SPACE = re.compile(r"\s\S*\Z")


class TextTooLong(ValueError):
    """More text than server.max_text_chars; `code` goes into the Wyoming error event."""

    code = "TextTooLong"

    def __init__(self, limit: int) -> None:
        super().__init__(f"text is longer than {limit} characters (server.max_text_chars)")


# --- normalisation ---------------------------------------------------------------------------

_FENCED_BLOCK = re.compile(r"^[ \t]*((`|~)\2{2,})[^\n`]*(?:\n.*?(?:^[ \t]*\2{3,}[ \t]*$|\Z)|\Z)",
                           re.MULTILINE | re.DOTALL)
# (character classes exclude their own opening bracket: a failed match stops at the next one,
# which keeps every pattern linear in the length of the text)
_AUTOLINK = re.compile(r"<(?:https?|ftp|mailto):[^<>\s]*>")
_LINK = re.compile(r"!?\[([^\[\]\n]*)\]\((?:[^()\n]|\([^()\n]*\))*\)")
_URL = re.compile(r"(?:\b(?:https?|ftp)://|\bwww\.)[^\s<>\"'()\[\]]*[^\s<>\"'()\[\].,;:!?]")
_RULE = re.compile(r"^[ \t]*([-*_])(?:[ \t]*\1){2,}[ \t]*$", re.MULTILINE)
_HEADING = re.compile(r"^[ \t]*#{1,6}(?=[ \t]|$)", re.MULTILINE)
_QUOTE = re.compile(r"^[ \t]*>+", re.MULTILINE)
_BULLET = re.compile(r"^[ \t]*[-*+•‣◦▪][ \t]+", re.MULTILINE)
_STARS = re.compile(r"(?<!\d)\*+|\*+(?!\d)")  # emphasis; "5*3" keeps its star
_UNDERSCORES = re.compile(r"(?<!\w)_+|_+(?!\w)")  # emphasis; snake_case keeps its underscores
_EMOJI = re.compile(
    "["
    "\U0001F000-\U0001FAFF"  # mahjong … pictographs, emoticons, transport, flags, skin tones, ext-A
    "\u2600-\u27BF"  # miscellaneous symbols, dingbats (☀ ★ ✅ ❤)
    "\u2B00-\u2BFF"  # miscellaneous symbols and arrows (⭐ ⬛)
    "\u231A\u231B\u23E9-\u23FA"  # ⌚ ⌛ ⏩ … ⏺
    "\u200D\uFE0E\uFE0F\u20E3"  # emoji glue: zero-width joiner, variation selectors, keycap
    "\U000E0020-\U000E007F"  # tag characters (subdivision flags)
    "]+"
)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SPACE_BEFORE_MARK = re.compile(r"\s+(?=[.,!?;:。！？；：，、])")
_SPACES = re.compile(r"\s+")


def normalize(text: str, max_chars: int) -> str:
    """Plain speakable text: markdown, code blocks, URLs and emoji removed, whitespace collapsed.

    Returns "" when nothing speakable (no letter or digit) is left, so the caller can finish
    the request without synthesizing. The length check comes first and bounds all later work.
    """
    if len(text) > max_chars:
        raise TextTooLong(max_chars)
    text = _FENCED_BLOCK.sub("\n", text)
    text = _AUTOLINK.sub(" ", text)
    text = _LINK.sub(r"\1", text)
    text = _URL.sub(" ", text)
    text = text.replace("`", "").replace("~~", "")
    for pattern in (_RULE, _HEADING, _QUOTE, _BULLET):
        text = pattern.sub("", text)
    text = _STARS.sub("", text)
    text = _UNDERSCORES.sub("", text)
    text = _EMOJI.sub(" ", text)
    text = _CONTROL.sub(" ", text)
    text = _SPACE_BEFORE_MARK.sub("", _SPACES.sub(" ", text)).strip()
    return text if _speakable(text) else ""


def _speakable(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


# --- sentence splitting ----------------------------------------------------------------------


class SentenceSplitter:
    """Incremental splitter: `push` pieces as they arrive, `flush` at the end of the text.

    One instance per stream; after `flush` it is empty and can be reused. With
    `max_text_chars`, `push` raises `TextTooLong` once the stream exceeds it (the piece that
    crosses the limit is not taken in), which bounds memory and work per stream.
    """

    def __init__(self, max_sentence_chars: int = DEFAULT_MAX_SENTENCE_CHARS, max_text_chars: int | None = None) -> None:
        if max_sentence_chars < 1:
            raise ValueError(f"max_sentence_chars must be >= 1, got {max_sentence_chars}")
        self.max_sentence_chars = max_sentence_chars
        self.max_text_chars = max_text_chars
        self._reset()

    def _reset(self) -> None:
        self._buf = ""  # text not yet returned; the next sentence starts at index 0
        self._pos = 0  # where scanning for a boundary resumes
        self._line_start = True  # _buf[0] is the first character of a line
        self._fence: str | None = None  # "`" or "~" while inside a fenced code block
        self._dangling = False  # the last sentence ended at a terminator: drop closers that follow
        self._total = 0

    def push(self, piece: str) -> list[str]:
        """Sentences completed by this piece, in order."""
        if self.max_text_chars is not None and self._total + len(piece) > self.max_text_chars:
            raise TextTooLong(self.max_text_chars)
        self._total += len(piece)
        self._buf += piece
        return self._split(final=False)

    def flush(self) -> list[str]:
        """Everything still pending, as sentences; the splitter is empty afterwards."""
        out = self._split(final=True)
        _emit(out, self._buf)
        self._reset()
        return out

    def settled(self) -> str:
        """The start of the open sentence that no later text can change (raw, not stripped).

        The open sentence (released next, unless it turns out to have nothing speakable) starts
        with this text, except that whitespace at its end may instead fall to the sentence after
        (where it is stripped): later pieces only append. "" while even the start is undecided:
        after a flush, inside a code block, or on a line that may still open one. For
        text_stream.SentenceStream, which speaks a sentence while it is still being written.
        """
        buf = self._buf
        if not buf or self._dangling or self._fence is not None:
            return ""
        if self._line_start and self._is_code_line(final=False) is not False:
            return ""
        # _find_cut has scanned buf[:_pos] without finding a boundary, so a boundary cut comes
        # after it; a length cut (when no boundary comes in time) no earlier than _length_floor
        end = min(self._pos, self._length_floor())
        while end < len(buf) and buf[end].isspace():
            end += 1
        return buf[:end]

    def _length_floor(self) -> int:
        """The earliest a length cut (_clause_cut, once the sentence reaches max_sentence_chars)
        can fall, whatever text follows: the rule is the same, applied to the window to come."""
        buf, half = self._buf, self.max_sentence_chars // 2
        clause = max(buf.rfind(mark) for mark in CLAUSE_MARKS)
        if clause >= half:  # the cut will be at this clause mark or a later one
            return clause + 1
        last = _LAST_SPACE.search(buf)
        space = last.start() if last else 0  # as in _clause_cut, a space at 0 does not count
        if space:  # a later clause mark would be in the second half: the cut is at this space or later
            return space
        # no space yet: a later space, a later clause mark or the hard limit, or this clause mark
        return min(len(buf), clause + 1) if clause >= 0 else len(buf)

    def _split(self, final: bool) -> list[str]:
        out: list[str] = []
        while self._buf:
            if self._dangling:  # '"' or '!' arriving after "Hi?" was released: they belong to it
                rest = self._buf.lstrip(CLOSERS + TERMINATORS)
                self._buf, self._dangling = rest, not rest
                continue
            if self._line_start:
                code = self._code_line(final)
                if code is None:
                    break
                if code:
                    continue
            cut = self._find_cut(final)
            if cut is None:
                break
            _emit(out, self._buf[:cut])
            last = self._buf[cut - 1]
            self._line_start = last in LINE_ENDS
            self._dangling = last in CLOSERS or last in TERMINATORS
            self._buf, self._pos = self._buf[cut:], 0
        return out

    def _code_line(self, final: bool) -> bool | None:
        """At a line start: drop one line of a code block (True), report ordinary text (False),
        or wait for the rest of the line (None)."""
        verdict = self._is_code_line(final)
        if not verdict:
            return verdict
        end = _line_end(self._buf)
        if end < 0:
            end = len(self._buf)  # unclosed block or lone fence at the end: dropped
        head = self._buf[:end].lstrip(" \t")
        if self._fence is None:
            self._fence = head[0]
        elif _closes_fence(head, self._fence):
            self._fence = None
        self._buf, self._pos = self._buf[end + 1:], 0
        return True

    def _is_code_line(self, final: bool) -> bool | None:
        """Whether the line at the start of the buffer is code (a fence or inside a block); None
        while that depends on text still to come. Changes nothing."""
        end = _line_end(self._buf)
        head = (self._buf if end < 0 else self._buf[:end]).lstrip(" \t")
        if self._fence is None:
            if end < 0 and not final and len(head) < 3 and any(f.startswith(head) for f in FENCES):
                return None  # "`" or "``" may still become a fence
            if not _opens_fence(head):
                return False
        return None if end < 0 and not final else True

    def _find_cut(self, final: bool) -> int | None:
        """End index of the first complete sentence in the buffer, or None to wait for more."""
        buf, limit = self._buf, self.max_sentence_chars
        for i in range(self._pos, len(buf)):
            ch = buf[i]
            if ch in LINE_ENDS:
                return i + 1
            if i >= limit:
                return self._clause_cut()
            if ch in CJK_TERMINATORS:
                return self._absorb(i + 1)
            if ch in ASCII_TERMINATORS:
                verdict = self._ascii_boundary(i, final)
                if verdict is None:
                    self._pos = i
                    return None
                if verdict:
                    return self._absorb(i + 1)
        self._pos = len(buf)
        return None

    def _ascii_boundary(self, i: int, final: bool) -> bool | None:
        """Whether the ASCII terminator at i ends a sentence; None: it depends on the next character."""
        buf, ch = self._buf, self._buf[i]
        if i + 1 < len(buf):
            nxt = buf[i + 1]
            if not (nxt.isspace() or nxt in CLOSERS or nxt in TERMINATORS):
                return False
        elif not final and ch in ".:" and i > 0 and buf[i - 1].isdigit():
            return None
        return ch != "." or not _abbreviation(buf[:i])

    def _absorb(self, j: int) -> int:
        """Extend a sentence ending at j over closers and terminators that follow it."""
        buf, limit = self._buf, self.max_sentence_chars
        while j < len(buf) and j < limit and (buf[j] in CLOSERS or buf[j] in TERMINATORS):
            j += 1
        return j

    def _clause_cut(self) -> int:
        """Where to cut a sentence that reached max_sentence_chars without a boundary."""
        window = self._buf[: self.max_sentence_chars]
        clause = max(window.rfind(mark) for mark in CLAUSE_MARKS)
        if clause >= len(window) // 2:
            return clause + 1
        space = next((i for i in range(len(window) - 1, 0, -1) if window[i].isspace()), 0)
        if space:
            return space
        return clause + 1 if clause >= 0 else len(window)


def split_sentences(text: str, max_sentence_chars: int = DEFAULT_MAX_SENTENCE_CHARS,
                    max_text_chars: int | None = None) -> list[str]:
    """All sentences of a complete text (one-shot synthesize), by the same rules as streaming."""
    splitter = SentenceSplitter(max_sentence_chars, max_text_chars)
    return splitter.push(text) + splitter.flush()


def _emit(out: list[str], sentence: str) -> None:
    sentence = sentence.strip()
    if _speakable(sentence):
        out.append(sentence)


def _line_end(text: str) -> int:
    ends = [i for i in (text.find("\n"), text.find("\r")) if i >= 0]
    return min(ends) if ends else -1


def _opens_fence(head: str) -> bool:
    # no backtick after the fence: "```x```" on one line is inline code (same rule as _FENCED_BLOCK)
    return head[:3] in FENCES and "`" not in head.lstrip(head[0])


def _closes_fence(head: str, fence: str) -> bool:
    head = head.rstrip()
    return len(head) >= 3 and head == fence * len(head)


def _abbreviation(pending: str) -> bool:
    """True when a "." after `pending` most likely ends an abbreviation or a list number."""
    pending = pending.strip()
    if not pending:
        return False
    if pending.isdigit():
        return True
    words = pending.rsplit(None, 2)
    word = words[-1].lstrip(_OPENERS)
    if word.isdigit() and len(word) <= 2 and len(words) > 1 and words[-2].lower() in _BEFORE_ORDINAL:
        return True
    return (bool(_INITIALISM.fullmatch(word)) or (len(word) == 1 and word.isupper())
            or word.lower() in _ABBREVIATIONS)
