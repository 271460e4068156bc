#include "testing/int4_linear_op.hpp"

#include <map>

#include <openvino/core/graph_util.hpp>
#include <openvino/core/rt_info.hpp>
#include <openvino/op/constant.hpp>
#include <openvino/op/convert.hpp>
#include <openvino/op/matmul.hpp>
#include <openvino/op/multiply.hpp>
#include <openvino/op/reshape.hpp>

namespace qwen3tts::testing {

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
  if (m > 0) {
    QuantizedRows q;
    quantize_rows(weights_->kernels(), inputs[0].data<const float>(), m, weights_->cols(), weights_->group(), q);
    weights_->multiply_part(q, outputs[0].data<float>(), 0, 1);
  }
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

}  // namespace qwen3tts::testing
