// The KV block pool: fixed-size blocks of the paged cache, a block table and a reservation
// per sequence, and the blocks the prefix cache pins (the same rules as
// wyoming_qwen3tts/engine/blocks.py, which documents them).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace qwen3tts {

class BlockPool {
 public:
  BlockPool(int num_blocks, int block_size, int prefix_entries);

  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  // Blocks no sequence holds: the free list and the pinned prefixes (free-able).
  int free() const { return static_cast<int>(free_.size()) + pinned(); }
  int used() const { return num_blocks_ - free(); }
  int pinned() const;
  int prefixes() const { return static_cast<int>(pinned_.size()); }
  int available() const { return free() - promised(-1); }
  int blocks_for(int64_t tokens) const { return static_cast<int>((tokens + block_size_ - 1) / block_size_); }

  bool can_reserve(int64_t tokens) const { return blocks_for(tokens) <= available(); }
  // Promise `seq` room for `tokens` tokens; throws std::length_error if the pool can't.
  // Evicts pinned prefixes until the free list covers every promise.
  void reserve(int64_t seq, int64_t tokens);
  bool can_grow(int64_t seq, int64_t tokens) const;
  // Make `seq`'s table cover `tokens` tokens; throws std::length_error if that would take
  // blocks promised to other sequences.
  const std::vector<int32_t>& grow(int64_t seq, int64_t tokens);
  // Return every block and the reservation of `seq` (idempotent).
  void release(int64_t seq);
  const std::map<int64_t, std::vector<int32_t>>& tables() const { return tables_; }

  // The blocks pinned for a prefix (now the most recently used), or nullptr.
  const std::vector<int32_t>* lookup(const std::string& key);
  // Take `count` blocks for a new prefix, evicting the least recently used as needed; empty
  // when `key` is pinned already or the blocks are promised to sequences. The caller fills them.
  std::vector<int32_t> pin(const std::string& key, int count);
  void unpin_all();

 private:
  int promised(int64_t exclude) const;  // reserved blocks not yet taken, over all but `exclude`
  void evict_one();
  void evict_until(int count);  // until the free list holds `count` blocks (or nothing is pinned)

  int num_blocks_, block_size_, prefix_entries_;
  std::vector<int32_t> free_;
  std::map<int64_t, std::vector<int32_t>> tables_;
  std::map<int64_t, int> reserved_;
  std::list<std::pair<std::string, std::vector<int32_t>>> pinned_;  // most recently used first
};

}  // namespace qwen3tts
