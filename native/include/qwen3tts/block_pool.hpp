// The KV block pool: fixed-size blocks of the paged cache, a block table and a reservation
// per sequence (the same rules as wyoming_qwen3tts/engine/blocks.py, which documents them).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace qwen3tts {

class BlockPool {
 public:
  BlockPool(int num_blocks, int block_size);

  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  int free() const { return static_cast<int>(free_.size()); }
  int used() const { return num_blocks_ - free(); }
  int available() const { return free() - promised(-1); }
  int blocks_for(int64_t tokens) const { return static_cast<int>((tokens + block_size_ - 1) / block_size_); }

  bool can_reserve(int64_t tokens) const { return blocks_for(tokens) <= available(); }
  // Promise `seq` room for `tokens` tokens; throws std::length_error if the pool can't.
  void reserve(int64_t seq, int64_t tokens);
  bool can_grow(int64_t seq, int64_t tokens) const;
  // Make `seq`'s table cover `tokens` tokens; throws std::length_error if that would take
  // blocks promised to other sequences.
  const std::vector<int32_t>& grow(int64_t seq, int64_t tokens);
  // Return every block and the reservation of `seq` (idempotent).
  void release(int64_t seq);
  const std::map<int64_t, std::vector<int32_t>>& tables() const { return tables_; }

 private:
  int promised(int64_t exclude) const;  // reserved blocks not yet taken, over all but `exclude`

  int num_blocks_, block_size_;
  std::vector<int32_t> free_;
  std::map<int64_t, std::vector<int32_t>> tables_;
  std::map<int64_t, int> reserved_;
};

}  // namespace qwen3tts
