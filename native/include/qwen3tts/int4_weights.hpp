// INT4 weights for the runner's own products (docs/OPENVINO.md §10).
//
// OpenVINO's CPU plugin multiplies a vector by group-wise INT4 weights at ~7.5 GB/s of
// weights per core: it decompresses them to f32 and runs an f32 kernel, so it is bound by
// arithmetic, not by memory, and a decode step (talker, subcode: one row per stream) spends
// most of its time there. The runner's own stacks (layer_stack.hpp) instead quantize the
// activations to int8 per weight group (as the plugin's dynamic quantization does) and
// multiply with byte dot products (AVX-512 VNNI, AVX-VNNI, or AVX2's multiply-adds:
// kernels.hpp) straight from 4-bit weights repacked for them, reading the weights at the
// memory's rate.
#pragma once

#include <cstdint>
#include <vector>

#include <openvino/op/constant.hpp>

#include "qwen3tts/quantized_matrix.hpp"

namespace qwen3tts {

// Weights [N, K] of `N` outputs, INT4 symmetric with one scale per group of `group` inputs,
// laid out for the kernel: 16 output rows side by side, 8 inputs per 64-byte line (each byte
// holds inputs k and k+4 of one row, as unsigned nibbles q+8).
class Int4Weights : public QuantizedMatrix {
 public:
  // From nncf's constants: q [N, K/group, group] i4 and scale [N, K/group, 1] (f16 or f32).
  Int4Weights(const ov::op::v0::Constant& q, const ov::op::v0::Constant& scale,
              const Kernels& kernels = best_kernels());
  // A pass is a pair of blocks (the last may be alone), which share the activations' loads.
  void multiply_passes(const QuantizedRows& x, float* y, int64_t begin, int64_t end) const override;

 private:
  WeightBytes nibbles_;  // [N/16][K/8][64]
  std::vector<float> scales_;     // [N/16][K/group][16]
};

}  // namespace qwen3tts
