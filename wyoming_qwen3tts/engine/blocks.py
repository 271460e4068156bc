"""The KV block pool: fixed-size blocks of the paged cache and per-sequence block tables."""
from __future__ import annotations


class BlockPool:
    """Free list plus a block table per sequence; a sequence owns ceil(tokens / block) blocks."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("the KV pool needs at least one block of at least one token")
        self.num_blocks, self.block_size = num_blocks, block_size
        self._free = list(range(num_blocks - 1, -1, -1))
        self.tables: dict[int, list[int]] = {}

    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def used(self) -> int:
        return self.num_blocks - len(self._free)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def can_grow(self, seq: int, tokens: int) -> bool:
        return self.blocks_for(tokens) - len(self.tables.get(seq, ())) <= len(self._free)

    def grow(self, seq: int, tokens: int) -> list[int]:
        """Make `seq`'s table cover `tokens` tokens; raises if the pool is exhausted."""
        table = self.tables.setdefault(seq, [])
        need = self.blocks_for(tokens) - len(table)
        if need > len(self._free):
            raise MemoryError(f"KV pool exhausted: sequence {seq} needs {need} more blocks, {len(self._free)} free")
        for _ in range(max(0, need)):
            table.append(self._free.pop())
        return table

    def release(self, seq: int) -> None:
        """Return every block of `seq` to the pool (idempotent)."""
        self._free.extend(reversed(self.tables.pop(seq, [])))
