// The code predictor (docs/MODEL.md §4) run by the runner itself on a CPU: the same
// computation as the subcode graph (wyoming_qwen3tts/convert/subcode.py) — 15 steps of a
// small transformer over ≤ 16 positions, with sampling — from that graph's own INT4/INT8
// weights, with the runner's int8 products (quantized_matrix.hpp) on a ThreadTeam.
//
// Why: a frame's subcode call is ~300 dependent matrix products at batch 1 and ~1500 small
// nodes. In the CPU plugin each product hands its work to the pool's second thread, which
// has gone to sleep since the last one, and each small node costs a few microseconds of
// dispatch: ~half the call's time (docs/BENCHMARKS.md). Here the team's threads stay awake
// for the whole call and the small ops are a few loops over ≤ 16 × 1024 floats.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <openvino/core/model.hpp>

#include "qwen3tts/layer_stack.hpp"
#include "qwen3tts/subcode_executor.hpp"

namespace qwen3tts {

class SubcodeCpu : public SubcodeExecutor {
 public:
  // From the subcode graph's weights, found by the names convert/subcode.py gives them, and
  // its rt_info. Throws std::invalid_argument if the graph has no such names (converted by
  // an older version) or a weight is not nncf's INT4 group-wise or INT8 per-row pattern
  // (an fp16/fp32 conversion): the runner then compiles the graph instead. `team`: the
  // threads it runs on (shared with the runner's talker); `kernels`: the instruction set of
  // its products and dot products (any gives the same numbers). weights_owner: what keeps the
  // memory of the model's constants alive once the model is gone (MappedIr::mapping(); null
  // where the constants own it): its codebook tables are read in place (embedding_table.hpp).
  SubcodeCpu(const ov::Model& model, std::shared_ptr<ThreadTeam> team, const Kernels& kernels = best_kernels(),
             std::shared_ptr<const void> weights_owner = nullptr);

  int64_t steps() const override { return static_cast<int64_t>(heads_.size()); }
  int64_t talker_hidden() const override { return talker_hidden_; }
  std::string describe() const override;
  int64_t vocab() const { return vocab_; }
  int threads() const { return team_->size(); }
  const Kernels& kernels() const { return stack_.kernels; }
  // One call of the graph; throws std::invalid_argument for a code0 outside the talker's
  // codec table. first_logits (tests): the first step's logits [rows × vocab], if given.
  void run(const SubcodeBatch& batch, std::vector<float>* first_logits);
  void run(const SubcodeBatch& batch) override { run(batch, nullptr); }

 private:
  // Everything a call touches besides the stack's buffers, sized by prepare().
  struct Scratch {  // one per member: attention's and sampling's
    std::vector<float> head, query, scores;
    std::vector<int64_t> order;
    std::vector<float> scaled, probs, cumulative;
  };
  struct Work {
    StackWork stack;
    std::vector<float> logits, last, inputs, first_logits;
    std::vector<float> keys, values;  // [layer][row][kv head][position][head dim]
    std::vector<Scratch> scratch;
  };

  SubcodeCpu(const NamedWeights& w, std::shared_ptr<ThreadTeam> team, const Kernels& kernels,
             const std::shared_ptr<const void>& weights_owner);
  // The step at positions [first, first + count) of every row: the layers over work_.stack.x.
  void layers(int rank, int64_t rows, int64_t first, int64_t count);
  // Member `rank`'s share of a layer's attention: (row, kv head) items dealt round-robin.
  void attend(int rank, const Layer& layer, int64_t layer_index, int64_t rows, int64_t first, int64_t count);
  // Last position's logits of every row into work_.logits (after the layers).
  void head(int rank, int64_t rows, int64_t count, int64_t step);
  // x for the rows' next step: the projection (1.7B) of `inputs` [n × talker hidden], or a copy.
  void project(int rank, int64_t n);
  void prepare(int64_t rows);
  // One row's code from its logits, in member `rank`'s scratch.
  int64_t sample(int rank, const float* logits, float temperature, int64_t top_k, float top_p, float uniform);

  LayerStack stack_;
  std::vector<float> projection_bias_;
  std::unique_ptr<QuantizedMatrix> projection_;
  std::vector<std::unique_ptr<QuantizedMatrix>> heads_;
  // Hands the tables' file pages back (embedding_table.hpp): after loading and after each call.
  void release_tables() const;

  std::vector<std::unique_ptr<EmbeddingTable>> tables_;  // codebooks 1..15, then the talker's codebook 0
  const char* tables_begin_ = nullptr;  // the range of the weights file that holds every table
  size_t tables_bytes_ = 0;
  int64_t talker_hidden_ = 0, vocab_ = 0;
  std::vector<float> cos_, sin_;  // [position][head dim / 2] RoPE at positions 0..steps
  std::shared_ptr<ThreadTeam> team_;
  Work work_;
};

}  // namespace qwen3tts
