#include "qwen3tts/subcode_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>

#include <openvino/op/constant.hpp>

#include "qwen3tts/int4_linear.hpp"

namespace qwen3tts {

namespace {

constexpr int64_t kTopKMax = 64;  // convert/subcode.py's TOP_K_MAX: sampled rows choose among at most this many

using ConstantPtr = std::shared_ptr<ov::op::v0::Constant>;

// The graph's weights by the names convert/subcode.py gives their Constants.
class NamedWeights {
 public:
  explicit NamedWeights(const ov::Model& model) {
    for (const auto& node : model.get_ops())
      if (auto c = ov::as_type_ptr<ov::op::v0::Constant>(node)) by_name_[node->get_friendly_name()] = c;
  }

  bool has(const std::string& name) const { return by_name_.count("subcode." + name) > 0; }

  ConstantPtr constant(const std::string& name) const {
    auto it = by_name_.find("subcode." + name);
    if (it == by_name_.end()) throw std::invalid_argument("the subcode graph has no weight subcode." + name);
    return it->second;
  }

  // A norm or bias: stored as it is (f32, or f16 for the fp16 format).
  std::vector<float> vector(const std::string& name) const {
    ConstantPtr c = constant(name);
    if (c->get_element_type() != ov::element::f32 && c->get_element_type() != ov::element::f16)
      throw std::invalid_argument("subcode." + name + " is not a plain float tensor");
    return c->cast_vector<float>();
  }

  // nncf's decompression of a matrix: Multiply(Convert(q), scale), q i4 [N, G, group] or i8 [N, K].
  std::pair<ConstantPtr, ConstantPtr> compressed(const std::string& name) const {
    ConstantPtr q = constant(name);
    const auto users = q->output(0).get_target_inputs();
    if (users.size() != 1) throw std::invalid_argument("subcode." + name + " is not a compressed weight");
    ov::Node* convert = users.begin()->get_node();
    const auto next = convert->output(0).get_target_inputs();
    if (std::string(convert->get_type_name()) != "Convert" || next.size() != 1 ||
        std::string(next.begin()->get_node()->get_type_name()) != "Multiply")
      throw std::invalid_argument("subcode." + name + " is not nncf's symmetric compression");
    ov::Node* multiply = next.begin()->get_node();
    auto scale = ov::as_type_ptr<ov::op::v0::Constant>(
        multiply->input_value(1 - next.begin()->get_index()).get_node_shared_ptr());
    if (!scale) throw std::invalid_argument("subcode." + name + " has no constant scale");
    return {q, scale};
  }

  std::unique_ptr<QuantizedMatrix> matrix(const std::string& name, const Kernels& kernels) const {
    auto [q, scale] = compressed(name);
    if (q->get_element_type() == ov::element::i4) return std::make_unique<Int4Weights>(*q, *scale, kernels);
    if (q->get_element_type() == ov::element::i8) return std::make_unique<Int8Weights>(*q, *scale, kernels);
    throw std::invalid_argument("subcode." + name + " is neither INT4 nor INT8");
  }

  std::unique_ptr<Int8Weights> table(const std::string& name, const Kernels& kernels) const {
    auto [q, scale] = compressed(name);
    return std::make_unique<Int8Weights>(*q, *scale, kernels);  // throws unless INT8
  }

