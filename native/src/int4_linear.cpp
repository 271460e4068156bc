#include "qwen3tts/int4_linear.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

#include <openvino/core/graph_util.hpp>
#include <openvino/core/rt_info.hpp>
#include <openvino/op/convert.hpp>
#include <openvino/op/matmul.hpp>
#include <openvino/op/multiply.hpp>
#include <openvino/op/reshape.hpp>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

namespace qwen3tts {

Int4Weights::Int4Weights(const ov::op::v0::Constant& q, const ov::op::v0::Constant& scale, const Kernels& kernels)
    : QuantizedMatrix(kernels) {
  const ov::Shape& shape = q.get_shape();
  if (q.get_element_type() != ov::element::i4 || shape.size() != 3)
    throw std::invalid_argument("Int4Weights: expected i4 weights [N, groups, group]");
  rows_ = static_cast<int64_t>(shape[0]);
  group_ = static_cast<int64_t>(shape[2]);
  cols_ = static_cast<int64_t>(shape[1]) * group_;
  if (rows_ % kBlockRows != 0 || group_ % 16 != 0)  // 16 is a multiple of kInt4LineInputs
    throw std::invalid_argument("Int4Weights: rows must be a multiple of 16 and the group of 16");
  const std::vector<float> s = scale.cast_vector<float>();
  const int64_t groups = cols_ / group_;
  if (static_cast<int64_t>(s.size()) != rows_ * groups)
    throw std::invalid_argument("Int4Weights: expected one scale per row and group");
  const auto* packed = static_cast<const uint8_t*>(q.get_data_ptr());
  auto nibble = [&](int64_t n, int64_t k) {  // q + 8, unsigned (i4 is two's complement, low nibble first)
    const int64_t i = n * cols_ + k;
    return static_cast<uint8_t>(((packed[i / 2] >> (4 * (i % 2))) & 0x0F) ^ 0x08);
  };
  nibbles_.resize(static_cast<size_t>(rows_ * cols_ / 2));
  scales_.resize(static_cast<size_t>(rows_ * groups));
  for (int64_t block = 0; block < rows_ / kBlockRows; ++block) {
    uint8_t* out = nibbles_.data() + block * (cols_ / 2) * kBlockRows;
    for (int64_t line = 0; line < cols_ / kInt4LineInputs; ++line)
      for (int64_t lane = 0; lane < kBlockRows; ++lane)
        for (int64_t i = 0; i < 4; ++i) {
          const int64_t n = block * kBlockRows + lane, k = line * kInt4LineInputs + i;
          out[line * 64 + lane * 4 + i] = static_cast<uint8_t>(nibble(n, k) | (nibble(n, k + 4) << 4));
        }
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t lane = 0; lane < kBlockRows; ++lane)
        scales_[(block * groups + g) * kBlockRows + lane] = s[(block * kBlockRows + lane) * groups + g];
  }
}

void Int4Weights::multiply_part(const QuantizedRows& x, float* y, int part, int parts) const {
  const int64_t blocks = rows_ / kBlockRows, pairs = (blocks + 1) / 2;
  multiply_pairs(x, y, pairs * part / parts, pairs * (part + 1) / parts);
}

void Int4Weights::multiply_pairs(const QuantizedRows& x, float* y, int64_t begin, int64_t end) const {
  const int64_t blocks = rows_ / kBlockRows;
  kernels_->int4_blocks(nibbles_.data(), scales_.data(), x, 2 * begin, std::min(2 * end, blocks), rows_, y);
}

void Int4Weights::multiply(const float* x, int64_t m, float* y) const {
  QuantizedRows q;
  quantize_rows(*kernels_, x, m, cols_, group_, q);
  const int64_t pairs = (rows_ / kBlockRows + 1) / 2;
  // One range per thread (static): a call is ~20-150 µs, so the partitioner's own tasks
  // and stealing would cost a noticeable share of it.
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, pairs), [&](const tbb::blocked_range<int64_t>& range) {
    multiply_pairs(q, y, range.begin(), range.end());
  }, tbb::static_partitioner());
}

