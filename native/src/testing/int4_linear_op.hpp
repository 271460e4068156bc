// Test-only: an OpenVINO op multiplying by the runner's INT4 product (int4_weights.hpp), and
// the pass that swaps it into a graph for every INT4 product. The runner's own stacks are
// checked against the converted graph run this way (tests/test_talker_cpu.py,
// tests/test_subcode_cpu.py): with the products' arithmetic the same on both sides, the rest
// — norms, RoPE, attention, sampling — must agree to float rounding. No runner path uses it.
#pragma once

#include <memory>

#include <openvino/core/model.hpp>
#include <openvino/op/op.hpp>

#include "qwen3tts/int4_weights.hpp"

namespace qwen3tts::testing {

// x [..., K] -> x · Wᵀ [..., N], f32 in and out, on the calling thread.
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
int use_int4_linear(const std::shared_ptr<ov::Model>& model, const Kernels& kernels);

}  // namespace qwen3tts::testing