 private:
  std::map<std::string, ConstantPtr> by_name_;
};

template <typename T>
T rt_info(const ov::Model& model, const char* key) {
  if (!model.has_rt_info("qwen3tts", key))
    throw std::invalid_argument(std::string("the subcode graph has no rt_info qwen3tts/") + key +
                                " (converted by an older version)");
  return model.get_rt_info<T>("qwen3tts", key);
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("subcode graph: " + what);
}

// The loops between products are compiled for the baseline x86-64 (no FMA contraction), the
// same code whichever kernels multiply: only the products and dot products are the
// instruction set's, and those give the same numbers on every one (kernels.hpp).

// weight · x / sqrt(mean(x²) + eps) over n values (ops.rms_norm), n a multiple of 16.
void rms_norm(const Kernels& k, const float* x, const float* weight, int64_t n, float eps, float* out) {
  const float inverse = 1.0f / std::sqrt(k.dot(x, x, n) / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * inverse);
}

// y += x over n values.
void add(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace

SubcodeCpu::SubcodeCpu(const ov::Model& model, int threads, const Kernels& kernels)
    : kernels_(kernels), team_(threads) {
  require(rt_info<std::string>(model, "weight_names") == "1", "unknown weight_names version");
  const NamedWeights w(model);
  const int64_t layers = rt_info<int64_t>(model, "layers");
  heads_count_ = rt_info<int64_t>(model, "heads");
  kv_heads_ = rt_info<int64_t>(model, "kv_heads");
  head_dim_ = rt_info<int64_t>(model, "head_dim");
  eps_ = static_cast<float>(rt_info<double>(model, "rms_norm_eps"));
  const double theta = rt_info<double>(model, "rope_theta");
  require(layers > 0 && heads_count_ > 0 && kv_heads_ > 0 && heads_count_ % kv_heads_ == 0,
          "bad layer stack in rt_info");
  final_norm_ = w.vector("norm");
  hidden_ = static_cast<int64_t>(final_norm_.size());
  require(head_dim_ % 16 == 0 && hidden_ % 16 == 0, "widths must be multiples of 16 (the vector loops')");
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = "layer" + std::to_string(i) + ".";
    Layer l{w.vector(p + "input_norm"), w.vector(p + "q_norm"), w.vector(p + "k_norm"), w.vector(p + "post_norm"),
            w.matrix(p + "qkv", kernels), w.matrix(p + "o", kernels), w.matrix(p + "gate_up", kernels),
            w.matrix(p + "down", kernels)};
    intermediate_ = l.gate_up->rows() / 2;
    require(static_cast<int64_t>(l.q_norm.size()) == head_dim_ && static_cast<int64_t>(l.k_norm.size()) == head_dim_ &&
                static_cast<int64_t>(l.input_norm.size()) == hidden_ && static_cast<int64_t>(l.post_norm.size()) == hidden_,
            "norm widths");
    require(l.qkv->cols() == hidden_ && l.qkv->rows() == (heads_count_ + 2 * kv_heads_) * head_dim_ &&
                l.o->cols() == heads_count_ * head_dim_ && l.o->rows() == hidden_ && l.gate_up->cols() == hidden_ &&
                l.down->cols() == intermediate_ && l.down->rows() == hidden_,
            "layer " + std::to_string(i) + " matrix shapes");
    layers_.push_back(std::move(l));
  }
  for (int64_t g = 0; w.has("head" + std::to_string(g)); ++g) {
    heads_.push_back(w.matrix("head" + std::to_string(g), kernels));
    tables_.push_back(w.table("embedding" + std::to_string(g), kernels));
  }
  require(!heads_.empty(), "no output heads");
  tables_.push_back(w.table("talker_embedding", kernels));
  vocab_ = heads_[0]->rows();
  talker_hidden_ = tables_.back()->cols();
  for (size_t g = 0; g < heads_.size(); ++g)
    require(heads_[g]->rows() == vocab_ && heads_[g]->cols() == hidden_ && tables_[g]->rows() == vocab_ &&
                tables_[g]->cols() == talker_hidden_,
            "head and table shapes");
  if (w.has("projection")) {
    projection_ = w.matrix("projection", kernels);
    projection_bias_ = w.vector("projection_bias");
    require(projection_->cols() == talker_hidden_ && projection_->rows() == hidden_ &&
                static_cast<int64_t>(projection_bias_.size()) == hidden_, "projection shape");
  } else {
    require(talker_hidden_ == hidden_, "no projection between different widths");
  }
  // RoPE as the official code computes it, in float32 (convert/ops.py _inv_freq)
  const int64_t half = head_dim_ / 2, positions = steps() + 1;
  for (int64_t p = 0; p < positions; ++p)
    for (int64_t j = 0; j < half; ++j) {
      const float inv_freq = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * j) / head_dim_);
      const float angle = static_cast<float>(p) * inv_freq;
      cos_.push_back(std::cos(angle));
      sin_.push_back(std::sin(angle));
    }
  work_.quantized.resize(static_cast<size_t>(team_.size()));
}