Int4Linear::Int4Linear(const ov::Output<ov::Node>& x, std::shared_ptr<const Int4Weights> weights)
    : Op({x}), weights_(std::move(weights)) {
  constructor_validate_and_infer_types();
}

void Int4Linear::validate_and_infer_types() {
  ov::PartialShape shape = get_input_partial_shape(0);
  NODE_VALIDATION_CHECK(this, get_input_element_type(0) == ov::element::f32, "Int4Linear takes f32 input");
  NODE_VALIDATION_CHECK(this, shape.rank().is_static() && shape.size() >= 1 && shape[shape.size() - 1].compatible(
                                  weights_->cols()), "Int4Linear: the last axis must have ", weights_->cols(), " inputs");
  shape[shape.size() - 1] = weights_->rows();
  set_output_type(0, ov::element::f32, shape);
}

std::shared_ptr<ov::Node> Int4Linear::clone_with_new_inputs(const ov::OutputVector& inputs) const {
  check_new_args_count(this, inputs);
  return std::make_shared<Int4Linear>(inputs.at(0), weights_);
}

bool Int4Linear::visit_attributes(ov::AttributeVisitor& visitor) {
  int64_t rows = weights_->rows(), cols = weights_->cols();
  visitor.on_attribute("rows", rows);
  visitor.on_attribute("cols", cols);
  return true;
}

bool Int4Linear::evaluate(ov::TensorVector& outputs, const ov::TensorVector& inputs) const {
  ov::Shape shape = inputs[0].get_shape();
  const int64_t m = static_cast<int64_t>(ov::shape_size(shape)) / weights_->cols();
  shape.back() = static_cast<size_t>(weights_->rows());
  outputs[0].set_shape(shape);
  if (m > 0) weights_->multiply(inputs[0].data<const float>(), m, outputs[0].data<float>());
  return true;
}

int use_int4_linear(const std::shared_ptr<ov::Model>& model, const Kernels& kernels) {
  using ov::as_type_ptr;
  std::map<const ov::Node*, std::shared_ptr<const Int4Weights>> packed;  // shared weights are packed once
  int replaced = 0;
  for (const auto& node : model->get_ordered_ops()) {
    auto matmul = as_type_ptr<ov::op::v0::MatMul>(node);
    if (!matmul || matmul->get_transpose_a() || !matmul->get_transpose_b()) continue;
    auto w = matmul->input_value(1).get_node_shared_ptr();
    if (auto convert = as_type_ptr<ov::op::v0::Convert>(w)) w = convert->input_value(0).get_node_shared_ptr();
    auto reshape = as_type_ptr<ov::op::v1::Reshape>(w);
    auto scaled = reshape ? as_type_ptr<ov::op::v1::Multiply>(reshape->input_value(0).get_node_shared_ptr()) : nullptr;
    if (!scaled) continue;
    std::shared_ptr<ov::op::v0::Constant> q, scale;
    for (size_t i = 0; i < 2; ++i) {
      auto in = scaled->input_value(i).get_node_shared_ptr();
      if (auto c = as_type_ptr<ov::op::v0::Constant>(in)) scale = c;
      else if (auto convert = as_type_ptr<ov::op::v0::Convert>(in))
        q = as_type_ptr<ov::op::v0::Constant>(convert->input_value(0).get_node_shared_ptr());
    }
    if (!q || !scale || q->get_element_type() != ov::element::i4 || q->get_shape().size() != 3) continue;
    const ov::Shape& qs = q->get_shape();
    if (scale->get_shape() != ov::Shape{qs[0], qs[1], 1} || qs[0] % kBlockRows != 0 || qs[2] % 16 != 0) continue;
    auto& weights = packed[q.get()];
    if (!weights) weights = std::make_shared<const Int4Weights>(*q, *scale, kernels);
    auto linear = std::make_shared<Int4Linear>(matmul->input_value(0), weights);
    linear->set_friendly_name(matmul->get_friendly_name());
    ov::copy_runtime_info(matmul, linear);
    ov::replace_node(matmul, linear);
    ++replaced;
  }
  return replaced;
}

}  // namespace qwen3tts
