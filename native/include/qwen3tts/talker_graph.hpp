// The talker as OpenVINO runs it: the converted talker graph (convert/talker.py) turned into a
// paged one by OpenVINO's SDPAToPagedAttention pass, compiled for any device, with its KV
// cache as the graph's key_cache.N / value_cache.N inputs (docs/OPENVINO.md §5). The executor
// for GPUs and NPUs, for the exact f32 path, and wherever the runner's own stack cannot run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <openvino/openvino.hpp>

#include "qwen3tts/graph_io.hpp"
#include "qwen3tts/mapped_ir.hpp"
#include "qwen3tts/runner_config.hpp"
#include "qwen3tts/talker_executor.hpp"

namespace qwen3tts {

class TalkerGraph : public TalkerExecutor {
 public:
  // Compiles `ir` (whose model has `layers` attention blocks) on `device` and runs it once,
  // so the plugin packs its weights; then drops the mapped weights' pages (mapped_ir.hpp).
  // `why`: why the runner's own stack does not run it, for describe() ("" if not asked);
  // `before_compile`: a test seam (runner_config.hpp TestHooks), applied to the paged graph.
  TalkerGraph(ov::Core& core, MappedIr ir, int64_t layers, const std::string& device, const Properties& properties,
              std::string why, const GraphHook& before_compile = {});
  ~TalkerGraph() override;

  int64_t hidden() const override { return hidden_; }
  int64_t vocab() const override { return vocab_; }
  int64_t block_size() const override { return block_size_; }
  int64_t block_bytes() const override { return block_bytes_; }
  // The plugin's paged attention sums a row's keys in an order that depends on the call's rows.
  bool rows_exact() const override { return false; }
  std::string describe() const override { return why_.empty() ? "openvino" : "openvino (" + why_ + ")"; }
  void allocate(int64_t blocks) override;
  int64_t blocks() const override { return blocks_; }
  void copy_blocks(const std::vector<int32_t>& pairs) override;
  void run(const TalkerCall& call) override;
  // The compiled graph's INFERENCE_NUM_THREADS where it runs on a CPU (0 elsewhere).
  int64_t cpu_threads() const;

 private:
  void set_caches(int64_t blocks);  // key_cache.N and value_cache.N of `blocks` blocks

  // The request's own input and output tensors a step uses, taken once: a request's tensor
  // stays the same object (set_shape and inference change its shape and data) unless
  // set_tensor replaces it, which nothing does to these. Asked for each step, by name, a
  // tensor costs ~8 µs (a search of every port's names, ~60 on the paged talker).
  struct Io {
    ov::Tensor embeds, positions, past_lens, begins, block_indices, block_begins, max_context, sample_rows, logits,
        hidden;
  };

  MappedIr ir_;  // the weights: declared before, so destroyed after, what reads them
  std::string device_, why_;
  ov::CompiledModel compiled_;
  ov::InferRequest request_;
  Io io_;
  std::vector<ov::Tensor> caches_;  // [blocks, ...] each
  int64_t hidden_ = 0, vocab_ = 0, block_size_ = 0, block_bytes_ = 0, blocks_ = 0;
};

}  // namespace qwen3tts
