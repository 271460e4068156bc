"""One thread stepping several models' schedulers in turn (docs/ARCHITECTURE.md, "Several
models in one process").

A lone Scheduler steps its model on a thread of its own. Two models served by one process
would then run two engine threads, each driving a native thread team that spins on the same
cores, so each model's steps would slow the other's down. In a group, members take turns on one
thread: each round ticks every member that has work, one tick each, so a step of one model never
runs at the same time as a step of another and neither waits longer than one step of the others.

The members share the group's lock (the schedulers' one short lock, never held across
inference) and its condition, so new work in any member wakes the one thread.
"""
from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .scheduler import Scheduler

log = logging.getLogger(__name__)


class EngineGroup:
    """The engine thread of several schedulers: `Scheduler(..., group=group)`; its `start()`
    joins, its `close()` leaves (after a tick of it in progress). The thread starts with the
    first member and ends when the last has left; a later member starts it again."""

    def __init__(self, name: str = "qwen3tts-engines") -> None:
        self.lock = threading.Lock()  # every member's lock
        self.wake = threading.Condition(self.lock)  # members notify it when they have work
        self._ticked = threading.Condition(self.lock)  # a member's tick ended
        self._members: list[Scheduler] = []
        self._ticking: Scheduler | None = None
        self._thread: threading.Thread | None = None
        self._name = name

    @property
    def members(self) -> tuple[Scheduler, ...]:
        with self.lock:
            return tuple(self._members)

    @property
    def running(self) -> bool:
        """Whether the group's thread is alive (without the lock: members ask under it)."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def join(self, member: Scheduler) -> None:
        """Step `member` from now on (Scheduler.start)."""
        with self.lock:
            if member in self._members:
                raise RuntimeError("the scheduler is in the group already")
            self._members.append(member)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self.wake.notify()

    def leave(self, member: Scheduler, timeout: float) -> None:
        """Stop stepping `member`, once a tick of it in progress has ended (Scheduler.close)."""
        with self.lock:
            if member in self._members:
                self._members.remove(member)
            self.wake.notify()  # the thread ends if that was the last member
            if not self._ticked.wait_for(lambda: self._ticking is not member, timeout):
                raise RuntimeError(f"the engine group's tick did not end within {timeout} s")

    def _due(self) -> list[Scheduler]:
        """(Under the lock.) Members a tick would do something for, or whose request deadline passed."""
        return [m for m in self._members if m.due()]

    def _until_deadline(self) -> float | None:
        """(Under the lock.) Seconds to the nearest deadline of any member's requests."""
        waits = [w for w in (m.until_deadline() for m in self._members) if w is not None]
        return min(waits) if waits else None

    def _loop(self) -> None:
        while True:
            with self.lock:
                self.wake.wait_for(lambda: not self._members or self._due(), self._until_deadline())
                if not self._members:
                    self._thread = None
                    return
                due = self._due()
            for member in due:
                with self.lock:
                    if member not in self._members:  # left meanwhile
                        continue
                    self._ticking = member
                try:
                    member.tick_guarded()
                finally:
                    with self.lock:
                        self._ticking = None
                        self._ticked.notify_all()
