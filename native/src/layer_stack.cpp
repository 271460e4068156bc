#include "qwen3tts/layer_stack.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "qwen3tts/int4_weights.hpp"
#include "qwen3tts/mapped_ir.hpp"

namespace qwen3tts {

NamedWeights::NamedWeights(const ov::Model& model, std::string graph) : model_(model), graph_(std::move(graph)) {
  for (const auto& node : model.get_ops())
    if (auto c = ov::as_type_ptr<ov::op::v0::Constant>(node)) by_name_[node->get_friendly_name()] = c;
}

ConstantPtr NamedWeights::constant(const std::string& name) const {
  auto it = by_name_.find(graph_ + "." + name);
  if (it == by_name_.end()) throw std::invalid_argument("the " + graph_ + " graph has no weight " + graph_ + "." + name);
  return it->second;
}

std::vector<float> NamedWeights::vector(const std::string& name) const {
  ConstantPtr c = constant(name);
  if (c->get_element_type() != ov::element::f32 && c->get_element_type() != ov::element::f16)
    throw std::invalid_argument(graph_ + "." + name + " is not a plain float tensor");
  return c->cast_vector<float>();
}

std::pair<ConstantPtr, ConstantPtr> NamedWeights::compressed(const std::string& name) const {
  ConstantPtr q = constant(name);
  const auto users = q->output(0).get_target_inputs();
  if (users.size() != 1) throw std::invalid_argument(graph_ + "." + name + " is not a compressed weight");
  ov::Node* convert = users.begin()->get_node();
  const auto next = convert->output(0).get_target_inputs();
  if (std::string(convert->get_type_name()) != "Convert" || next.size() != 1 ||
      std::string(next.begin()->get_node()->get_type_name()) != "Multiply")
    throw std::invalid_argument(graph_ + "." + name + " is not nncf's symmetric compression");
  ov::Node* multiply = next.begin()->get_node();
  auto scale = ov::as_type_ptr<ov::op::v0::Constant>(
      multiply->input_value(1 - next.begin()->get_index()).get_node_shared_ptr());
  if (!scale) throw std::invalid_argument(graph_ + "." + name + " has no constant scale");
  return {q, scale};
}

std::unique_ptr<QuantizedMatrix> NamedWeights::matrix(const std::string& name, const Kernels& kernels) const {
  auto [q, scale] = compressed(name);
  std::unique_ptr<QuantizedMatrix> m;
  if (q->get_element_type() == ov::element::i4) m = std::make_unique<Int4Weights>(*q, *scale, kernels);
  else if (q->get_element_type() == ov::element::i8) m = std::make_unique<Int8Weights>(*q, *scale, kernels);
  else throw std::invalid_argument(graph_ + "." + name + " is neither INT4 nor INT8");
  release_mapped(q->get_data_ptr(), q->get_byte_size());  // copied: its file pages need not stay
  return m;
}

std::unique_ptr<EmbeddingTable> NamedWeights::table(const std::string& name, std::shared_ptr<const void> owner) const {
  auto [q, scale] = compressed(name);
  return std::make_unique<EmbeddingTable>(q, *scale, std::move(owner));  // throws unless INT8
}

LayerStack::LayerStack(const NamedWeights& w, const Kernels& k) : kernels(k) {
  w.require(w.info<std::string>("weight_names") == "1", "unknown weight_names version");
  const int64_t count = w.info<int64_t>("layers");
  heads = w.info<int64_t>("heads");
  kv_heads = w.info<int64_t>("kv_heads");
  head_dim = w.info<int64_t>("head_dim");
  eps = static_cast<float>(w.info<double>("rms_norm_eps"));
  theta = w.info<double>("rope_theta");
  w.require(count > 0 && heads > 0 && kv_heads > 0 && heads % kv_heads == 0, "bad layer stack in rt_info");
  final_norm = w.vector("norm");
  hidden = static_cast<int64_t>(final_norm.size());
  w.require(head_dim % 16 == 0 && hidden % 16 == 0, "widths must be multiples of 16 (the vector loops')");
  for (int64_t i = 0; i < count; ++i) {
    const std::string p = "layer" + std::to_string(i) + ".";
    Layer l{w.vector(p + "input_norm"), w.vector(p + "q_norm"), w.vector(p + "k_norm"), w.vector(p + "post_norm"),
            w.matrix(p + "qkv", k),     w.matrix(p + "o", k),   w.matrix(p + "gate_up", k), w.matrix(p + "down", k)};
    intermediate = l.gate_up->rows() / 2;
    w.require(static_cast<int64_t>(l.q_norm.size()) == head_dim && static_cast<int64_t>(l.k_norm.size()) == head_dim &&
                  static_cast<int64_t>(l.input_norm.size()) == hidden &&
                  static_cast<int64_t>(l.post_norm.size()) == hidden,
              "norm widths");
    w.require(l.qkv->cols() == hidden && l.qkv->rows() == qkv_width() && l.o->cols() == heads * head_dim &&
                  l.o->rows() == hidden && l.gate_up->cols() == hidden && l.down->cols() == intermediate &&
                  l.down->rows() == hidden && intermediate % 16 == 0,
              "layer " + std::to_string(i) + " matrix shapes");
    layers.push_back(std::move(l));
  }
  for (int64_t j = 0; j < head_dim / 2; ++j)
    inv_freq.push_back(1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * j) / head_dim));
}

