// The runner's own matrix product for INT4 weights (docs/OPENVINO.md §10).
//
// OpenVINO's CPU plugin multiplies a vector by group-wise INT4 weights at ~7.5 GB/s of
// weights per core: it decompresses them to f32 and runs an f32 kernel, so it is bound by
// arithmetic, not by memory, and a decode step (talker, subcode: one row per stream) spends
// most of its time there. This kernel quantizes the activations to int8 per weight group
// (as the plugin's dynamic quantization does) and multiplies with byte dot products (AVX-512
// VNNI, AVX-VNNI, or AVX2's multiply-adds: kernels.hpp) straight from 4-bit weights repacked for it,
// reading the weights at the memory's rate. `use_int4_linear` swaps it in for every MatMul of a graph whose weights are INT4
// (nncf's symmetric group-wise pattern); everything else stays OpenVINO's.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <openvino/core/node.hpp>
#include <openvino/core/model.hpp>
#include <openvino/op/constant.hpp>
#include <openvino/op/op.hpp>

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
  // y [m, N] = x [m, K] · Wᵀ, x quantized to int8 per row and group, over TBB's threads
  // (the CPU plugin's: this is a node of its graph).
  void multiply(const float* x, int64_t m, float* y) const;
  void multiply_part(const QuantizedRows& x, float* y, int part, int parts) const override;

 private:
  void multiply_pairs(const QuantizedRows& x, float* y, int64_t begin, int64_t end) const;  // pairs of blocks
  WeightBytes nibbles_;  // [N/16][K/8][64]
  std::vector<float> scales_;     // [N/16][K/group][16]
};

// x [..., K] -> x · Wᵀ [..., N], f32 in and out.
class Int4Linear : public ov::op::Op {
 public:
  OPENVINO_OP("Int4Linear", "qwen3tts");
  Int4Linear(const ov::Output<ov::Node>& x, std::shared_ptr<const Int4Weights> weights);
  void validate_and_infer_types() override;
  std::shared_ptr<ov::Node> clone_with_new_inputs(const ov::OutputVector& inputs) const override;
  bool visit_attributes(ov::AttributeVisitor& visitor) override;
  bool evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const override;
  bool has_evaluate() const override { return true; }

 private:
  std::shared_ptr<const Int4Weights> weights_;
};

// Replaces each MatMul x · Wᵀ whose W is nncf's INT4 decompression of a constant by an
// Int4Linear multiplying with `kernels`; returns how many it replaced.
int use_int4_linear(const std::shared_ptr<ov::Model>& model, const Kernels& kernels = best_kernels());

}  // namespace qwen3tts
