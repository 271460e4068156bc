"""Italian: decimal comma ("virgola") and thousands dots, times "quattordici e trenta", dates
"quattro dicembre" ("primo" for the 1st), units agreeing in gender ("una settimana", "un'ora"), money, ordinals
"1º"/"1ª", abbreviations (docs/TEXT.md)."""
from __future__ import annotations

from .rules import Groups, Language, Rules, Unit, si_units, to_24h, words

_MONTHS = ("gennaio", "febbraio", "marzo", "aprile", "maggio", "giugno", "luglio", "agosto", "settembre", "ottobre",
           "novembre", "dicembre")


def _u(one: str, other: str | None = None, gender: str = "m") -> Unit:
    return Unit((one, other or one), gender)


_UNITS = {
    **si_units({"W": _u("watt"), "Wh": _u("wattora"), "m": _u("metro", "metri"), "g": _u("grammo", "grammi"),
                "Hz": _u("hertz"), "V": _u("volt"), "A": _u("ampere"), "Pa": _u("pascal"), "B": _u("byte"),
                "l": _u("litro", "litri"), "L": _u("litro", "litri"), "s": _u("secondo", "secondi"),
                "bar": _u("bar")},
               {"k": "chilo", "M": "mega", "G": "giga", "T": "tera", "m": "milli", "c": "centi", "µ": "micro",
                "μ": "micro", "h": "etto"}),
    "°C": _u("grado Celsius", "gradi Celsius"), "°F": _u("grado Fahrenheit", "gradi Fahrenheit"),
    "°": _u("grado", "gradi"), "%": _u("per cento"), "km/h": _u("chilometro orario", "chilometri orari"),
    "m/s": _u("metro al secondo", "metri al secondo"), "m²": _u("metro quadrato", "metri quadrati"),
    "m³": _u("metro cubo", "metri cubi"), "µg/m³": _u("microgrammo per metro cubo", "microgrammi per metro cubo"),
    "μg/m³": _u("microgrammo per metro cubo", "microgrammi per metro cubo"),
    "ppm": _u("parte per milione", "parti per milione", "f"), "dB": _u("decibel"), "lx": _u("lux"),
    "lm": _u("lumen"), "min": _u("minuto", "minuti"), "h": _u("ora", "ore", "f"),
    "mm/h": _u("millimetro all'ora", "millimetri all'ora"), "Mbit/s": _u("megabit al secondo"),
}


def _agree(spoken: str, gender: str) -> str:
    if spoken == "uno":
        return "una" if gender == "f" else "un"
    return spoken


def _one_hour(m: Groups) -> str | None:
    """"1 ora", "1 h": "un'ora", as Italian elides "una" before a vowel (docs/TEXT.md)."""
    return "un'ora"


def _time(hours: int, minutes: int, seconds: int | None, half: str) -> str:
    spoken = _agree(words(to_24h(hours, half), "it"), "f")
    if minutes:
        spoken += " e " + words(minutes, "it")
    if seconds:
        spoken += f" e {words(seconds, 'it')} second{'i' if seconds != 1 else 'o'}"
    return spoken


def _date(day: int, month: int, year: int | None, before: str) -> str:
    spoken = f"{'primo' if day == 1 else words(day, 'it')} {_MONTHS[month - 1]}"
    return f"{spoken} {words(year, 'it')}" if year else spoken


def _ordinal(number: int, suffix: str, before: str) -> str:
    spoken = words(number, "it", to="ordinal")
    return spoken[:-1] + "a" if suffix.endswith("ª") and spoken.endswith("o") else spoken


LANGUAGE = Language(
    code="it", groups=".", decimal=",", point="virgola", dot="punto", minus="meno", plus="più", to="a",
    and_word="e", version="versione", units=_UNITS, months=_MONTHS, date_order="dmy", time=_time, date=_date,
    ordinal=_ordinal, ordinal_suffix=r"[ºª]", plural=lambda value: 0 if value == 1 and "." not in str(value) else 1,
    agree=_agree,
    abbreviations={"ad es.": "ad esempio", "ecc.": "eccetera", "sig.": "signor", "Sig.": "signor",
                   "dott.": "dottor", "Dott.": "dottor", "vs.": "contro", "ca.": "circa"},
    number_words={"n.": "numero", "N.": "numero", "nº": "numero", "Nº": "numero", "No.": "numero", "Nr.": "numero",
                  "#": "numero"},
    fractions={2: ("mezzo", "mezzi"), 3: ("terzo", "terzi"), 4: ("quarto", "quarti")},
    date_words=("il", "dal", "al", "entro"),
    feminine=frozenset({"ora", "luce", "luci", "lampada", "lampade", "porta", "porte", "finestra", "finestre",
                        "stanza", "stanze", "persona", "persone", "volta", "volte", "sveglia", "sveglie",
                        "settimana", "settimane"}),
    between=("tra", "fra"),
    extra=((r"(?<![\w.,+-])1\s(?:ora|h)(?![\w/])", _one_hour),),
    counted_before=frozenset({"e", "o", "di", "del", "a", "al", "meno", "più", "su", "per"}),
    of_millions=lambda noun: "di " + noun,
    decimals_as_number=True,
)
_RULES = Rules(LANGUAGE)


def normalize(sentence: str) -> str:
    """The spoken form of one Italian sentence."""
    return _RULES.normalize(sentence)
