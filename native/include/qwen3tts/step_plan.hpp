// What the batch (wyoming_qwen3tts/engine/batch.py) hands the native runner each step and
// what it gets back: the C++ side of the engine line (wyoming_qwen3tts/engine/step.py,
// which documents each field). The arrays are flat, row-major.
#pragma once

#include <cstdint>
#include <vector>

#include "qwen3tts/sampling.hpp"

namespace qwen3tts {

struct StepPlan {
  std::vector<int32_t> copies;         // [c × 2] KV blocks (source, target), copied in order before the call
  std::vector<float> embeds;           // [T × hidden] every fed row, sequence after sequence
  std::vector<int64_t> positions;      // [T]
  std::vector<int32_t> past_lens;      // [n] tokens each sequence has in the cache already
  std::vector<int32_t> begins;         // [n + 1] where each sequence's rows begin
  std::vector<int32_t> block_indices;  // every sequence's block table, one after another
  std::vector<int32_t> block_begins;   // [n + 1] where each table begins
  int32_t max_context = 0;             // the longest sequence's cached + fed tokens
  std::vector<int64_t> sample_rows;    // [k] rows whose output is sampled
  // Per sampled row, in the order of sample_rows:
  std::vector<SamplingParams> params;   // [k]
  std::vector<int64_t> history;         // group-0 codes so far of every sampled row, one after another
  std::vector<int64_t> history_begins;  // [k + 1] where each row's history begins
  std::vector<double> uniforms;         // [k × groups] the frame's draws: group 0, then the subcode steps
};

struct StepOutput {
  std::vector<int64_t> codes;      // [k × groups]: code 0, then the subcode's; an EOS row: eos, zeros
  std::vector<float> embeddings;   // [k × hidden]: the frame's embedding; zeros for an EOS row
};

// One stream's next codec chunk.
struct CodecChunk {
  int64_t stream = 0;           // the id open_stream was given
  std::vector<int64_t> codes;   // [m × groups] frame-major, 1 <= m <= size
  int size = 0;                 // the graph's chunk length (a shorter chunk is padded and cut)
};

}  // namespace qwen3tts
