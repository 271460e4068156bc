// A Qwen3 layer stack run by the runner itself on a CPU (docs/MODEL.md §3.2): the weights of a
// graph whose Constants carry stable names (wyoming_qwen3tts/convert/transformer.py
// name_weights, mark_stack), the products on a ThreadTeam (quantized_matrix.hpp), the small ops
// between them as plain loops. The code predictor (subcode_cpu.hpp) and the talker
// (talker_cpu.hpp) share it; they differ in where their keys and values live and who attends.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <openvino/core/model.hpp>
#include <openvino/op/constant.hpp>

#include "qwen3tts/embedding_table.hpp"
#include "qwen3tts/quantized_matrix.hpp"
#include "qwen3tts/thread_team.hpp"

namespace qwen3tts {

using ConstantPtr = std::shared_ptr<ov::op::v0::Constant>;

// A converted graph's weights by the names convert/transformer.py gives their Constants
// (`<graph>.<name>`), and its rt_info. Every failure is std::invalid_argument naming the graph:
// the runner then runs the graph itself instead (an older or fp16/fp32 conversion).
class NamedWeights {
 public:
  NamedWeights(const ov::Model& model, std::string graph);

  bool has(const std::string& name) const { return by_name_.count(graph_ + "." + name) > 0; }
  ConstantPtr constant(const std::string& name) const;
  // A norm or bias: stored as it is (f32, or f16 for the fp16 format).
  std::vector<float> vector(const std::string& name) const;
  // nncf's INT4 group-wise or INT8 per-row matrix, repacked for `kernels`.
  std::unique_ptr<QuantizedMatrix> matrix(const std::string& name, const Kernels& kernels) const;
  // An INT8 embedding table, read in place: `owner` keeps the memory the model's constants
  // point into alive (MappedIr::mapping(); null where the constant itself does).
  std::unique_ptr<EmbeddingTable> table(const std::string& name, std::shared_ptr<const void> owner) const;
  // rt_info qwen3tts/<key>.
  template <typename T>
  T info(const char* key) const {
    if (!model_.has_rt_info("qwen3tts", key))
      throw std::invalid_argument("the " + graph_ + " graph has no rt_info qwen3tts/" + key +
                                  " (converted by an older version)");
    return model_.get_rt_info<T>("qwen3tts", key);
  }
  void require(bool ok, const std::string& what) const {
    if (!ok) throw std::invalid_argument(graph_ + " graph: " + what);
  }

 private:
  // nncf's decompression of a matrix: Multiply(Convert(q), scale), q i4 [N, G, group] or i8 [N, K].
  std::pair<ConstantPtr, ConstantPtr> compressed(const std::string& name) const;

  const ov::Model& model_;
  std::string graph_;
  std::map<std::string, ConstantPtr> by_name_;
};

struct Layer {
  std::vector<float> input_norm, q_norm, k_norm, post_norm;
  std::unique_ptr<QuantizedMatrix> qkv, o, gate_up, down;
};

// The stack's numbers (rt_info) and weights: layer<i>.* and the final `norm`.
struct LayerStack {
  LayerStack(const NamedWeights& w, const Kernels& kernels);

  int64_t qkv_width() const { return (heads + 2 * kv_heads) * head_dim; }
  // RoPE at `position` as the official code computes it, in float32 (convert/ops.py
  // rope_tables): cos and sin [head_dim / 2].
  void rope(int64_t position, float* cos, float* sin) const;
  // A query or key head [head_dim] normed by `norm`, rotated by (cos, sin) and scaled by `factor`.
  void norm_and_rotate(const float* head, const std::vector<float>& norm, const float* cos, const float* sin,
                       float factor, float* scratch, float* out) const;

  std::vector<Layer> layers;
  std::vector<float> final_norm;
  std::vector<float> inv_freq;  // [head_dim / 2] RoPE's frequencies
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0;
  float eps = 0;
  double theta = 0;
  const Kernels& kernels;
};

// weight · x / sqrt(mean(x²) + eps) over n values (ops.rms_norm), n a multiple of 16.
void rms_norm(const Kernels& k, const float* x, const float* weight, int64_t n, float eps, float* out);

// The buffers of one call over up to `rows` rows, sized by prepare() before a team runs (a
// job allocates nothing, so it cannot throw: ThreadTeam::run's contract).
struct StackWork {
  std::vector<float> x, normed, qkv, attention, gate_up, act, out;
  std::vector<QuantizedRows> quantized;  // one per team member
  // `widest`: the widest product input besides the stack's own (a head, a projection).
  void prepare(const LayerStack& s, int64_t rows, int members, int64_t widest);
};

// y [n × rows of m] = x [n × cols] · mᵀ, its output blocks shared out over the team in chunks
// (ThreadTeam::share); ends at a barrier. Each member quantizes the same rows itself: less than
// a barrier costs. Each output row is summed by one member in one order, whichever member
// and however many there are: the same floats on any team.
void product(ThreadTeam& team, int rank, StackWork& work, const QuantizedMatrix& m, const float* x, int64_t n,
             float* y);

// [begin, end) of `count` items for member `rank` of `members`: an even split.
inline std::pair<int64_t, int64_t> share_of(int64_t count, int rank, int members) {
  return {count * rank / members, count * (rank + 1) / members};
}

// Every layer over work.x [n × hidden], in place. attend(rank, layer) runs on every member
// and turns work.qkv [n × qkv_width] into work.attention [n × heads·head_dim]; a barrier
// follows it. The small ops between products are split over the team (norms and SwiGLU by
// rows, residual adds by elements), each share between two barriers the products need anyway.
template <typename Attend>
void run_layers(const LayerStack& s, StackWork& w, ThreadTeam& team, int rank, int64_t n, Attend&& attend) {
  const int members = team.size();
  const auto [row0, row1] = share_of(n, rank, members);
  const auto [x0, x1] = share_of(n * s.hidden, rank, members);
  auto norm_rows = [&](const std::vector<float>& weight) {
    for (int64_t r = row0; r < row1; ++r)
      rms_norm(s.kernels, w.x.data() + r * s.hidden, weight.data(), s.hidden, s.eps, w.normed.data() + r * s.hidden);
  };
  auto add_out = [&] {
    for (int64_t i = x0; i < x1; ++i) w.x[i] += w.out[i];
  };
  for (size_t index = 0; index < s.layers.size(); ++index) {
    const Layer& l = s.layers[index];
    norm_rows(l.input_norm);
    team.barrier();
    product(team, rank, w, *l.qkv, w.normed.data(), n, w.qkv.data());
    attend(rank, static_cast<int64_t>(index));
    team.barrier();
    product(team, rank, w, *l.o, w.attention.data(), n, w.out.data());
    add_out();
    team.barrier();
    norm_rows(l.post_norm);
    team.barrier();
    product(team, rank, w, *l.gate_up, w.normed.data(), n, w.gate_up.data());
    for (int64_t r = row0; r < row1; ++r)  // silu(gate)·up
      s.kernels.swiglu(w.gate_up.data() + r * 2 * s.intermediate, w.gate_up.data() + (2 * r + 1) * s.intermediate,
                       s.intermediate, w.act.data() + r * s.intermediate);
    team.barrier();
    product(team, rank, w, *l.down, w.act.data(), n, w.out.data());
    add_out();
    team.barrier();
  }
}

}  // namespace qwen3tts
