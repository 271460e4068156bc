"""Spanish: decimal comma ("coma") and thousands dots, times "las catorce y treinta", dates
"cuatro de diciembre de dos mil veintiséis", units agreeing in gender ("una hora", "veintiún
grados"), money, ordinals "1.º"/"1.ª"/"1.er", abbreviations (docs/TEXT.md)."""
from __future__ import annotations

from .rules import NINE_DIGIT_PHONE, Language, Rules, Unit, si_units, to_24h, words

_MONTHS = ("enero", "febrero", "marzo", "abril", "mayo", "junio", "julio", "agosto", "septiembre", "octubre",
           "noviembre", "diciembre")


def _u(one: str, other: str | None = None, gender: str = "m") -> Unit:
    return Unit((one, other or one + "s"), gender)


_UNITS = {
    **si_units({"W": _u("vatio"), "Wh": _u("vatio hora", "vatios hora"), "m": _u("metro"), "g": _u("gramo"),
                "Hz": _u("hercio"), "V": _u("voltio"), "A": _u("amperio"), "Pa": _u("pascal", "pascales"),
                "B": _u("byte"), "l": _u("litro"), "L": _u("litro"), "s": _u("segundo"), "bar": _u("bar", "bares")},
               {"k": "kilo", "M": "mega", "G": "giga", "T": "tera", "m": "mili", "c": "centi", "µ": "micro",
                "μ": "micro", "h": "hecto"}),
    "mm": _u("milímetro"), "cm": _u("centímetro"), "km": _u("kilómetro"),  # the accent moves
    "°C": _u("grado Celsius", "grados Celsius"), "°F": _u("grado Fahrenheit", "grados Fahrenheit"),
    "°": _u("grado"), "%": _u("por ciento", "por ciento"), "km/h": _u("kilómetro por hora", "kilómetros por hora"),
    "m/s": _u("metro por segundo", "metros por segundo"), "m²": _u("metro cuadrado", "metros cuadrados"),
    "m³": _u("metro cúbico", "metros cúbicos"), "µg/m³": _u("microgramo por metro cúbico",
    "microgramos por metro cúbico"), "μg/m³": _u("microgramo por metro cúbico", "microgramos por metro cúbico"),
    "ppm": _u("parte por millón", "partes por millón", "f"), "dB": _u("decibelio"), "lx": _u("lux", "lux"),
    "lm": _u("lumen", "lúmenes"), "min": _u("minuto"), "h": _u("hora", gender="f"),
    "mm/h": _u("milímetro por hora", "milímetros por hora"), "Mbit/s": _u("megabit por segundo",
    "megabits por segundo"),
}


def _agree(spoken: str, gender: str) -> str:
    """"un grado", "veintiún grados", "una hora", "doscientas horas"."""
    if gender == "f":
        spoken = spoken.replace("ientos", "ientas")
        return spoken[:-3] + "una" if spoken.endswith("uno") else spoken
    if spoken.endswith("veintiuno"):
        return spoken[:-9] + "veintiún"
    return spoken[:-3] + "un" if spoken.endswith("uno") else spoken


def _time(hours: int, minutes: int, seconds: int | None, half: str) -> str:
    spoken = _agree(words(to_24h(hours, half), "es"), "f")
    spoken += f" y {words(minutes, 'es')}" if minutes else " en punto"
    if seconds:
        spoken += f" y {_agree(words(seconds, 'es'), 'm')} segundo{'s' if seconds != 1 else ''}"
    return spoken


def _date(day: int, month: int, year: int | None, before: str) -> str:
    spoken = f"{words(day, 'es')} de {_MONTHS[month - 1]}"
    return f"{spoken} de {words(year, 'es')}" if year else spoken


def _ordinal(number: int, suffix: str, before: str) -> str:
    spoken = words(number, "es", to="ordinal")
    if suffix.endswith("ª"):
        return " ".join(w[:-1] + "a" if w.endswith("o") else w for w in spoken.split())
    # "1.º piso": before a noun, as it nearly always stands, "primero" and "tercero" lose their "o"
    return spoken[:-1] if spoken.endswith(("primero", "tercero")) else spoken


LANGUAGE = Language(
    phones=(NINE_DIGIT_PHONE,),
    code="es", groups=" .", decimal=",", point="coma", dot="punto", minus="menos", plus="más", to="a",
    and_word="y", version="versión", units=_UNITS, months=_MONTHS, date_order="dmy", time=_time, date=_date,
    ordinal=_ordinal, ordinal_suffix=r"\.?(?:[ºª]|er)",
    plural=lambda value: 0 if value == 1 and "." not in str(value) else 1,
    agree=_agree,
    abbreviations={"p. ej.": "por ejemplo", "aprox.": "aproximadamente", "etc.": "etcétera", "Sr.": "señor",
                   "Sra.": "señora", "Dr.": "doctor", "Dra.": "doctora", "vs.": "contra", "EE. UU.": "Estados Unidos",
                   "EE.UU.": "Estados Unidos"},
    number_words={"n.º": "número", "nº": "número", "N.º": "número", "Nº": "número", "núm.": "número",
                  "No.": "número", "Nr.": "número", "#": "número"},
    fractions={2: ("medio", "medios"), 3: ("tercio", "tercios"), 4: ("cuarto", "cuartos")},
    date_words=("el", "del", "al", "hasta"), time_suffix="h|horas",
    feminine=frozenset({"hora", "horas", "vez", "veces", "luz", "luces", "lámpara", "lámparas", "persona",
                        "personas", "puerta", "puertas", "ventana", "ventanas", "habitación", "habitaciones",
                        "alarma", "alarmas", "semana", "semanas"}),
    between=("entre",),
    counted_before=frozenset({"y", "o", "u", "de", "del", "menos", "a", "al", "en", "por", "para", "con", "que",
                               "más"}),
    feminine_after=frozenset({"la", "las"}),
    of_millions=lambda noun: "de " + noun,
    decimals_as_number=True,
)
_RULES = Rules(LANGUAGE)


def normalize(sentence: str) -> str:
    """The spoken form of one Spanish sentence."""
    return _RULES.normalize(sentence)
