"""The written forms Chinese, Japanese and Korean share, found in one place (docs/TEXT-cjk.md).

All three write Arabic digits with a comma for thousands and a point for decimals, 24-hour clocks, year-first
dates and the same symbols (%, °C, ¥, km/h); they only *say* them differently. This module finds those forms and
hands each to a language's `Speaker`; zh.py, ja.py and ko.py say them. Every rule returns None when it is unsure,
which leaves the text as written for the model.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# A written amount: 1,234.5 or 1234.5 (CJK text never uses the decimal comma). At most 15 digits on either side
# of the point, within what cn2an and num2words say; a longer run of digits is left as written.
NUMBER = r"(?:\d{1,3}(?:,\d{3}){1,4}|\d{1,15})(?:\.\d{1,15})?"
# A minus sign, unless it joins two words or numbers (B-2, 3-5).
SIGN = r"(?:(?<![A-Za-z0-9])[-−])?"
# Nothing ASCII glued on the left: "PM2.5", "RTX4090", "A-1" and "v2" stay as written.
START = r"(?<![A-Za-z0-9.,/:-])"
END = r"(?![0-9])"
RANGE = r"\s?[-~〜～–]\s?"

_FULL_WIDTH = str.maketrans("０１２３４５６７８９％＄＋", "0123456789%$+")
_MARKS = {"am": "am", "上午": "am", "午前": "am", "오전": "am", "pm": "pm", "下午": "pm", "午後": "pm", "오후": "pm"}
_MARK = r"(?:[AaPp]\.?[Mm]\.?)"  # after the time: said before it, in the language's words
# before the time (下午2:30, 오후 2:30) the language's own word stays where it is; the rule only looks back at it
_HALF_BEFORE = "上午|下午|午前|午後|오전|오후"
_MARK_BEFORE = rf"(?:(?<=(?P<before>{_HALF_BEFORE}))|(?<=(?P<spaced>{_HALF_BEFORE})\s))"
CURRENCY_SIGNS = {"$": "USD", "€": "EUR", "£": "GBP", "₩": "KRW", "元": "CNY", "円": "JPY", "원": "KRW"}
_CODES = ("USD", "EUR", "GBP", "CNY", "RMB", "JPY", "KRW")
_CURRENCY_AFTER = r"(?P<cur>[$€£¥￥₩元円원]|" + "|".join(_CODES) + r")(?![A-Za-z])"

Render = Callable[[re.Match[str]], "str | None"]


@dataclass(frozen=True)
class Rule:
    """One written form: where it is, and how the language says it (None: leave it)."""
    pattern: re.Pattern[str]
    render: Render

    def apply(self, text: str) -> str:
        def one(match: re.Match[str]) -> str:
            said = self.render(match)
            return match.group(0) if said is None else said
        return self.pattern.sub(one, text)


def rule(pattern: str, render: Render) -> Rule:
    return Rule(re.compile(pattern), render)


def plain(written: str) -> str:
    """The number without thousands separators or a Unicode minus."""
    return written.replace(",", "").replace("−", "-")


def money_amount(written: str) -> str:
    """Prices drop zero cents: 12.50 is said like 12.5, 12.00 like 12."""
    value = plain(written)
    if "." in value:
        value = value.rstrip("0").rstrip(".")
    return value


class Speaker(ABC):
    """How one language says the shared forms. Subclasses fill in the words; the rules are shared."""

    point: str  # between the parts of a version number or an IP address
    to: str  # between the two ends of a range
    sign_for_yen: str  # what a bare ¥ means in this language's text
    plus: str  # a phone number's leading +
    label: str  # "No. 5": template with {} for the number
    versus: str  # "vs."
    halves: dict[str, str]  # "am"/"pm" -> the word said before the time
    twelve_is_zero = False  # 12 AM/PM said as hour 0 after the half word (Japanese 午後零時, docs/TEXT-cjk.md)
    noon = ""  # what "12:00 PM" is said as, if not by the clock (Japanese 正午)
    degree_word: str  # 度 / 도 written after a number: a temperature in the sentences Home Assistant builds
    units: dict[str, str]  # symbol -> template with {} for the spoken number
    currencies: dict[str, str]  # ISO code -> template with {} for the spoken amount
    cents: dict[str, str] = {}  # ISO code -> template for hundredths said as such (十二ドル五十セント)
    slash_dates: bool  # whether 12/4 is a date (Japanese, Korean) or always a fraction (Chinese)
    percent_words: str  # template with {} for the number

    @abstractmethod
    def number(self, written: str) -> str:
        """A signed integer or decimal, thousands separators removed."""

    @abstractmethod
    def digits(self, written: str) -> str:
        """Digit by digit, as phone numbers are said."""

    @abstractmethod
    def clock(self, hour: int, minute: int, second: int | None) -> str:
        """A time of day as written (its hour 0-24, or 1-12 beside a morning or afternoon word)."""

    def half_word(self, hour: int, half: str) -> str:
        """What 'AM' or 'PM' after a time becomes, said before it."""
        return self.halves[half]

    @abstractmethod
    def date(self, year: str | None, month: int | None, day: int | None) -> str:
        """A calendar date or any of its parts."""

    @abstractmethod
    def fraction(self, numerator: int, denominator: int) -> str: ...

    def slash(self, first: str, second: str) -> str:
        """'3/4' without a year: a date where the language writes dates so and it can be one, else a fraction."""
        a, b = int(first), int(second)
        if self.slash_dates and 1 <= a <= 12 and 1 <= b <= 31:
            return self.date(None, a, b)
        return self.fraction(a, b)

    def percent(self, written: str) -> str:
        return self.percent_words.format(self.number(written))

    @abstractmethod
    def degrees(self, written: str, scale: str) -> str:
        """A temperature; scale is 'C', 'F' or '' (a bare degree sign or word)."""

    def version_part(self, part: str) -> str:
        """A part of a version number: a count unless it has a leading zero or is long (2024)."""
        return self.digits(part) if len(part) > 2 or (len(part) > 1 and part[0] == "0") else self.number(part)

    def ip_part(self, part: str) -> str:
        """A part of an IP address: a number (Japanese 百九十二, Korean 백구십이)."""
        return self.number(part)

    def quantity(self, template: str, low: str | None, written: str) -> str:
        """A number with its unit; a range says both ends."""
        said = self.number(plain(written))
        if low is not None:
            said = self.number(plain(low)) + self.to + said
        return template.format(said)

    def money(self, written: str, code: str) -> str:
        """An amount in a currency; two decimals are cents where the language says them so."""
        code = "CNY" if code == "RMB" else code
        template, cents = self.currencies[code], self.cents.get(code)
        whole, _, fraction = plain(written).partition(".")
        if cents and len(fraction) == 2 and fraction != "00":
            return template.format(self.number(whole)) + cents.format(self.number(str(int(fraction))))
        return template.format(self.number(money_amount(written)))

    def cardinal(self, written: str) -> str | None:
        """A number with no unit: long digit strings and leading zeros are codes, said digit by digit."""
        value = plain(written)
        bare = value.lstrip("-")
        if "," not in written and "." not in bare and (len(bare) > 8 or (len(bare) > 1 and bare[0] == "0")):
            return self.digits(bare) if bare == value else None
        return self.number(value)


def _clock(speaker: Speaker, m: re.Match[str]) -> str | None:
    hour, minute = int(m["h"]), int(m["m"])
    second = int(m["s"]) if m["s"] else None
    mark = m["before"] or m["spaced"] or m["after"]
    half = _MARKS[mark.lower().replace(".", "")] if mark else None
    if minute > 59 or (second is not None and second > 59) or hour > (12 if half else 24):
        return None
    if speaker.noon and m["after"] and half == "pm" and (hour, minute, second) == (12, 0, None):
        return speaker.noon
    said = speaker.clock(0 if half and hour == 12 and speaker.twelve_is_zero else hour, minute, second)
    return speaker.half_word(hour, half) + said if m["after"] and half else said


def _date(speaker: Speaker, year: str | None, month: str | None, day: str | None) -> str | None:
    if month is not None and not 1 <= int(month) <= 12:
        return None
    if day is not None and not 1 <= int(day) <= 31:
        return None
    return speaker.date(year, int(month) if month else None, int(day) if day else None)


def _timestamp(speaker: Speaker, m: re.Match[str]) -> str | None:
    day, hour, minute = _date(speaker, m["y"], m["mo"], m["d"]), int(m["h"]), int(m["m"])
    if day is None or hour > 24 or minute > 59:
        return None
    return day + " " + speaker.clock(hour, minute, None)


def _phone(speaker: Speaker, m: re.Match[str], pause: str) -> str:
    groups = re.split(r"[- ]", m["digits"])
    return speaker.plus * bool(m["plus"]) + pause.join(speaker.digits(g) for g in groups)


def _quantity(speaker: Speaker, m: re.Match[str]) -> str:
    return speaker.quantity(speaker.units[m["unit"]], m["low"], m["sign"] + m["n"])


def _units_pattern(units: Sequence[str]) -> str:
    """The unit symbols, longest first; A (amperes) only after a space, as 5A级 is a rating, not a current."""
    names = sorted(units, key=len, reverse=True)
    return "(?P<unit>" + "|".join(r"(?<=\s)A" if u == "A" else re.escape(u) for u in names) + r")(?![A-Za-z0-9²³])"


def shared_rules(speaker: Speaker, extra: Sequence[Rule], pause: str) -> list[Rule]:
    """The rules in the order they must run: codes and dates before clocks, units before bare numbers.

    `extra` (a language's own forms, such as counters) runs after the shared forms with units and before
    ranges and bare numbers. Each rule's output has no ASCII digits left, so a later rule cannot read it twice.
    """
    s = speaker
    n = rf"(?P<sign>{SIGN})(?P<n>{NUMBER})"
    low = rf"(?:(?P<low>{NUMBER}){RANGE})?"
    return [
        rule(r"(?<![A-Za-z])(?:No|NO|no)\.\s?(?P<n>\d{1,9})(?![0-9.])", lambda m: s.label.format(s.number(m["n"]))),
        rule(r"(?<![A-Za-z])[Vv][Ss]\.(?![A-Za-z])", lambda m: s.versus),
        # a timestamp state (2026-12-05T07:12:00+08:00): its date and clock time, the zone left out
        rule(rf"{START}(?P<y>\d{{4}})-(?P<mo>\d\d)-(?P<d>\d\d)[T ](?P<h>\d\d):(?P<m>\d\d)(?::(?P<s>\d\d))?"
             r"(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?(?![0-9])",
             lambda m: _timestamp(s, m)),
        # IP addresses and version numbers: parts joined by the language's "point"
        rule(rf"{START}(?P<v>\d{{1,3}}(?:\.\d{{1,3}}){{3}}){END}(?!\.\d)",
             lambda m: s.point.join(s.ip_part(p) for p in m["v"].split("."))),
        # ISO and year-first dates, before versions (2026.12.04) and phone numbers (2026-12-04)
        # (with points only as 2026.12.04: Home Assistant's versions, 2024.12.1, have no leading zeros)
        rule(rf"{START}(?P<y>\d{{4}})(?:(?P<sep>[-/])(?P<mo>\d{{1,2}})(?P=sep)(?P<d>\d{{1,2}})"
             rf"|\.(?P<mo2>\d\d)\.(?P<d2>\d\d)){END}(?!\.\d)",
             lambda m: _date(s, m["y"], m["mo"] or m["mo2"], m["d"] or m["d2"])),
        rule(rf"{START}(?P<y>\d{{4}})[-/](?P<mo>\d\d?){END}(?![-/.]\d)", lambda m: _date(s, m["y"], m["mo"], None)),
        rule(rf"(?<![A-Za-z0-9.])[vV]?(?P<v>\d+(?:\.\d+){{2,}}){END}(?!\.\d)",
             lambda m: m.group(0)[: -len(m["v"])] + s.point.join(s.version_part(p) for p in m["v"].split("."))),
        # phone numbers: groups of digits joined by hyphens or spaces, said digit by digit
        rule(rf"{START}(?P<plus>\+)?(?P<digits>\d{{2,4}}(?:[- ]\d{{2,4}}){{2,}}){END}",
             lambda m: _phone(s, m, pause)),
        rule(rf"{START}(?P<a>\d{{1,2}})/(?P<b>\d{{1,2}}){END}(?!/)", lambda m: s.slash(m["a"], m["b"])),
        rule(rf"{_MARK_BEFORE}?{START}(?P<h>\d{{1,2}}):(?P<m>\d{{2}})(?::(?P<s>\d{{2}}))?{END}"
             rf"(?:\s?(?P<after>{_MARK})(?![A-Za-z]))?",
             lambda m: _clock(s, m)),
        rule(rf"{START}{low}{n}\s?[%％]", lambda m: _percent(s, m)),
        rule(rf"{START}{low}{n}\s?(?:°\s?(?P<scale>[CF])(?![A-Za-z])|(?P<c>℃)|(?P<f>℉)|°)",
             lambda m: _degrees(s, m)),
        rule(rf"{START}{low}{n}\s?(?P<word>{s.degree_word})", lambda m: _degrees(s, m)),
        rule(rf"(?P<cur>[$€£¥￥₩])\s?{START}{n}(?:{RANGE}(?P<high>{NUMBER}))?{END}",
             lambda m: _money(s, m, m["cur"])),
        rule(rf"{START}{n}\s?{_CURRENCY_AFTER}", lambda m: _money(s, m, m["cur"])),
        rule(rf"{START}{low}{n}\s?{_units_pattern(list(s.units))}", lambda m: _quantity(s, m)),
        *extra,
        rule(rf"{START}(?P<a>{NUMBER}){RANGE}(?P<b>{NUMBER}){END}(?![.:])",
             lambda m: s.number(plain(m["a"])) + s.to + s.number(plain(m["b"]))),
        rule(rf"{START}(?P<w>{SIGN}{NUMBER}){END}(?![.,:]\d)", lambda m: s.cardinal(m["w"])),
    ]


def _percent(s: Speaker, m: re.Match[str]) -> str:
    said = s.percent(plain(m["sign"] + m["n"]))
    return (s.number(plain(m["low"])) + s.to + said) if m["low"] else said


def _degrees(s: Speaker, m: re.Match[str]) -> str:
    found = m.groupdict()
    scale = found.get("scale") or ("C" if found.get("c") else "F" if found.get("f") else "")
    said = s.degrees(plain(m["sign"] + m["n"]), scale)
    return (s.number(plain(m["low"])) + s.to + said) if m["low"] else said


def _money(s: Speaker, m: re.Match[str], sign: str) -> str:
    code = s.sign_for_yen if sign in "¥￥" else CURRENCY_SIGNS.get(sign, sign)
    if m.groupdict().get("high"):  # $1-5: one to five dollars
        return s.number(plain(m["sign"] + m["n"])) + s.to + s.money(m["high"], code)
    return s.money(m["sign"] + m["n"], code)


def full_width_to_ascii(text: str) -> str:
    """Full-width digits (common in Japanese) read like ASCII ones; ：and ． only between digits."""
    text = text.translate(_FULL_WIDTH)
    return re.sub(r"(?<=\d)[：．](?=\d)", lambda m: ":" if m.group(0) == "：" else ".", text)


def run(rules: Sequence[Rule], sentence: str) -> str:
    text = full_width_to_ascii(sentence)
    for r in rules:
        text = r.apply(text)
    return text
