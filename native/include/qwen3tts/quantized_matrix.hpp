// Weight matrices multiplied with int8 activations by byte dot products, the runner's own
// products (docs/OPENVINO.md §10): the activations are quantized to int8 per group of inputs
// (as the CPU plugin's dynamic quantization does), the weights stay as nncf stored them (INT4
// group-wise, int4_weights.hpp, or INT8 per row, here), repacked for the kernels of one
// instruction set (kernels.hpp). A product can be split by output blocks over the members of
// a ThreadTeam (layer_stack.hpp's product()).
#pragma once

#include <cstdint>
#include <vector>

#include <openvino/op/constant.hpp>

#include "qwen3tts/huge_pages.hpp"
#include "qwen3tts/kernels.hpp"

namespace qwen3tts {

// Activations [m, K] as int8 per group: values, one scale per row and group (max|x|/127),
// and Σ values per row and group (the weights are stored unsigned, as q + offset, which adds
// offset · Σ x to each dot product: the kernels take it off).
struct QuantizedRows {
  int64_t rows = 0, cols = 0, group = 0;
  std::vector<int8_t> values;
  std::vector<float> scales;
  std::vector<int32_t> sums;
};

// x [m, cols] quantized into `out` (its buffers reused); cols a multiple of group, group of 16.
void quantize_rows(const Kernels& kernels, const float* x, int64_t m, int64_t cols, int64_t group, QuantizedRows& out);

// A matrix's repacked weights: read whole by every decode step, so in huge pages where the
// kernel gives them (huge_pages.hpp).
using WeightBytes = std::vector<uint8_t, HugePageAllocator<uint8_t>>;

// A matrix the kernels multiply: y [m, rows] = x [m, cols] · Wᵀ.
class QuantizedMatrix {
 public:
  virtual ~QuantizedMatrix() = default;
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // The group the activations are quantized by for this matrix.
  int64_t group() const { return group_; }
  // The instruction set's kernels this matrix is multiplied by.
  const Kernels& kernels() const { return *kernels_; }
  // Output blocks of kBlockRows rows, and how many of them a pass of the kernel takes together
  // (INT4: two, which share the activations' loads): a product is split by whole passes.
  int64_t blocks() const { return rows_ / kBlockRows; }
  int64_t pass_blocks() const { return pass_blocks_; }
  int64_t passes() const { return (blocks() + pass_blocks_ - 1) / pass_blocks_; }
  // y's blocks of passes [begin, end). Every row is summed in the same order whichever range
  // it falls in, so any split of one product gives the same floats; its ranges may run at
  // once, each on its own thread.
  virtual void multiply_passes(const QuantizedRows& x, float* y, int64_t begin, int64_t end) const = 0;
  // The passes of part `part` of `parts`, split evenly (the whole product: 0 of 1).
  void multiply_part(const QuantizedRows& x, float* y, int part, int parts) const {
    multiply_passes(x, y, passes() * part / parts, passes() * (part + 1) / parts);
  }

 protected:
  QuantizedMatrix(const Kernels& kernels, int64_t pass_blocks) : pass_blocks_(pass_blocks), kernels_(&kernels) {}
  int64_t rows_ = 0, cols_ = 0, group_ = 0;
  const int64_t pass_blocks_;
  const Kernels* kernels_;
};

// Weights [N, K], INT8 symmetric with one scale per row (nncf's INT8_SYM), stored as q + 128
// unsigned, 4 inputs of 16 rows per 64-byte line.
class Int8Weights : public QuantizedMatrix {
 public:
  // From nncf's constants: q [N, K] i8 and scale [N, 1] (f16 or f32). The activations are
  // quantized per group of 128 inputs (or of K, if 128 does not divide it).
  Int8Weights(const ov::op::v0::Constant& q, const ov::op::v0::Constant& scale,
              const Kernels& kernels = best_kernels());
  void multiply_passes(const QuantizedRows& x, float* y, int64_t begin, int64_t end) const override;

 private:
  WeightBytes bytes_;  // [N/16][K/4][64]
  std::vector<float> scales_;   // [N]
};

}  // namespace qwen3tts
