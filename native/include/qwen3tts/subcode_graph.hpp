// The code predictor as OpenVINO runs it: the converted subcode graph (convert/subcode.py,
// its 15 steps and their sampling inside one graph), compiled for any device. The executor for
// GPUs and NPUs, for the exact f32 path, and wherever the runner's own stack cannot run.
#pragma once

#include <cstdint>
#include <string>

#include <openvino/openvino.hpp>

#include "qwen3tts/graph_io.hpp"
#include "qwen3tts/mapped_ir.hpp"
#include "qwen3tts/runner_config.hpp"
#include "qwen3tts/subcode_executor.hpp"

namespace qwen3tts {

class SubcodeGraph : public SubcodeExecutor {
 public:
  // Compiles `ir` on `device` and runs it once so the plugin packs its weights; then drops
  // the mapped pages. `why`: why the runner's own stack does not run it, for describe() (""
  // if not asked); `before_compile`: a test seam (runner_config.hpp TestHooks).
  SubcodeGraph(ov::Core& core, MappedIr ir, const std::string& device, const Properties& properties, std::string why,
               const GraphHook& before_compile = {});
  ~SubcodeGraph() override;

  int64_t steps() const override { return steps_; }
  int64_t talker_hidden() const override { return talker_hidden_; }
  std::string describe() const override { return why_.empty() ? "openvino" : "openvino (" + why_ + ")"; }
  void run(const SubcodeBatch& batch) override;

 private:
  struct Io {  // the request's own tensors, taken once (as TalkerGraph's)
    ov::Tensor hidden, code0, temperature, top_k, top_p, uniform, codes, embedding;
  };

  MappedIr ir_;  // the weights: declared before, so destroyed after, what reads them
  std::string why_;
  ov::CompiledModel compiled_;
  ov::InferRequest request_;
  Io io_;
  int64_t talker_hidden_ = 0, steps_ = 0;
};

}  // namespace qwen3tts
