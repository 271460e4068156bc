"""The KV block pool: fixed-size blocks of the paged cache and per-sequence block tables.

A sequence is admitted with a reservation for its worst case (prompt + frame cap); blocks
are taken from the free list only as its tokens arrive, but nobody else can take the
blocks it reserved. So a running sequence never finds the pool exhausted (no preemption,
no recomputation that could change its numbers), and admission is the only place where a
request waits for memory.

The prefix cache (engine/batch.py) pins a few blocks per voice: the keys and values of the
prompt positions every request of that voice shares. Pinned blocks belong to no sequence
and are free-able: a reservation or a table that needs them evicts the least recently used
entries, so the cache never makes a request wait. They count as `free` (and `available`),
and `pinned` tells how many of those hold a cached prefix; when no request runs,
`free == num_blocks`.
"""
from __future__ import annotations

from collections import OrderedDict

PREFIX_ENTRIES = 16  # prefixes the cache keeps (a voice and language each; 1-2 blocks each)


class BlockPool:
    """Free list, a block table and a reservation per sequence, and the pinned prefixes."""

    def __init__(self, num_blocks: int, block_size: int, prefix_entries: int = PREFIX_ENTRIES) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("the KV pool needs at least one block of at least one token")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.prefix_entries = prefix_entries
        self._free = list(range(num_blocks - 1, -1, -1))
        self.tables: dict[int, list[int]] = {}
        self._reserved: dict[int, int] = {}  # seq -> blocks it may grow to
        self._pinned: OrderedDict[bytes, list[int]] = OrderedDict()  # prefix key -> blocks, least recent first

    @property
    def free(self) -> int:
        """Blocks no sequence holds: the free list and the pinned prefixes (some may be
        promised to reservations)."""
        return len(self._free) + self.pinned

    @property
    def used(self) -> int:
        """Blocks held by sequences."""
        return self.num_blocks - self.free

    @property
    def pinned(self) -> int:
        """Blocks the prefix cache holds (free-able: evicted when a sequence needs them)."""
        return sum(len(b) for b in self._pinned.values())

    @property
    def prefixes(self) -> int:
        """Prefixes cached."""
        return len(self._pinned)

    def _promised(self, exclude: int | None = None) -> int:
        """Reserved blocks not yet taken, over every sequence but `exclude`."""
        return sum(max(0, n - len(self.tables.get(s, ()))) for s, n in self._reserved.items() if s != exclude)

    @property
    def available(self) -> int:
        """Blocks a new reservation could claim."""
        return self.free - self._promised()

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def can_reserve(self, tokens: int) -> bool:
        return self.blocks_for(tokens) <= self.available

    def reserve(self, seq: int, tokens: int) -> None:
        """Promise `seq` room for `tokens` tokens; raises MemoryError if the pool can't.
        Evicts pinned prefixes until the free list covers every promise."""
        need = self.blocks_for(tokens)
        if need > self.available + self._reserved.get(seq, 0):
            raise MemoryError(f"KV pool: sequence {seq} needs {need} blocks, {self.available} available")
        self._reserved[seq] = need
        self._evict_until(self._promised())

    def can_grow(self, seq: int, tokens: int) -> bool:
        need = self.blocks_for(tokens) - len(self.tables.get(seq, ()))
        return need <= self.free - self._promised(exclude=seq)

    def grow(self, seq: int, tokens: int) -> list[int]:
        """Make `seq`'s table cover `tokens` tokens; raises if that would take blocks
        promised to other sequences."""
        table = self.tables.get(seq)
        if table is not None and len(table) * self.block_size >= tokens:
            return table  # most steps: the last block has room
        if not self.can_grow(seq, tokens):
            raise MemoryError(f"KV pool exhausted: sequence {seq} needs {self.blocks_for(tokens)} blocks, "
                              f"{self.free - self._promised(exclude=seq)} available to it")
        table = self.tables.setdefault(seq, [])
        need = self.blocks_for(tokens) - len(table)
        self._evict_until(need)
        for _ in range(need):
            table.append(self._free.pop())
        return table

    def release(self, seq: int) -> None:
        """Return every block and the reservation of `seq` to the pool (idempotent)."""
        self._free.extend(reversed(self.tables.pop(seq, [])))
        self._reserved.pop(seq, None)

    # --- the prefix cache's blocks ---
    def lookup(self, key: bytes) -> list[int] | None:
        """The blocks pinned for `key` (now the most recently used), or None."""
        blocks = self._pinned.get(key)
        if blocks is not None:
            self._pinned.move_to_end(key)
        return blocks

    def pin(self, key: bytes, count: int) -> list[int] | None:
        """Take `count` blocks for a new prefix, evicting the least recently used ones as
        needed; None when `key` is pinned already or the blocks are promised to sequences.
        The caller fills them."""
        if key in self._pinned or count < 1 or self.prefix_entries < 1 or count > self.available:
            return None
        while len(self._pinned) >= self.prefix_entries:
            self._evict_one()
        self._evict_until(self._promised() + count)
        blocks = [self._free.pop() for _ in range(count)]
        self._pinned[key] = blocks
        return blocks

    def unpin_all(self) -> None:
        """Drop every cached prefix."""
        while self._pinned:
            self._evict_one()

    def _evict_one(self) -> None:
        _, blocks = self._pinned.popitem(last=False)
        self._free.extend(reversed(blocks))

    def _evict_until(self, count: int) -> None:
        """Evict least recently used prefixes until the free list holds `count` blocks (or none is left)."""
        while len(self._free) < count and self._pinned:
            self._evict_one()