void LayerStack::rope(int64_t position, float* cos, float* sin) const {
  const int64_t half = head_dim / 2;
  for (int64_t j = 0; j < half; ++j) {
    const float angle = static_cast<float>(position) * inv_freq[j];
    cos[j] = std::cos(angle);
    sin[j] = std::sin(angle);
  }
}

void LayerStack::norm_and_rotate(const float* head, const std::vector<float>& norm, const float* c, const float* s,
                                 float factor, float* scratch, float* out) const {
  const int64_t half = head_dim / 2;
  rms_norm(kernels, head, norm.data(), head_dim, eps, scratch);
  for (int64_t j = 0; j < half; ++j) {  // x·cos + rotate_half(x)·sin
    out[j] = (scratch[j] * c[j] - scratch[j + half] * s[j]) * factor;
    out[j + half] = (scratch[j + half] * c[j] + scratch[j] * s[j]) * factor;
  }
}

// The loops between products are compiled for the baseline x86-64 (no FMA contraction), the
// same code whichever kernels multiply: only the products and dot products are the
// instruction set's, and those give the same numbers on every one (kernels.hpp).
void rms_norm(const Kernels& k, const float* x, const float* weight, int64_t n, float eps, float* out) {
  const float inverse = 1.0f / std::sqrt(k.dot(x, x, n) / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * inverse);
}

void StackWork::prepare(const LayerStack& s, int64_t rows, int members, int64_t widest) {
  const size_t n = static_cast<size_t>(rows);
  x.resize(n * s.hidden);
  normed.resize(n * s.hidden);
  out.resize(n * s.hidden);
  qkv.resize(n * s.qkv_width());
  attention.resize(n * s.heads * s.head_dim);
  gate_up.resize(n * 2 * s.intermediate);
  act.resize(n * s.intermediate);
  quantized.resize(static_cast<size_t>(members));
  // quantize_rows resizes within these capacities: the widest product input, groups of ≥ 16
  const size_t most = n * static_cast<size_t>(std::max({widest, s.hidden, s.intermediate, s.heads * s.head_dim}));
  for (QuantizedRows& q : quantized) {
    q.values.reserve(most);
    q.scales.reserve(most / 16);
    q.sums.reserve(most / 16);
  }
}

void product(ThreadTeam& team, int rank, StackWork& work, const QuantizedMatrix& m, const float* x, int64_t n,
             float* y) {
  QuantizedRows& q = work.quantized[rank];
  quantize_rows(m.kernels(), x, n, m.cols(), m.group(), q);
  // passes handed out in chunks rather than split evenly: a member on a slower core (or one
  // the system preempted) takes fewer instead of holding up the barrier
  team.share(rank, m.passes(), [&](int64_t begin, int64_t end) { m.multiply_passes(q, y, begin, end); });
  team.barrier();
}

}  // namespace qwen3tts