void SubcodeCpu::prepare(int64_t rows) {
  const size_t n = static_cast<size_t>(2 * rows), qkv = static_cast<size_t>((heads_count_ + 2 * kv_heads_) * head_dim_);
  Work& w = work_;
  w.inputs.resize(n * talker_hidden_);
  w.x.resize(n * hidden_);
  w.normed.resize(n * hidden_);
  w.out.resize(n * hidden_);
  w.qkv.resize(n * qkv);
  w.attention.resize(n * heads_count_ * head_dim_);
  w.gate_up.resize(n * 2 * intermediate_);
  w.act.resize(n * intermediate_);
  w.last.resize(rows * hidden_);
  w.logits.resize(rows * vocab_);
  w.first_logits.resize(rows * vocab_);
  const size_t cache = layers_.size() * rows * kv_heads_ * (steps() + 1) * head_dim_;
  w.keys.resize(cache);
  w.values.resize(cache);
  w.head.resize(head_dim_);
  w.query.resize(head_dim_);
  w.scores.resize(steps() + 1);
  w.order.resize(vocab_);
  w.probs.resize(vocab_);
  w.cumulative.resize(vocab_);
  // quantize_rows resizes within these capacities: the widest product input, groups of ≥ 16
  const size_t widest = n * static_cast<size_t>(std::max({hidden_, talker_hidden_, intermediate_, heads_count_ * head_dim_}));
  for (QuantizedRows& q : w.quantized) {
    q.values.reserve(widest);
    q.scales.reserve(widest / 16);
    q.sums.reserve(widest / 16);
  }
}

void SubcodeCpu::product(int rank, const QuantizedMatrix& w, const float* x, int64_t n, float* y) {
  QuantizedRows& q = work_.quantized[rank];  // each member quantizes the same rows: less than a barrier
  quantize_rows(kernels_, x, n, w.cols(), w.group(), q);
  w.multiply_part(q, y, rank, team_.size());
  team_.barrier();
}

void SubcodeCpu::project(int rank, int64_t n) {
  Work& w = work_;
  if (!projection_) {
    if (rank == 0) std::copy(w.inputs.begin(), w.inputs.begin() + n * hidden_, w.x.begin());
    team_.barrier();
    return;
  }
  product(rank, *projection_, w.inputs.data(), n, w.x.data());
  if (rank == 0)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < hidden_; ++i) w.x[r * hidden_ + i] += projection_bias_[i];
  team_.barrier();
}

