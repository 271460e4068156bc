// Who runs the talker (docs/MODEL.md §3) for the runner: one call over the block-paged KV
// cache, any mix of prefills and decode steps of many sequences. Two executors implement it —
// the runner's own layer stack on a CPU (talker_cpu.hpp) and OpenVINO's paged talker graph
// (talker_graph.hpp, for GPUs, NPUs and the exact f32 path) — and executors.hpp picks one at
// load, once (docs/ARCHITECTURE.md, "The native runner").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qwen3tts {

// One talker call's inputs (the step plan's, step_plan.hpp) and outputs, as plain arrays.
struct TalkerCall {
  int64_t rows = 0, sequences = 0, samples = 0;
  const float* embeds = nullptr;           // [rows × hidden], sequence after sequence
  const int64_t* positions = nullptr;      // [rows] RoPE positions
  const int32_t* past_lens = nullptr;      // [sequences] tokens in the cache already
  const int32_t* begins = nullptr;         // [sequences + 1] where each sequence's rows begin
  const int32_t* block_indices = nullptr;  // every sequence's block table, one after another
  const int32_t* block_begins = nullptr;   // [sequences + 1] where each table begins
  int32_t max_context = 0;                 // the longest sequence's cached + fed tokens
  const int64_t* sample_rows = nullptr;    // [samples] rows whose outputs are wanted
  float* logits = nullptr;                 // [samples × vocab]
  float* hidden = nullptr;                 // [samples × hidden], after the final norm
};

class TalkerExecutor {
 public:
  virtual ~TalkerExecutor() = default;
  virtual int64_t hidden() const = 0;
  virtual int64_t vocab() const = 0;
  virtual int64_t block_size() const = 0;
  // Bytes of one KV block: every layer's keys and values.
  virtual int64_t block_bytes() const = 0;
  // True when a row's outputs do not depend on how a step splits the rows (so a cached
  // prefix may end anywhere, docs/OPENVINO.md §12).
  virtual bool rows_exact() const = 0;
  // What runs it, for the log: "talker_cpu, <kernels>, <cache>, N threads" or "openvino".
  virtual std::string describe() const = 0;
  // The cache of `blocks` blocks (allocated, not touched: a block becomes resident when a
  // sequence first writes it). Once, before the first run().
  virtual void allocate(int64_t blocks) = 0;
  virtual int64_t blocks() const = 0;
  // Copies blocks (source, target), pair after pair: every layer's keys and values.
  virtual void copy_blocks(const std::vector<int32_t>& pairs) = 0;
  // One call; the caller has checked the arrays against each other and the cache (Runner::check).
  virtual void run(const TalkerCall& call) = 0;
};

}  // namespace qwen3tts
