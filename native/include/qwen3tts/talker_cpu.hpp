// The talker (docs/MODEL.md §3) run by the runner itself on a CPU: the same computation as
// the paged talker graph (wyoming_qwen3tts/convert/talker.py) — any mix of prefills and
// decode steps of many sequences in one call over a block-paged KV cache, then the final norm
// and the codec head on the sampled rows — from that graph's own INT4/INT8 weights, with the
// runner's int8 products (quantized_matrix.hpp) on a ThreadTeam (layer_stack.hpp).
//
// Why: in the CPU plugin a decode step is ~112 products and ~800 small nodes, each product
// handed to a pool thread that has gone to sleep since the last one, each node a few µs of
// dispatch: about half of a step's time at batch 1 (docs/BENCHMARKS.md). Here the team stays
// awake for the whole step and the small ops are loops over a few rows.
//
// The KV cache is its own: per block, layer, keys/values, kv head and slot, one row of
// head_dim values, f32 or u8 (per row: value = q · scale + min, the row's own range in 255
// steps, as the CPU plugin's u8 cache keeps per token and head). Block ids are the Python
// block pool's (engine/blocks.py), as for the graph.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <openvino/core/model.hpp>
#include <openvino/runtime/tensor.hpp>

#include "qwen3tts/layer_stack.hpp"
#include "qwen3tts/talker_executor.hpp"

namespace qwen3tts {

class TalkerCpu : public TalkerExecutor {
 public:
  // From the talker graph's weights, found by the names convert/talker.py gives them, and its
  // rt_info. Throws std::invalid_argument as NamedWeights does (the runner then compiles the
  // paged graph instead). u8_cache: keys and values in u8 (else f32).
  TalkerCpu(const ov::Model& model, std::shared_ptr<ThreadTeam> team, bool u8_cache, int64_t block_size,
            const Kernels& kernels = best_kernels());

  int64_t hidden() const override { return stack_.hidden; }
  int64_t vocab() const override { return head_->rows(); }
  int64_t block_size() const override { return block_size_; }
  int64_t layers() const { return static_cast<int64_t>(stack_.layers.size()); }
  int64_t block_bytes() const override { return layers() * 2 * stack_.kv_heads * block_size_ * row_bytes_; }
  // A row is computed alike however a call splits the rows: one order of sums per row.
  bool rows_exact() const override { return true; }
  std::string describe() const override;
  int threads() const { return team_->size(); }
  const Kernels& kernels() const { return stack_.kernels; }

  // Replaces any earlier cache.
  void allocate(int64_t blocks) override;
  int64_t blocks() const override { return blocks_; }
  void copy_blocks(const std::vector<int32_t>& pairs) override;
  void run(const TalkerCall& call) override;

 private:
  // The cache row of (block, layer, keys 0 / values 1, kv head, slot).
  uint8_t* row(int64_t block, int64_t layer, int kind, int64_t head, int64_t slot) const {
    return cache_base_ + ((((block * layers() + layer) * 2 + kind) * stack_.kv_heads + head) * block_size_ + slot) *
                             row_bytes_;
  }
  void store(const float* x, uint8_t* row) const;  // one key or value row into the cache
  // Score of query q against the cached key row, and v's row added to out with weight p.
  float score(const float* q, float q_sum, const uint8_t* key) const;
  void accumulate(float p, const uint8_t* value, float* out, float& offset) const;
  // Member `rank`'s share of one layer's attention over work_.qkv → work_.attention.
  void attend(int rank, int64_t layer, const TalkerCall& call);
  void prepare(const TalkerCall& call);

  struct Scratch {  // one per member
    std::vector<float> normed, query, scores, out;
  };
  struct Work {
    StackWork stack;
    std::vector<float> cos, sin;      // [rows × head_dim / 2] RoPE of the call's rows
    std::vector<int64_t> sequence;    // [rows] the sequence of each row
    std::vector<float> last;          // [samples × hidden]
    std::vector<Scratch> scratch;
  };

  LayerStack stack_;
  std::unique_ptr<QuantizedMatrix> head_;
  std::shared_ptr<ThreadTeam> team_;
  const bool u8_;
  const int64_t block_size_, row_bytes_;
  ov::Tensor cache_;  // [blocks × block_bytes] u8
  uint8_t* cache_base_ = nullptr;
  int64_t blocks_ = 0;
  Work work_;
};

}  // namespace qwen3tts
