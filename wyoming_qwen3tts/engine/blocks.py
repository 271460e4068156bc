"""The KV block pool: fixed-size blocks of the paged cache and per-sequence block tables.

A sequence is admitted with a reservation for its worst case (prompt + frame cap); blocks
are taken from the free list only as its tokens arrive, but nobody else can take the
blocks it reserved. So a running sequence never finds the pool exhausted (no preemption,
no recomputation that could change its numbers), and admission is the only place where a
request waits for memory.
"""
from __future__ import annotations


class BlockPool:
    """Free list, a block table and a reservation per sequence."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("the KV pool needs at least one block of at least one token")
        self.num_blocks, self.block_size = num_blocks, block_size
        self._free = list(range(num_blocks - 1, -1, -1))
        self.tables: dict[int, list[int]] = {}
        self._reserved: dict[int, int] = {}  # seq -> blocks it may grow to

    @property
    def free(self) -> int:
        """Blocks on the free list (some may be promised to reservations)."""
        return len(self._free)

    @property
    def used(self) -> int:
        return self.num_blocks - len(self._free)

    def _promised(self, exclude: int | None = None) -> int:
        """Reserved blocks not yet taken, over every sequence but `exclude`."""
        return sum(max(0, n - len(self.tables.get(s, ()))) for s, n in self._reserved.items() if s != exclude)

    @property
    def available(self) -> int:
        """Blocks a new reservation could claim."""
        return len(self._free) - self._promised()

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def can_reserve(self, tokens: int) -> bool:
        return self.blocks_for(tokens) <= self.available

    def reserve(self, seq: int, tokens: int) -> None:
        """Promise `seq` room for `tokens` tokens; raises MemoryError if the pool can't."""
        need = self.blocks_for(tokens)
        if need > self.available + self._reserved.get(seq, 0):
            raise MemoryError(f"KV pool: sequence {seq} needs {need} blocks, {self.available} available")
        self._reserved[seq] = need

    def can_grow(self, seq: int, tokens: int) -> bool:
        need = self.blocks_for(tokens) - len(self.tables.get(seq, ()))
        return need <= len(self._free) - self._promised(exclude=seq)

    def grow(self, seq: int, tokens: int) -> list[int]:
        """Make `seq`'s table cover `tokens` tokens; raises if that would take blocks
        promised to other sequences."""
        if not self.can_grow(seq, tokens):
            raise MemoryError(f"KV pool exhausted: sequence {seq} needs {self.blocks_for(tokens)} blocks, "
                              f"{len(self._free) - self._promised(exclude=seq)} available to it")
        table = self.tables.setdefault(seq, [])
        for _ in range(self.blocks_for(tokens) - len(table)):
            table.append(self._free.pop())
        return table

    def release(self, seq: int) -> None:
        """Return every block and the reservation of `seq` to the pool (idempotent)."""
        self._free.extend(reversed(self.tables.pop(seq, [])))
        self._reserved.pop(seq, None)