void SubcodeCpu::attend(const Layer& layer, int64_t index, int64_t rows, int64_t first, int64_t count) {
  Work& w = work_;
  const int64_t d = head_dim_, half = d / 2, positions = steps() + 1, width = (heads_count_ + 2 * kv_heads_) * d;
  const int64_t group = heads_count_ / kv_heads_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float* normed = w.head.data();
  float* q = w.query.data();
  float* scores = w.scores.data();
  auto rotate = [&](const float* in, int64_t position, float factor, float* out) {  // x·cos + rotate_half(x)·sin
    const float* c = cos_.data() + position * half;
    const float* s = sin_.data() + position * half;
    for (int64_t j = 0; j < half; ++j) {
      out[j] = (in[j] * c[j] - in[j + half] * s[j]) * factor;
      out[j + half] = (in[j + half] * c[j] + in[j] * s[j]) * factor;
    }
  };
  for (int64_t r = 0; r < rows; ++r) {
    float* keys = w.keys.data() + (index * rows + r) * kv_heads_ * positions * d;
    float* values = w.values.data() + (index * rows + r) * kv_heads_ * positions * d;
    for (int64_t i = 0; i < count; ++i) {  // this step's keys and values into the cache
      const float* row = w.qkv.data() + (r * count + i) * width;
      for (int64_t j = 0; j < kv_heads_; ++j) {
        rms_norm(kernels_, row + (heads_count_ + j) * d, layer.k_norm.data(), d, eps_, normed);
        rotate(normed, first + i, 1.0f, keys + (j * positions + first + i) * d);
        std::copy_n(row + (heads_count_ + kv_heads_ + j) * d, d, values + (j * positions + first + i) * d);
      }
    }
    for (int64_t i = 0; i < count; ++i) {  // a query at position p sees keys 0..p
      const int64_t position = first + i, seen = position + 1;
      const float* row = w.qkv.data() + (r * count + i) * width;
      float* out = w.attention.data() + (r * count + i) * heads_count_ * d;
      for (int64_t h = 0; h < heads_count_; ++h) {
        rms_norm(kernels_, row + h * d, layer.q_norm.data(), d, eps_, normed);
        rotate(normed, position, scale, q);
        const float* k = keys + (h / group) * positions * d;
        const float* v = values + (h / group) * positions * d;
        float max = -std::numeric_limits<float>::infinity();
        for (int64_t t = 0; t < seen; ++t) {
          scores[t] = kernels_.dot(q, k + t * d, d);
          max = std::max(max, scores[t]);
        }
        float total = 0.0f;
        for (int64_t t = 0; t < seen; ++t) total += scores[t] = std::exp(scores[t] - max);
        float* o = out + h * d;
        std::fill_n(o, d, 0.0f);
        for (int64_t t = 0; t < seen; ++t) {
          const float p = scores[t] / total;
          for (int64_t j = 0; j < d; ++j) o[j] += p * v[t * d + j];
        }
      }
    }
  }
}

// The small ops between products are member 0's alone: a few µs each, less than sharing them
// costs (measured: splitting them over the team made INT8 frames ~10 ms slower).
void SubcodeCpu::layers(int rank, int64_t rows, int64_t first, int64_t count) {
  Work& w = work_;
  const int64_t n = rows * count;
  auto norm_rows = [&](const std::vector<float>& weight) {
    for (int64_t r = 0; r < n; ++r)
      rms_norm(kernels_, w.x.data() + r * hidden_, weight.data(), hidden_, eps_, w.normed.data() + r * hidden_);
  };
  for (size_t index = 0; index < layers_.size(); ++index) {
    const Layer& l = layers_[index];
    if (rank == 0) norm_rows(l.input_norm);
    team_.barrier();
    product(rank, *l.qkv, w.normed.data(), n, w.qkv.data());
    if (rank == 0) attend(l, static_cast<int64_t>(index), rows, first, count);
    team_.barrier();
    product(rank, *l.o, w.attention.data(), n, w.out.data());
    if (rank == 0) {
      add(w.out.data(), n * hidden_, w.x.data());
      norm_rows(l.post_norm);
    }
    team_.barrier();
    product(rank, *l.gate_up, w.normed.data(), n, w.gate_up.data());
    if (rank == 0)
      for (int64_t r = 0; r < n; ++r) {
        const float* gate = w.gate_up.data() + r * 2 * intermediate_;
        const float* up = gate + intermediate_;
        for (int64_t i = 0; i < intermediate_; ++i)
          w.act[r * intermediate_ + i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];  // silu(gate)·up
      }
    team_.barrier();
    product(rank, *l.down, w.act.data(), n, w.out.data());
    if (rank == 0) add(w.out.data(), n * hidden_, w.x.data());
    team_.barrier();
  }
}

void SubcodeCpu::head(int rank, int64_t rows, int64_t count, int64_t step) {
  Work& w = work_;
  if (rank == 0)
    for (int64_t r = 0; r < rows; ++r)
      rms_norm(kernels_, w.x.data() + (r * count + count - 1) * hidden_, final_norm_.data(), hidden_, eps_,
               w.last.data() + r * hidden_);
  team_.barrier();
  product(rank, *heads_[step], w.last.data(), rows, w.logits.data());
}

