"""Text ids of an utterance whose text arrives in pieces ("speak while the LLM is still writing").

The talker should get text ids as soon as they are known, but they must be exactly the ids
`build_prompt` takes from the whole text, `assistant_ids(tokenizer, text)`
(docs/MODEL.md §5.1, §11). `TextTokenStream` runs the tokenizer's stages incrementally and
returns an id only once no later text can change it:

1. Added tokens ("<|im_end|>" written in the text) are cut out of the raw text first,
   leftmost-longest. A tail that could still grow into one is held back; a complete one ends
   the current segment, which is then final in full.
2. NFC. Text before a character that starts an NFC segment (combining class 0, NFC-stable, and
   composing with nothing before it: "NFC_Quick_Check=Yes") normalises on its own, whatever
   follows; the text from the last such character on stays raw. So "e" waits for a possible
   U+0301, and so do Hangul jamo for their vowel or final.
3. The split regex (QWEN2_PATTERN). A pre-token is final when every character the regex
   looked at to choose it is known. Per branch: a contraction looks at most 3 characters
   ahead ("'l" may become "'ll"); `?\\p{L}+` and ` ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*` end at the first
   character that does not continue them ("Hel" + "lo", "." + "x" -> ".x", "!" + "\\n"); a digit
   is alone; the three whitespace branches (`\\s*[\\r\\n]+`, `\\s+(?!\\S)`, `\\s+`) read the whole
   whitespace run and the character after it ("a " + "b" -> " b", "\\r" + "\\n"). Hence: a
   pre-token is final if a character follows it, and, if it is whitespace only, a
   non-whitespace character follows somewhere. The regex has no look-behind, so committed
   text is dropped: matching resumes at a pre-token boundary as it would in the whole text.
4. BPE works inside one pre-token, so a final pre-token's ids are final.

The prompt tokenizes "assistant\\n" + text as one segment (the role's newline can merge with
a text starting with newlines); the stream does the same and keeps the segment's first two
ids apart as the role's (`role_ids`), as `[:3]` and `[3:]` do. Work per piece is linear in the
uncommitted tail, not in the text so far.
"""
from __future__ import annotations

import functools
import unicodedata

from .tokenizer import TextTokenizer

_SEGMENT_START = "assistant\n"  # what precedes the text in its tokenizer segment (after <|im_start|>)


def _composes_backward() -> frozenset[str]:
    """Characters NFC can merge into the character before them (NFC_Quick_Check=Maybe):
    the second half of every primary composite, and the Hangul vowel and trailing jamo."""
    out = {chr(c) for c in range(0x1161, 0x1176)} | {chr(c) for c in range(0x11A8, 0x11C3)}
    for code in range(0x110000):
        parts = unicodedata.decomposition(chr(code)).split()
        if len(parts) == 2 and not parts[0].startswith("<") and unicodedata.normalize("NFC", chr(code)) == chr(code):
            out.add(chr(int(parts[1], 16)))
    return frozenset(out)


# Built at import (about 0.25 s) from this Python's Unicode database rather than hard-coded, so
# it always matches `unicodedata`; at import, so the first utterance does not pay for it.
_COMPOSES_BACKWARD = _composes_backward()


@functools.lru_cache(maxsize=4096)
def _starts_nfc_segment(char: str) -> bool:
    """NFC of text before `char` cannot depend on `char` or anything after it.

    Characters unknown to this Python's Unicode database (the tokenizer's may be newer) never
    qualify, so a version difference can only delay ids, not change them.
    """
    return (
        unicodedata.category(char) != "Cn"
        and unicodedata.combining(char) == 0
        and unicodedata.normalize("NFC", char) == char
        and char not in _COMPOSES_BACKWARD
    )


def _last_nfc_cut(text: str) -> int:
    """Largest i such that NFC(text[:i]) is final whatever follows (0 if none but the start).

    The character before the cut must be known to Python too: a character newer than this
    Python's Unicode database might compose with the next one under the tokenizer's.
    """
    for i in range(len(text) - 1, 0, -1):
        if _starts_nfc_segment(text[i]) and unicodedata.category(text[i - 1]) != "Cn":
            return i
    return 0


def _maybe_space(char: str) -> bool:
    """Could the regex's \\s match `char`? Every Unicode White_Space character is Cc, Zs, Zl or
    Zp; unassigned here (Cn) may be assigned in the regex engine's newer Unicode data."""
    return unicodedata.category(char) in ("Cc", "Zs", "Zl", "Zp", "Cn")


