"""This process's resident memory, to say what each model costs when it loads (a server with
several models logs it per model; one whose codec decoder is shared costs that much less)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_STATUS = Path("/proc/self/status")


@dataclass(frozen=True)
class Resident:
    """Resident memory as the kernel counts it: anonymous pages (what the plugins allocate:
    packed weights, caches) and file pages (mapped weights files), in kB."""

    anon_kb: int = 0
    file_kb: int = 0

    @classmethod
    def now(cls) -> Resident:
        """From /proc/self/status (RssAnon, RssFile); zeros where that file does not exist."""
        try:
            lines = _STATUS.read_text().splitlines()
        except OSError:
            return cls()
        kb = {key: int(rest.split()[0]) for key, _, rest in (line.partition(":") for line in lines)
              if key in ("RssAnon", "RssFile")}
        return cls(kb.get("RssAnon", 0), kb.get("RssFile", 0))

    @property
    def mb(self) -> float:
        return (self.anon_kb + self.file_kb) / 1024


def peak_mb() -> float:
    """This process's own high-water mark of resident memory (VmHWM; NaN where /proc is not).
    Not ru_maxrss: a child's starts at its parent's, which Linux carries across fork and exec."""
    try:
        lines = _STATUS.read_text().splitlines()
    except OSError:
        return float("nan")
    return next((int(line.split()[1]) / 1024 for line in lines if line.startswith("VmHWM:")), float("nan"))


@dataclass(frozen=True)
class LoadMemory:
    """Resident memory before and after a model was opened (open_engine)."""

    before: Resident
    after: Resident

    @property
    def added_mb(self) -> float:
        """What opening the model added (less where other models' loads freed memory meanwhile)."""
        return self.after.mb - self.before.mb

    def __str__(self) -> str:
        anon, file = self.after.anon_kb - self.before.anon_kb, self.after.file_kb - self.before.file_kb
        return (f"{self.added_mb:+.0f} MB resident (anonymous {anon / 1024:+.0f}, file {file / 1024:+.0f}), "
                f"{self.after.mb:.0f} MB in all")