int64_t SubcodeCpu::sample(const float* logits, float temperature, int64_t top_k, float top_p, float uniform) {
  if (!(temperature > 0.0f))  // greedy (the graph's test, NaN included): the lowest index of the largest logit
    return std::max_element(logits, logits + vocab_) - logits;
  // convert/subcode.py sample_codes, step by step in float32
  Work& w = work_;
  std::iota(w.order.begin(), w.order.end(), 0);
  const int64_t width = std::min(kTopKMax, vocab_);
  std::partial_sort(w.order.begin(), w.order.begin() + width, w.order.end(), [&](int64_t a, int64_t b) {
    return logits[a] / temperature > logits[b] / temperature ||
           (logits[a] / temperature == logits[b] / temperature && a < b);
  });
  const int64_t limit = (top_k <= 0 || top_k > width) ? width : top_k;
  float* probs = w.probs.data();
  float* cumulative = w.cumulative.data();
  std::fill_n(probs, width, 0.0f);
  const float top = logits[w.order[0]] / temperature;
  float total = 0.0f;
  for (int64_t i = 0; i < limit; ++i) total += probs[i] = std::exp(logits[w.order[i]] / temperature - top);
  for (int64_t i = 0; i < limit; ++i) probs[i] /= total;
  float before = 0.0f, cdf = 0.0f;
  int64_t kept = 0;
  for (int64_t i = 0; i < width; ++i) {
    const bool keep = i < limit && (before < top_p || top_p >= 1.0f || i == 0);
    before += probs[i];
    cdf += keep ? probs[i] : 0.0f;
    cumulative[i] = cdf;
    kept += keep;
  }
  const float target = uniform * cumulative[width - 1];
  const int64_t pick = std::count_if(cumulative, cumulative + width, [&](float c) { return c <= target; });
  return w.order[std::min(pick, kept - 1)];
}

void SubcodeCpu::run(const SubcodeBatch& b, std::vector<float>* first_logits) {
  const int64_t rows = b.rows, steps = this->steps(), talker_rows = tables_.back()->rows();
  if (rows < 1) throw std::invalid_argument("subcode: no rows");
  for (int64_t r = 0; r < rows; ++r)
    if (b.code0[r] < 0 || b.code0[r] >= talker_rows) throw std::invalid_argument("subcode: code0 out of range");
  prepare(rows);
  Work& w = work_;
  const int64_t th = talker_hidden_;
  auto draw = [&](int64_t step) {  // rank 0: the step's codes, their embeddings as the next inputs
    if (step == 0) std::copy(w.logits.begin(), w.logits.end(), w.first_logits.begin());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t code = sample(w.logits.data() + r * vocab_, b.temperature[r], b.top_k[r], b.top_p[r],
                                  b.uniform[r * steps + step]);
      b.codes[r * steps + step] = code;
      float* in = w.inputs.data() + r * th;
      tables_[step]->row(code, in);
      float* frame = b.embedding + r * th;
      for (int64_t i = 0; i < th; ++i) frame[i] += in[i];
    }
  };
  team_.run([&](int rank) noexcept {  // nothing in it allocates (prepare) or throws
    if (rank == 0)
      for (int64_t r = 0; r < rows; ++r) {  // positions 0, 1: [hidden ; E0[code0]]
        std::copy_n(b.hidden + r * th, th, w.inputs.data() + 2 * r * th);
        tables_.back()->row(b.code0[r], w.inputs.data() + (2 * r + 1) * th);
        std::copy_n(w.inputs.data() + (2 * r + 1) * th, th, b.embedding + r * th);
      }
    team_.barrier();
    project(rank, 2 * rows);
    layers(rank, rows, 0, 2);
    head(rank, rows, 2, 0);
    if (rank == 0) draw(0);
    team_.barrier();
    for (int64_t step = 1; step < steps; ++step) {
      project(rank, rows);
      layers(rank, rows, step + 1, 1);
      head(rank, rows, 1, step);
      if (rank == 0) draw(step);
      team_.barrier();
    }
  });
  if (first_logits) first_logits->assign(w.first_logits.begin(), w.first_logits.end());
}

}  // namespace qwen3tts
