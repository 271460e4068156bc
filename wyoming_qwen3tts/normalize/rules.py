"""The rules the European languages share: one pass of one regular expression over a sentence,
whose alternatives (phone numbers, IP addresses, versions, dates, times, money, numbers with
units, ordinals, fractions, ranges, abbreviations, plain numbers) are tried in that order at each
position; each match is replaced by words from the language's `Language` tables, with num2words
for the numbers. What no alternative matches, or a match the language cannot read for sure, is
left as written.

Every alternative keeps the streaming contract of `normalize/__init__.py`: it starts at the
token of its first digit or symbol, reaches at most two tokens past a token holding one, and puts
in no digit, symbol or hyphen (num2words' hyphens become spaces). docs/TEXT.md lists the rules.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation

from num2words import CONVERTER_CLASSES, num2words

log = logging.getLogger(__name__)

# a Spanish or Portuguese phone number, nine digits in threes ("912 345 678"), not 912 million
NINE_DIGIT_PHONE = r"(?<![\w.,+-])[2-9]\d{2} \d{3} \d{3}(?![\w.,]?\d)"
MAX_DIGITS = 15  # a longer number (an ID, a serial) is left as written: no one says it as a number
CURRENCY_SYMBOLS = {"$": "USD", "€": "EUR", "£": "GBP", "₽": "RUB", "USD": "USD", "EUR": "EUR", "GBP": "GBP",
                    "RUB": "RUB", "CHF": "CHF"}


@dataclass(frozen=True)
class Unit:
    """A unit's spoken forms (by the language's plural rule: one, other; Russian one, few, many)
    and the grammatical gender a number before it agrees with ("m", "f" or "n")."""

    forms: tuple[str, ...]
    gender: str = "m"


@dataclass(frozen=True)
class Language:
    """What a language module gives the shared rules."""

    code: str
    groups: str  # thousands separators between groups of three digits ("," or "." or ". ")
    decimal: str  # the decimal separator written in the language ("." or ",")
    point: str  # the word for the decimal separator
    dot: str  # the word for the dots of versions and IP addresses
    minus: str
    plus: str
    to: str  # a range: "five to ten"
    and_word: str  # "&" between words
    version: str
    units: Mapping[str, Unit]
    months: tuple[str, ...]  # January..December as a date reads them
    date_order: str  # "dmy" or "mdy" for 4/12/2026
    time: Callable[[int, int, int | None, str], str]  # hours, minutes, seconds, "am"/"pm"/""
    date: Callable[[int, int, int | None, str], str]  # day, month, year, the word before
    ordinal: Callable[[int, str, str], str]  # number, the suffix as written, the word before
    ordinal_suffix: str  # regex of the suffixes after a number that make it an ordinal
    plural: Callable[[Decimal], int]  # index into Unit.forms
    agree: Callable[[str, str], str]  # a cardinal's words made to agree with a gender
    abbreviations: Mapping[str, str] = field(default_factory=dict)  # always
    number_words: Mapping[str, str] = field(default_factory=dict)  # only before a number ("No." 5)
    fractions: Mapping[int, tuple[str, str]] = field(default_factory=dict)  # denominator: one, other
    decimals_as_number: bool = False  # "12,75": "douze virgule soixante-quinze" (fr es it pt), not digit by digit
    fraction_gender: str = "m"  # the numerator agrees with it: "одна четвёртая", "две третьих"
    date_words: tuple[str, ...] = ()  # words after which "3/4" is a date
    between: tuple[str, ...] = ()  # words after which a range takes and_word: "between 20 and 25"
    phone_groups: bool = False  # phone numbers read group by group as numbers ("+33 1 23": French, Russian)
    phones: tuple[str, ...] = ()  # the language's own phone number patterns (before its grouped numbers)
    of_millions: Callable[[str], str] | None = None  # a noun after whole millions: "de euros" (es, fr, it, pt)
    year: Callable[[int], str] | None = None  # a four-digit year on its own (en, de)
    time_suffix: str = ""  # regex of a word after a time that the reading already says ("Uhr")
    feminine: frozenset[str] = frozenset()  # nouns (lower case) a number before agrees with as feminine
    counted_before: frozenset[str] = frozenset()  # words after a number that are no noun it agrees with ("y")
    feminine_after: frozenset[str] = frozenset()  # words after which a number is feminine ("la 1": the hour)
    extra: tuple[tuple[str, Callable[[Groups], str | None]], ...] = ()  # language-only patterns


def to_24h(hours: int, half: str) -> int:
    """2 with "pm" → 14; 12 with "am" → 0 (for the languages that say the time on a 24 h clock)."""
    if half == "pm" and hours < 12:
        return hours + 12
    return 0 if half == "am" and hours == 12 else hours


def words(value: int | Decimal, lang: str, **kwargs: object) -> str:
    """num2words, with its hyphens as spaces (a hyphen would count as a symbol again)."""
    return str(num2words(value, lang=lang, **kwargs)).replace("-", " ")


# SI units written with a prefix, and the prefixes each takes (docs/TEXT.md)
SI_PREFIXED = {"W": "kMm", "Wh": "kM", "m": "kcm", "g": "kmµμ", "Hz": "kMG", "V": "mk", "A": "m", "Pa": "hk",
               "B": "kMGT", "l": "mc", "L": "mc", "s": "m", "bar": "m"}
SI_PREFIXES = "kMGTmcµμh"


def si_units(bases: Mapping[str, Unit], prefixes: Mapping[str, str], lower: bool = False) -> dict[str, Unit]:
    """`bases` and their prefixed forms ("W" → "kW", "MW", "mW"): `prefixes` maps each prefix
    letter of SI_PREFIXES to its word; `lower`: the base's first letter is lowered after a
    prefix (German "Kilowatt")."""
    units = dict(bases)
    for symbol, unit in bases.items():
        for prefix in SI_PREFIXED.get(symbol, ""):
            forms = tuple(prefixes[prefix] + (f[0].lower() + f[1:] if lower else f) for f in unit.forms)
            units[prefix + symbol] = Unit(forms, unit.gender)
    return units


# --- numbers ---------------------------------------------------------------------------------

_SIGN = r"(?:(?<![\w)])[-−+](?=\d))?"
_AM_PM = r"(?:\.\s?[Mm]\.|[Mm])(?!\w)"  # after the A or P of "AM", "p.m."


def number_pattern(lang: Language) -> str:
    """A number as the language writes it: grouped thousands, a decimal part, a sign."""
    group = re.escape(lang.groups)
    grouped = rf"\d{{1,3}}(?:[{group}]\d{{3}})+(?:{re.escape(lang.decimal)}\d+)?" if lang.groups else r"(?!)"
    return rf"{_SIGN}(?:{grouped}|\d+[.,]\d+|\d+)(?![.,]?\d)"


def parse(text: str, lang: Language) -> Decimal | None:
    """The value of a number matched by number_pattern; None if it is not plainly one."""
    negative = text[:1] in "-−"
    text = text.lstrip("-−+")
    if sum(ch.isdigit() for ch in text.partition(lang.decimal)[0]) > MAX_DIGITS:
        return None
    grouped = rf"\d{{1,3}}(?:[{re.escape(lang.groups)}]\d{{3}})+(?:{re.escape(lang.decimal)}\d+)?"
    if lang.groups and re.fullmatch(grouped, text):
        whole, _, frac = text.partition(lang.decimal)
        body = re.sub(r"\D", "", whole) + ("." + frac if frac else "")
    else:
        body = text.replace(",", ".")
    try:
        value = Decimal(body)
    except InvalidOperation:
        return None
    return -value if negative else value


def cardinal(value: Decimal, lang: Language, gender: str | None = None) -> str:
    """A number in words: "minus twenty one point five" (the decimals digit by digit, as num2words
    reads them; Russian as num2words' fractions, "двадцать одна целая пять десятых")."""
    sign = lang.minus + " " if value < 0 else ""
    value = abs(value)
    if value == value.to_integral_value() and "." not in str(value):
        spoken = words(int(value), lang.code)
        return sign + (lang.agree(spoken, gender) if gender else spoken)
    if lang.code == "ru":
        return sign + words(value, "ru")
    whole, _, frac = str(value).partition(".")
    rest = frac.lstrip("0")
    if lang.decimals_as_number and len(frac) <= 2 and rest:  # "zéro cinq", "soixante quinze", "cinquante"
        spoken = " ".join([words(0, lang.code)] * (len(frac) - len(rest)) + [words(int(rest), lang.code)])
    else:
        spoken = " ".join(words(int(d), lang.code) for d in frac)
    return f"{sign}{words(int(whole), lang.code)} {lang.point} {spoken}"


def digits(text: str, lang: Language, grouped: bool = False) -> str:
    """Digit by digit (phone numbers, codes with a leading zero); groups apart by a comma.
    `grouped`: a group of up to three digits is read as a number, its leading zeros each as
    zero ("01 23" → "zéro un, vingt trois": how French and Russian say phone numbers)."""
    spoken = []
    for group in (g for g in re.split(r"[^\d+]+", text) if g):
        sign, bare = (lang.plus + " ", group[1:]) if group.startswith("+") else ("", group)
        if grouped and bare and len(bare) <= 3:
            rest = bare.lstrip("0")
            said = [words(0, lang.code)] * (len(bare) - len(rest)) + ([words(int(rest), lang.code)] if rest else [])
        else:
            said = [words(int(ch), lang.code) for ch in bare]
        spoken.append(sign + " ".join(said))
    return ", ".join(spoken)


def with_unit(value: Decimal, unit: Unit, lang: Language) -> str:
    form = unit.forms[min(lang.plural(abs(value)), len(unit.forms) - 1)]  # "minus one degree"
    return _counted(value, cardinal(value, lang, unit.gender), form, lang)


def _counted(value: Decimal, number: str, noun: str, lang: Language) -> str:
    """A number and its noun: "un millón de euros" where the language joins whole millions so."""
    if lang.of_millions and value and value == value.to_integral_value() and not value % 1_000_000:
        return f"{number} {lang.of_millions(noun)}"
    return f"{number} {noun}"


def currency(value: Decimal, code: str, lang: Language) -> str | None:
    converter = CONVERTER_CLASSES[lang.code]
    forms = getattr(converter, "CURRENCY_FORMS", {}).get(code)
    if forms is None:
        return None
    if value != value.to_integral_value():
        if value.as_tuple().exponent != -2:  # not a whole number of cents: unsure
            return None
        if abs(value) < 1:
            return _cents_only(value, code, lang)
        return words(value, lang.code, to="currency", currency=code)
    if "." in str(value) and value.as_tuple().exponent != -2:
        return None
    value = value.to_integral_value()  # "1,00 €": one euro (num2words would add "zero cents")
    noun = converter.pluralize(int(abs(value)), forms[0])
    return _counted(value, cardinal(value, lang, "m"), noun, lang)


def _cents_only(value: Decimal, code: str, lang: Language) -> str:
    """"0,32 €" as "zweiunddreißig Cent", not "null Euro und zweiunddreißig Cent": num2words'
    reading without the words that every amount under one shares (the zero amount and the
    joining word: what the readings of one and two cents have in common), so the cents keep
    num2words' agreement ("veintiún céntimos")."""
    one, two = (words(Decimal(v), lang.code, to="currency", currency=code).split() for v in ("0.01", "0.02"))
    common = next(i for i, (a, b) in enumerate(zip(one, two)) if a != b)  # "zero euros e" | "um", "dois"
    said = words(abs(value), lang.code, to="currency", currency=code).split()
    return (lang.minus + " " if value < 0 else "") + " ".join(said[common:])


# --- the pattern -----------------------------------------------------------------------------


class Rules:
    """The compiled pattern of one language and the readings of its matches."""

    def __init__(self, lang: Language) -> None:
        self.lang = lang
        num = number_pattern(lang)
        units = "|".join(re.escape(u) for u in sorted(lang.units, key=len, reverse=True))
        # a unit of one ASCII letter only after a space: "5 s", but "1990s", "3D" are not units
        glued = "|".join(re.escape(u) for u in sorted(lang.units, key=len, reverse=True)
                         if not (len(u) == 1 and u.isascii() and u.isalpha()))
        money = "|".join(re.escape(s) for s in sorted(CURRENCY_SYMBOLS, key=len, reverse=True))
        months = "|".join(lang.months)
        abbreviations = "|".join(re.escape(a) for a in sorted(lang.abbreviations, key=len, reverse=True)) or "(?!)"
        number_words = "|".join(re.escape(a) for a in sorted(lang.number_words, key=len, reverse=True)) or "(?!)"
        end = r"(?![\w])"
        # "1.000.000" is a million, not a version, where the language groups with "." (read by the
        # money, unit and number rules after it: "eine Million Euro")
        dotted = r"(?!\d{1,3}(?:\.\d{3})+(?!\.?\d))" if "." in lang.groups else ""
        suffix = rf"(?:\s(?:{lang.time_suffix}))?" if lang.time_suffix else ""  # "14:30 Uhr"
        alternatives: list[tuple[str, Callable[[Groups], str | None]]] = list(lang.extra) + [
            (r"(?<![\w+])\+\d{1,3}(?:[ ./-]?\(?\d{1,5}\)?){2,5}(?![\w.,]?\d)", self._phone),
            *((p, self._phone) for p in lang.phones),
            (r"(?<![\w(])\(?0\d{2,4}\)?[ /-]\d{3,}(?:[ -]\d{2,})*" + end, self._phone),
            (r"(?<![\w(])\(?\d{3}\)?[ -]\d{3}-\d{4}" + end, self._phone),
            (r"(?<![\w.])(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?![.\d])", self._ip),
            (r"(?<![\w.-])(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{1,2}):(\d{2})(?::(\d{2}))?)?" + end, self._iso),
            # after the ISO date: "8 800 555-35-35" (Russian), "01 23 45 67 89" (French)
            (r"(?<![\w.,-])\d{1,4}(?: \d{2,4})*(?:-\d{2,4}){2,}(?![\w.,-]?\d)", self._phone),
            (r"(?<![\w.,-])0\d(?:[ .-]\d{2}){4}(?![\w.,-]?\d)", self._phone),
            (r"(?<![\w.])(\d{1,2})(\.)(\d{1,2})\.(\d{4}|\d{2})" + end, self._numeric_date),
            (r"(?<![\w./])(\d{1,2})(/)(\d{1,2})/(\d{4}|\d{2})" + end, self._numeric_date),
            (r"(?<![\w.])(\d{1,2})\.(\d{1,2})\.(?=\s|$|[,;!?)])", self._short_date),
            (rf"(?<![\w.]){dotted}([vV]\d+(?:\.\d+)+|\d+(?:\.\d+){{2,}})(?![.]?\d)" + end, self._version),
            (rf"(?<![\w:.])(\d{{1,2}}):([0-5]\d)(?::([0-5]\d))?(?:\s?([AaPp]){_AM_PM})?{suffix}{end}", self._time),
            (rf"(?<![\w:.])(\d{{1,2}})\s?([AaPp]){_AM_PM}", self._hour_ampm),
            (rf"(?<![\w.])(\d{{1,2}})[.°º]?\s(?=(?:de\s)?(?:{months})\b)(?:(de)\s)?({months})\b", self._day_month),
            (rf"\b({months})\s(\d{{1,2}})(?:{lang.ordinal_suffix})?{end}", self._month_day),
            (rf"(?:({money})\s?({num})|({num})\s?({money})){end}", self._money),
            (rf"({num})\s?[-–]\s?({num})(?:\s?({units}){end}|(?![\w/]))", self._range),
            (rf"({num})(?:\s({units})|({glued})){end}", self._unit),
            (rf"(?<![\w.])(\d+)({lang.ordinal_suffix}){end}", self._ordinal),
            (r"(?<![\w./])(\d{1,2})/(\d{1,2})(?![\w/]|[.,]\d)", self._slash),
            (rf"(?<![\w.])({number_words})\s?(?=\d)", self._number_word),
            (rf"(?<![\w.])({abbreviations})(?=\s|$|[,;!?])", self._abbreviation),
            (rf"(?<![\w.,])({num}){end}", self._number),
            (r"(?<=\s)&(?=\s)", lambda m: self.lang.and_word),
        ]
        self._handlers = [handler for _, handler in alternatives]
        self._pattern = re.compile("|".join(f"({p})" for p, _ in alternatives))
        self._group_of = []  # the outer group index of each alternative
        index = 1
        for p, _ in alternatives:
            self._group_of.append(index)
            index += 1 + re.compile(p).groups

    def normalize(self, sentence: str) -> str:
        return self._pattern.sub(self._replace, sentence)

    def _replace(self, match: re.Match[str]) -> str:
        """The reading of whichever alternative matched (the first group that took part)."""
        for k, start in enumerate(self._group_of):
            if match.group(start) is not None:
                try:
                    spoken = self._handlers[k](Groups(match, start))
                except (ArithmeticError, ValueError, LookupError, TypeError, NotImplementedError):
                    # num2words refusing a number: not a reason to fail the request
                    log.debug("left as written: %r", match.group(0), exc_info=True)
                    spoken = None
                return match.group(0) if spoken is None else spoken
        return match.group(0)

    # --- readings (None: not sure, left as written) ---

    def _phone(self, m: Groups) -> str | None:
        return digits(m.group(0), self.lang, self.lang.phone_groups)

    def _ip(self, m: Groups) -> str | None:
        parts = [int(m.group(i)) for i in range(1, 5)]
        if any(p > 255 for p in parts):
            return None
        return f" {self.lang.dot} ".join(words(p, self.lang.code) for p in parts)

    def _version(self, m: Groups) -> str | None:
        text = m.group(1)
        lang = self.lang
        prefix = ""
        if text[0] in "vV":
            prefix, text = lang.version + " ", text[1:]
        parts = text.split(".")
        first = lang.year(int(parts[0])) if lang.year and len(parts[0]) == 4 else words(int(parts[0]), lang.code)
        rest = [words(int(p), lang.code) for p in parts[1:]]
        return prefix + f" {lang.dot} ".join([first, *rest])

    def _iso(self, m: Groups) -> str | None:
        year, month, day = int(m.group(1)), int(m.group(2)), int(m.group(3))
        if not (1 <= month <= 12 and 1 <= day <= 31):
            return None
        spoken = self.lang.date(day, month, year, self._before(m))
        if m.group(4) is not None:
            time = self.lang.time(int(m.group(4)), int(m.group(5)), _int(m.group(6)), "")
            spoken = f"{spoken}, {time}"
        return spoken

    def _numeric_date(self, m: Groups) -> str | None:
        """4.12.2026, 04/12/26 (day first, or month first where the language writes it so)."""
        a, b, year = int(m.group(1)), int(m.group(3)), int(m.group(4))
        day, month = (b, a) if m.group(2) == "/" and self.lang.date_order == "mdy" else (a, b)
        if not (1 <= day <= 31 and 1 <= month <= 12):
            return None
        return self.lang.date(day, month, year + 2000 if year < 100 else year, self._before(m))

    def _short_date(self, m: Groups) -> str | None:
        """4.12. (day and month, the German and Russian way)."""
        day, month = int(m.group(1)), int(m.group(2))
        if not (1 <= day <= 31 and 1 <= month <= 12):
            return None
        return self.lang.date(day, month, None, self._before(m))

    def _time(self, m: Groups) -> str | None:
        hours, minutes = int(m.group(1)), int(m.group(2))
        half = (m.group(4) or "").lower()
        if hours > (12 if half else 24) or (hours == 24 and minutes):
            return None
        return self.lang.time(hours, minutes, _int(m.group(3)), half + "m" if half else "")

    def _hour_ampm(self, m: Groups) -> str | None:
        hours = int(m.group(1))
        if not 1 <= hours <= 12:
            return None
        return self.lang.time(hours, 0, None, m.group(2).lower() + "m")

    def _day_month(self, m: Groups) -> str | None:
        day = int(m.group(1))
        month = self.lang.months.index(m.group(3)) + 1 if m.group(3) in self.lang.months else 0
        if not (1 <= day <= 31 and month):
            return None
        return self.lang.date(day, month, None, self._before(m))

    def _month_day(self, m: Groups) -> str | None:
        day = int(m.group(2))
        if not 1 <= day <= 31:
            return None
        return self.lang.date(day, self.lang.months.index(m.group(1)) + 1, None, self._before(m))

    def _money(self, m: Groups) -> str | None:
        symbol, amount = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
        value = parse(amount, self.lang)
        return None if value is None else currency(value, CURRENCY_SYMBOLS[symbol], self.lang)

    def _range(self, m: Groups) -> str | None:
        low, high = parse(m.group(1), self.lang), parse(m.group(2), self.lang)
        if low is None or high is None or not low < high or m.group(1)[:1] in "-−+" and m.group(2)[:1] not in "-−+":
            return None
        unit = self.lang.units.get(m.group(3) or "")
        to = self.lang.and_word if self._before(m) in self.lang.between else self.lang.to  # "between 20 and 25"
        if unit is None:
            return f"{cardinal(low, self.lang)} {to} {cardinal(high, self.lang)}"
        return f"{cardinal(low, self.lang, unit.gender)} {to} {with_unit(high, unit, self.lang)}"

    def _unit(self, m: Groups) -> str | None:
        value = parse(m.group(1), self.lang)
        unit = self.lang.units[m.group(2) or m.group(3)]
        return None if value is None else self._plus(m.group(1)) + with_unit(value, unit, self.lang)

    def _ordinal(self, m: Groups) -> str | None:
        return self.lang.ordinal(int(m.group(1)), m.group(2), self._before(m))

    def _slash(self, m: Groups) -> str | None:
        a, b = int(m.group(1)), int(m.group(2))
        before = self._before(m).lower()
        if before in self.lang.date_words:
            day, month = (b, a) if self.lang.date_order == "mdy" else (a, b)
            if 1 <= day <= 31 and 1 <= month <= 12:
                return self.lang.date(day, month, None, before)
            return None
        if 0 < a < b and b in self.lang.fractions:
            one, other = self.lang.fractions[b]
            return f"{cardinal(Decimal(a), self.lang, self.lang.fraction_gender)} {one if a == 1 else other}"
        return None

    def _number_word(self, m: Groups) -> str | None:
        return self.lang.number_words[m.group(1)] + " "

    def _abbreviation(self, m: Groups) -> str | None:
        return self.lang.abbreviations[m.group(1)]

    def _number(self, m: Groups) -> str | None:
        # before a word, a number agrees with it: feminine if the language lists it, else as
        # before a masculine noun ("ein Licht", "un jour"); at the end it is counted ("eins")
        # ("eins und zwei", "veintiuno de la mañana"); after "la"/"são" it is an hour ("la una")
        noun = re.match(r"\s+([^\W\d]+)", m.string[m.end():])
        word = None if noun is None else noun.group(1).lower()
        if self._before(m) in self.lang.feminine_after:
            gender: str | None = "f"
        elif word is None or word in self.lang.counted_before:
            gender = None
        else:
            gender = "f" if word in self.lang.feminine else "m"
        spoken = self._number_text(m.group(1), gender)
        if spoken and gender and word and self.lang.of_millions:  # "un millón de personas"
            joined = _counted(parse(m.group(1), self.lang) or Decimal(0), spoken, word, self.lang)
            return joined[: -len(word)].rstrip()
        return spoken

    def _number_text(self, text: str, gender: str | None = None) -> str | None:
        bare = text.lstrip("-−+")
        if len(bare) >= 3 and bare[0] == "0" and bare.isdigit():
            return digits(text, self.lang)  # "0123": a code or a number to dial
        value = parse(text, self.lang)
        if value is None:
            return None
        if self.lang.year and bare.isdigit() and len(bare) == 4 and text == bare:
            return self.lang.year(int(bare))
        return self._plus(text) + cardinal(value, self.lang, gender)

    def _plus(self, number: str) -> str:
        """"plus " for a number written with its "+" ("+5 °C")."""
        return self.lang.plus + " " if number.startswith("+") else ""

    @staticmethod
    def _before(m: Groups) -> str:
        """The word before the match (looked at, never rewritten)."""
        head = m.string[: m.start()].rstrip()
        return head.rsplit(None, 1)[-1].lower() if head else ""


class Groups:
    """A match of one alternative of the combined pattern, its groups numbered from 1 as in its
    own pattern (group(0): what it matched)."""

    def __init__(self, match: re.Match[str], start: int) -> None:
        self._match, self._start = match, start
        self.string = match.string
        self.re = match.re

    def group(self, index: int = 0) -> str:
        return self._match.group(self._start + index)

    def start(self) -> int:
        return self._match.start(self._start)

    def end(self) -> int:
        return self._match.end(self._start)


def _int(text: str | None) -> int | None:
    return int(text) if text else None
