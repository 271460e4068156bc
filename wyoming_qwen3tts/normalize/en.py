"""English: numbers, times (24 h and 12 h), dates (month first), units, money, abbreviations
(docs/TEXT.md). Words from num2words; the tables below are English's."""
from __future__ import annotations

from .rules import Groups, Language, Rules, Unit, si_units, words

_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")


def _u(one: str, other: str | None = None) -> Unit:
    return Unit((one, other or one + "s"))


_UNITS = {
    **si_units({"W": _u("watt"), "Wh": _u("watt hour"), "m": _u("meter"), "g": _u("gram"), "Hz": _u("hertz", "hertz"),
                "V": _u("volt"), "A": _u("amp"), "Pa": _u("pascal"), "B": _u("byte"), "l": _u("liter"),
                "L": _u("liter"), "s": _u("second"), "bar": _u("bar")},
               {"k": "kilo", "M": "mega", "G": "giga", "T": "tera", "m": "milli", "c": "centi", "µ": "micro",
                "μ": "micro", "h": "hecto"}),
    "°C": _u("degree Celsius", "degrees Celsius"), "°F": _u("degree Fahrenheit", "degrees Fahrenheit"),
    "°": _u("degree"), "%": _u("percent", "percent"), "km/h": _u("kilometer per hour", "kilometers per hour"),
    "mph": _u("mile per hour", "miles per hour"), "m/s": _u("meter per second", "meters per second"),
    "m²": _u("square meter"), "m³": _u("cubic meter"), "mi": _u("mile"), "ft": _u("foot", "feet"),
    "lb": _u("pound"), "lbs": _u("pound"), "oz": _u("ounce"), "gal": _u("gallon"), "inHg": _u("inch of mercury",
    "inches of mercury"), "µg/m³": _u("microgram per cubic meter", "micrograms per cubic meter"),
    "μg/m³": _u("microgram per cubic meter", "micrograms per cubic meter"), "ppm": _u("part per million",
    "parts per million"), "dB": _u("decibel"), "lx": _u("lux", "lux"), "lm": _u("lumen"), "min": _u("minute"),
    "h": _u("hour"), "mm/h": _u("millimeter per hour", "millimeters per hour"), "Mbit/s": _u("megabit per second",
    "megabits per second"), "Mbps": _u("megabit per second", "megabits per second"),
}


def _year(year: int) -> str:
    return words(year, "en", to="year") if 1100 <= year <= 2099 else words(year, "en")


def _decade(m: Groups) -> str | None:
    """"1990s" → "nineteen nineties"."""
    spoken = _year(int(m.group(1)))
    return spoken[:-1] + "ies" if spoken.endswith("y") else spoken + "s"


def _time(hours: int, minutes: int, seconds: int | None, half: str) -> str:
    spoken = words(hours, "en")
    if minutes:
        spoken += " oh " + words(minutes, "en") if minutes < 10 else " " + words(minutes, "en")
    elif not half:
        spoken += " o'clock"
    if seconds:
        spoken += f" and {words(seconds, 'en')} second{'s' if seconds != 1 else ''}"
    return spoken + (" A M" if half == "am" else " P M" if half == "pm" else "")


def _date(day: int, month: int, year: int | None, before: str) -> str:
    spoken = f"{_MONTHS[month - 1]} {words(day, 'en', to='ordinal')}"
    return f"{spoken}, {_year(year)}" if year else spoken


LANGUAGE = Language(
    code="en", groups=",", decimal=".", point="point", dot="dot", minus="minus", plus="plus", to="to",
    and_word="and", version="version", units=_UNITS, months=_MONTHS, date_order="mdy", time=_time, date=_date,
    ordinal=lambda n, suffix, before: words(n, "en", to="ordinal"), ordinal_suffix="st|nd|rd|th",
    plural=lambda value: 0 if value == 1 and "." not in str(value) else 1, agree=lambda spoken, gender: spoken,
    abbreviations={"e.g.": "for example", "i.e.": "that is", "etc.": "et cetera", "vs.": "versus",
                   "approx.": "approximately", "Dr.": "Doctor", "Mr.": "Mister", "Mrs.": "Missus", "Jr.": "Junior",
                   "ca.": "circa"},
    number_words={"No.": "number", "no.": "number", "Nr.": "number", "#": "number"},
    fractions={2: ("half", "halves"), 3: ("third", "thirds"), 4: ("quarter", "quarters")},
    date_words=("on", "by", "until", "since", "from", "before", "after"), year=_year,
    extra=((r"(?<![\w.])(1[1-9]\d0|20[0-9]0)s(?!\w)", _decade),),
    between=("between",),
)
_RULES = Rules(LANGUAGE)


def normalize(sentence: str) -> str:
    """The spoken form of one English sentence."""
    return _RULES.normalize(sentence)
