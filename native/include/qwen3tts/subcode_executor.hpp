// Who runs the code predictor (docs/MODEL.md §4) for the runner: one call fills codes 1..15
// and the frame embedding of k rows. Two executors implement it — the runner's own layer
// stack on a CPU (subcode_cpu.hpp) and OpenVINO's subcode graph (subcode_graph.hpp) — and
// executors.hpp picks one at load, once.
#pragma once

#include <cstdint>
#include <string>

namespace qwen3tts {

// The subcode graph's inputs and outputs for k rows, as plain arrays (convert/subcode.py's
// INPUTS and OUTPUTS): hidden [k × talker hidden], code0 [k], temperature/top_k/top_p [k],
// uniform [k × steps] in; codes [k × steps], frame embedding [k × talker hidden] out.
struct SubcodeBatch {
  int64_t rows = 0;
  const float* hidden = nullptr;
  const int64_t* code0 = nullptr;
  const float* temperature = nullptr;
  const int64_t* top_k = nullptr;
  const float* top_p = nullptr;
  const float* uniform = nullptr;
  int64_t* codes = nullptr;
  float* embedding = nullptr;
};

class SubcodeExecutor {
 public:
  virtual ~SubcodeExecutor() = default;
  // Codes it draws per row (groups - 1) and the talker's hidden width it takes.
  virtual int64_t steps() const = 0;
  virtual int64_t talker_hidden() const = 0;
  // What runs it, for the log: "subcode_cpu, <kernels>, N threads" or "openvino".
  virtual std::string describe() const = 0;
  virtual void run(const SubcodeBatch& batch) = 0;
};

}  // namespace qwen3tts
