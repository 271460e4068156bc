#include "qwen3tts/block_pool.hpp"

#include <stdexcept>
#include <string>

namespace qwen3tts {

BlockPool::BlockPool(int num_blocks, int block_size, int prefix_entries)
    : num_blocks_(num_blocks), block_size_(block_size), prefix_entries_(prefix_entries) {
  if (num_blocks < 1 || block_size < 1) throw std::invalid_argument("the KV pool needs at least one block of at least one token");
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // pop_back() hands out 0, 1, 2, ...
}

int BlockPool::pinned() const {
  int total = 0;
  for (const auto& entry : pinned_) total += static_cast<int>(entry.second.size());
  return total;
}

int BlockPool::promised(int64_t exclude) const {
  int total = 0;
  for (const auto& [seq, blocks] : reserved_) {
    if (seq == exclude) continue;
    auto it = tables_.find(seq);
    int taken = it == tables_.end() ? 0 : static_cast<int>(it->second.size());
    total += blocks > taken ? blocks - taken : 0;
  }
  return total;
}

void BlockPool::reserve(int64_t seq, int64_t tokens) {
  int need = blocks_for(tokens);
  auto it = reserved_.find(seq);
  int own = it == reserved_.end() ? 0 : it->second;
  if (need > available() + own)
    throw std::length_error("KV pool: sequence " + std::to_string(seq) + " needs " + std::to_string(need) +
                            " blocks, " + std::to_string(available()) + " available");
  reserved_[seq] = need;
  evict_until(promised(-1));
}

bool BlockPool::can_grow(int64_t seq, int64_t tokens) const {
  auto it = tables_.find(seq);
  int have = it == tables_.end() ? 0 : static_cast<int>(it->second.size());
  return blocks_for(tokens) - have <= free() - promised(seq);
}

const std::vector<int32_t>& BlockPool::grow(int64_t seq, int64_t tokens) {
  if (!can_grow(seq, tokens))
    throw std::length_error("KV pool exhausted: sequence " + std::to_string(seq) + " needs " +
                            std::to_string(blocks_for(tokens)) + " blocks");
  auto& table = tables_[seq];
  evict_until(blocks_for(tokens) - static_cast<int>(table.size()));
  while (static_cast<int>(table.size()) < blocks_for(tokens)) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return table;
}

void BlockPool::release(int64_t seq) {
  auto it = tables_.find(seq);
  if (it != tables_.end()) {
    for (auto b = it->second.rbegin(); b != it->second.rend(); ++b) free_.push_back(*b);
    tables_.erase(it);
  }
  reserved_.erase(seq);
}

const std::vector<int32_t>* BlockPool::lookup(const std::string& key) {
  for (auto it = pinned_.begin(); it != pinned_.end(); ++it) {
    if (it->first == key) {
      pinned_.splice(pinned_.begin(), pinned_, it);
      return &pinned_.front().second;
    }
  }
  return nullptr;
}

std::vector<int32_t> BlockPool::pin(const std::string& key, int count) {
  for (const auto& entry : pinned_)
    if (entry.first == key) return {};
  if (count < 1 || prefix_entries_ < 1 || count > available()) return {};
  while (static_cast<int>(pinned_.size()) >= prefix_entries_) evict_one();
  evict_until(promised(-1) + count);
  std::vector<int32_t> blocks;
  for (int i = 0; i < count; ++i) {
    blocks.push_back(free_.back());
    free_.pop_back();
  }
  pinned_.emplace_front(key, blocks);
  return blocks;
}

void BlockPool::unpin_all() {
  while (!pinned_.empty()) evict_one();
}

void BlockPool::evict_one() {
  auto& blocks = pinned_.back().second;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) free_.push_back(*b);
  pinned_.pop_back();
}

void BlockPool::evict_until(int count) {
  while (static_cast<int>(free_.size()) < count && !pinned_.empty()) evict_one();
}

}  // namespace qwen3tts