class TextTokenStream:
    """Text ids of one utterance, fed piece by piece.

    For any split of a text into pieces, the ids returned by `push` and `finish` concatenate to
    `assistant_ids(tokenizer, text)[1]`, and no returned id is ever revised.
    """

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self._tokenizer = tokenizer
        self._added: dict[str, int] = {}
        for token_id, token in tokenizer.added_tokens().items():
            if token.lstrip or token.rstrip or token.single_word or token.normalized:
                raise ValueError(f"added token {token.content!r}: only tokens matched as written are supported")
            self._added[token.content] = token_id
        self._added_starts = {content[0] for content in self._added}
        self._raw = ""  # received, but could still be the start of an added token
        self._unnormalized = ""  # plain text whose NFC may still change; starts an NFC segment
        self._normalized = ""  # final NFC text not yet in ids; starts at a pre-token boundary
        self._role = [tokenizer.token_to_id("<|im_start|>")]  # + the segment's first two ids
        self._finished = False
        self._advance(_SEGMENT_START, final=False)

    @property
    def role_ids(self) -> list[int] | None:
        """The prompt's three role ids, `assistant_ids(tokenizer, text)[0]`, once final (else None).

        Usually `<|im_start|> assistant \\n`, but a text starting with a line break merges into
        the role's newline, so they are known only once the text's start is.
        """
        return list(self._role) if len(self._role) == 3 else None

    def push(self, piece: str) -> list[int]:
        """Add the next piece of text; returns the ids that became final (possibly none)."""
        if self._finished:
            raise RuntimeError("push after finish")
        return self._advance(piece, final=False)

    def finish(self) -> list[int]:
        """The text is complete: returns every id not returned yet."""
        if self._finished:
            raise RuntimeError("finish called twice")
        self._finished = True
        return self._advance("", final=True)

    def _advance(self, piece: str, final: bool) -> list[int]:
        ids: list[int] = []
        for part in self._cut_added_tokens(piece, final):
            if isinstance(part, int):  # an added token ends the segment: all before it is final
                ids += self._commit(final=True)
                ids.append(part)
            else:
                self._unnormalized += part
        ids += self._commit(final)
        role = min(3 - len(self._role), len(ids))
        self._role += ids[:role]
        ids = ids[role:]
        return ids

    def _cut_added_tokens(self, piece: str, final: bool) -> list[str | int]:
        """Plain text and added-token ids, leftmost-longest as `encode` matches them; a tail that
        could still become (or grow into a longer) added token stays in `_raw` unless `final`."""
        text, start, pos = self._raw + piece, 0, 0
        parts: list[str | int] = []
        while pos < len(text):
            if text[pos] not in self._added_starts:
                pos += 1
                continue
            tail = text[pos:]
            if not final and any(len(tail) < len(c) and c.startswith(tail) for c in self._added):
                break
            match = max((c for c in self._added if tail.startswith(c)), key=len, default=None)
            if match is None:
                pos += 1
                continue
            parts += [text[start:pos], self._added[match]]
            pos = start = pos + len(match)
        parts.append(text[start:pos])
        self._raw = text[pos:]
        return parts

    def _commit(self, final: bool) -> list[int]:
        """Normalise what NFC can no longer change, then BPE the pre-tokens that are final."""
        raw = self._unnormalized
        cut = len(raw) if final else _last_nfc_cut(raw)
        self._normalized += self._tokenizer.normalize(raw[:cut])
        self._unnormalized = raw[cut:]

        text = self._normalized
        spans = self._tokenizer.split(text)
        if not final:
            spans = spans[: self._final_pre_tokens(text, spans)]
        end = spans[-1][1] if spans else 0
        self._normalized = text[end:]
        return [i for start, stop in spans for i in self._tokenizer.encode_pre_token(text[start:stop])]

    @staticmethod
    def _final_pre_tokens(text: str, spans: list[tuple[int, int]]) -> int:
        """How many leading pre-tokens no continuation of `text` can change (module docstring, 3)."""
        solid_end = next((i + 1 for i in range(len(text) - 1, -1, -1) if not _maybe_space(text[i])), 0)
        count = 0
        for start, stop in spans:
            if stop >= len(text):
                break  # the regex looked at the character after it
            if stop >= solid_end and all(_maybe_space(c) for c in text[start:stop]):
                break  # whitespace: the regex read the run up to a non-space not yet here
            count += 1
        return count
