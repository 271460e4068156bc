"""German: decimal comma and thousands dots ("1.000" is a thousand), 24-hour times with "Uhr",
dates day first with ordinals that follow the word before ("am vierten Dezember"), units with
the number agreeing in gender ("eine Kilowattstunde"), money, abbreviations (docs/TEXT.md)."""
from __future__ import annotations

from .rules import Language, Rules, Unit, si_units, to_24h, words

_MONTHS = ("Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August", "September", "Oktober",
           "November", "Dezember")
_DATIVE = frozenset({"am", "vom", "zum", "ab", "bis", "seit", "dem", "den", "im", "beim", "zur"})
_ARTICLE = frozenset({"der", "die", "das"})


def _u(one: str, other: str | None = None, gender: str = "n") -> Unit:
    return Unit((one, other or one), gender)


_UNITS = {
    **si_units({"W": _u("Watt"), "Wh": _u("Wattstunde", "Wattstunden", "f"), "m": _u("Meter", gender="m"),
                "g": _u("Gramm"), "Hz": _u("Hertz"), "V": _u("Volt"), "A": _u("Ampere"), "Pa": _u("Pascal"),
                "B": _u("Byte"), "l": _u("Liter", gender="m"), "L": _u("Liter", gender="m"),
                "s": _u("Sekunde", "Sekunden", "f"), "bar": _u("Bar")},
               {"k": "Kilo", "M": "Mega", "G": "Giga", "T": "Tera", "m": "Milli", "c": "Zenti", "µ": "Mikro",
                "μ": "Mikro", "h": "Hekto"}, lower=True),
    "°C": _u("Grad Celsius"), "°F": _u("Grad Fahrenheit"), "°": _u("Grad"), "%": _u("Prozent"),
    "km/h": _u("Kilometer pro Stunde", gender="m"), "m/s": _u("Meter pro Sekunde", gender="m"),
    "m²": _u("Quadratmeter", gender="m"), "m³": _u("Kubikmeter", gender="m"),
    "µg/m³": _u("Mikrogramm pro Kubikmeter"), "μg/m³": _u("Mikrogramm pro Kubikmeter"),
    "ppm": _u("Teil pro Million", "Teile pro Million"), "dB": _u("Dezibel"), "lx": _u("Lux"), "lm": _u("Lumen"),
    "min": _u("Minute", "Minuten", "f"), "h": _u("Stunde", "Stunden", "f"),
    "mm/h": _u("Millimeter pro Stunde", gender="m"), "Mbit/s": _u("Megabit pro Sekunde"),
}


def _agree(spoken: str, gender: str) -> str:
    """"eins" before a noun: "ein Grad", "eine Stunde" (also "hundertein")."""
    if spoken.endswith("eins"):
        return spoken[:-4] + ("eine" if gender == "f" else "ein")
    return spoken


def _year(year: int) -> str:
    return words(year, "de", to="year") if 1100 <= year <= 1999 else words(year, "de")


def _ending(ordinal: str, before: str) -> str:
    """"vierte" after "der", "vierten" after "am", else "vierter"."""
    if before in _DATIVE:
        return ordinal + "n"
    return ordinal if before in _ARTICLE else ordinal + "r"


def _time(hours: int, minutes: int, seconds: int | None, half: str) -> str:
    spoken = f"{_agree(words(to_24h(hours, half), 'de'), 'm')} Uhr"
    if minutes:
        spoken += " " + words(minutes, "de")
    if seconds:
        spoken += f" und {_agree(words(seconds, 'de'), 'f')} Sekunde{'n' if seconds != 1 else ''}"
    return spoken


def _date(day: int, month: int, year: int | None, before: str) -> str:
    spoken = f"{_ending(words(day, 'de', to='ordinal'), before)} {_MONTHS[month - 1]}"
    return f"{spoken} {_year(year)}" if year else spoken


LANGUAGE = Language(
    code="de", groups=".", decimal=",", point="Komma", dot="Punkt", minus="minus", plus="plus", to="bis",
    and_word="und", version="Version", units=_UNITS, months=_MONTHS, date_order="dmy", time=_time, date=_date,
    ordinal=lambda n, suffix, before: _ending(words(n, "de", to="ordinal"), before),
    ordinal_suffix=r"\.(?=\s[A-ZÄÖÜ])", plural=lambda value: 0 if value == 1 and "." not in str(value) else 1,
    agree=_agree,
    abbreviations={"z.B.": "zum Beispiel", "z. B.": "zum Beispiel", "bzw.": "beziehungsweise", "ca.": "circa",
                   "usw.": "und so weiter", "d.h.": "das heißt", "d. h.": "das heißt", "vs.": "versus",
                   "inkl.": "inklusive", "evtl.": "eventuell", "ggf.": "gegebenenfalls", "Dr.": "Doktor",
                   "Str.": "Straße", "u.a.": "unter anderem", "u. a.": "unter anderem", "max.": "maximal",
                   "etc.": "et cetera"},
    number_words={"Nr.": "Nummer", "No.": "Nummer", "#": "Nummer"},
    fractions={2: ("halb", "halbe"), 3: ("Drittel", "Drittel"), 4: ("Viertel", "Viertel")},
    date_words=("am", "vom", "bis", "zum", "ab", "seit"),
    feminine=frozenset({"stunde", "minute", "sekunde", "lampe", "leuchte", "person", "tür", "steckdose",
                        "woche", "nachricht", "erinnerung", "aufgabe", "szene", "sirene"}),
    year=_year, time_suffix="Uhr",
    between=("zwischen",),
    counted_before=frozenset({"und", "oder", "bis", "von", "mal", "plus", "minus"}),
)
_RULES = Rules(LANGUAGE)


def normalize(sentence: str) -> str:
    """The spoken form of one German sentence."""
    return _RULES.normalize(sentence)
