"""French: decimal comma and thousands in groups of three ("1 000"), times with "heures" (also
written "14h30"), dates day first ("premier" for the 1st), units agreeing in number (singular
below two) and gender ("une heure"), money, abbreviations (docs/TEXT.md)."""
from __future__ import annotations

from .rules import Groups, Language, Rules, Unit, si_units, to_24h, words

_MONTHS = ("janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août", "septembre", "octobre",
           "novembre", "décembre")


def _u(one: str, other: str | None = None, gender: str = "m") -> Unit:
    return Unit((one, other or one + "s"), gender)


_UNITS = {
    **si_units({"W": _u("watt"), "Wh": _u("wattheure"), "m": _u("mètre"), "g": _u("gramme"),
                "Hz": _u("hertz", "hertz"), "V": _u("volt"), "A": _u("ampère"), "Pa": _u("pascal"),
                "B": _u("octet"), "l": _u("litre"), "L": _u("litre"), "s": _u("seconde", gender="f"),
                "bar": _u("bar")},
               {"k": "kilo", "M": "méga", "G": "giga", "T": "téra", "m": "milli", "c": "centi", "µ": "micro",
                "μ": "micro", "h": "hecto"}),
    "°C": _u("degré Celsius", "degrés Celsius"), "°F": _u("degré Fahrenheit", "degrés Fahrenheit"),
    "°": _u("degré"), "%": _u("pour cent", "pour cent"), "km/h": _u("kilomètre par heure", "kilomètres par heure"),
    "m/s": _u("mètre par seconde", "mètres par seconde"), "m²": _u("mètre carré", "mètres carrés"),
    "m³": _u("mètre cube", "mètres cubes"), "µg/m³": _u("microgramme par mètre cube", "microgrammes par mètre cube"),
    "μg/m³": _u("microgramme par mètre cube", "microgrammes par mètre cube"),
    "ppm": _u("partie par million", "parties par million", "f"), "dB": _u("décibel"), "lx": _u("lux", "lux"),
    "lm": _u("lumen"), "min": _u("minute", gender="f"), "mm/h": _u("millimètre par heure", "millimètres par heure"),
    "Mbit/s": _u("mégabit par seconde", "mégabits par seconde"),
}


def _agree(spoken: str, gender: str) -> str:
    if gender == "f" and (spoken == "un" or spoken.endswith(" un")):
        return spoken + "e"
    return spoken


def _time(hours: int, minutes: int, seconds: int | None, half: str) -> str:
    hours = to_24h(hours, half)
    spoken = f"{_agree(words(hours, 'fr'), 'f')} heure{'s' if hours > 1 else ''}"
    if minutes:
        spoken += " " + words(minutes, "fr")
    if seconds:
        spoken += f" et {_agree(words(seconds, 'fr'), 'f')} seconde{'s' if seconds > 1 else ''}"
    return spoken


def _date(day: int, month: int, year: int | None, before: str) -> str:
    spoken = f"{'premier' if day == 1 else words(day, 'fr')} {_MONTHS[month - 1]}"
    return f"{spoken} {words(year, 'fr')}" if year else spoken


def _ordinal(number: int, suffix: str, before: str) -> str:
    if number == 1:
        return "première" if suffix in ("re", "ère") else "premier"
    return words(number, "fr", to="ordinal")


def _hours(m: Groups) -> str | None:
    """"14h30", "14 h 30", "7h": a time (a duration of hours reads the same)."""
    hours, minutes = int(m.group(1)), int(m.group(2) or 0)
    return _time(hours, minutes, None, "") if hours <= 24 else None


LANGUAGE = Language(
    code="fr", groups=" .", decimal=",", point="virgule", dot="point", minus="moins", plus="plus", to="à",
    and_word="et", version="version", units=_UNITS, months=_MONTHS, date_order="dmy", time=_time, date=_date,
    ordinal=_ordinal, ordinal_suffix="ère|ème|er|re|e", plural=lambda value: 0 if abs(value) < 2 else 1,
    agree=_agree,
    abbreviations={"etc.": "et cetera", "env.": "environ", "p. ex.": "par exemple", "vs.": "contre",
                   "c.-à-d.": "c'est à dire", "c.à.d.": "c'est à dire"},
    number_words={"n°": "numéro", "N°": "numéro", "No.": "numéro", "no.": "numéro", "Nr.": "numéro", "#": "numéro"},
    fractions={2: ("demi", "demis"), 3: ("tiers", "tiers"), 4: ("quart", "quarts")},
    date_words=("le", "du", "au"),
    feminine=frozenset({"heure", "heures", "minute", "minutes", "seconde", "secondes", "fois", "lampe", "lampes",
                        "lumière", "lumières", "personne", "personnes", "porte", "portes", "fenêtre", "fenêtres",
                        "pièce", "pièces", "prise", "prises", "alarme", "alarmes", "minuterie", "minuteries"}),
    extra=((r"(?<![\w:.,])(\d{1,2})\s?h\s?([0-5]\d)?(?![\w])", _hours),),
    between=("entre",), phone_groups=True,
    counted_before=frozenset({"et", "ou", "à", "de", "du", "moins", "plus", "sur", "par"}),
    of_millions=lambda noun: ("d'" if noun[:1] in "aeéiouhy" else "de ") + noun,
    decimals_as_number=True,
)
_RULES = Rules(LANGUAGE)


def normalize(sentence: str) -> str:
    """The spoken form of one French sentence."""
    return _RULES.normalize(sentence)
