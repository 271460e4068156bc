#include "qwen3tts/subcode_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>

#include <openvino/op/constant.hpp>

#include "qwen3tts/int4_weights.hpp"
#include "qwen3tts/mapped_ir.hpp"

namespace qwen3tts {

namespace {

constexpr int64_t kTopKMax = 64;  // convert/subcode.py's TOP_K_MAX: sampled rows choose among at most this many

}  // namespace

SubcodeCpu::SubcodeCpu(const ov::Model& model, std::shared_ptr<ThreadTeam> team, const Kernels& kernels,
                       std::shared_ptr<const void> weights_owner)
    : SubcodeCpu(NamedWeights(model, "subcode"), std::move(team), kernels, std::move(weights_owner)) {}

SubcodeCpu::SubcodeCpu(const NamedWeights& w, std::shared_ptr<ThreadTeam> team, const Kernels& kernels,
                       const std::shared_ptr<const void>& weights_owner)
    : stack_(w, kernels), team_(std::move(team)) {
  for (int64_t g = 0; w.has("head" + std::to_string(g)); ++g) {
    heads_.push_back(w.matrix("head" + std::to_string(g), kernels));
    tables_.push_back(w.table("embedding" + std::to_string(g), weights_owner));
  }
  w.require(!heads_.empty(), "no output heads");
  tables_.push_back(w.table("talker_embedding", weights_owner));
  vocab_ = heads_[0]->rows();
  talker_hidden_ = tables_.back()->cols();
  const int64_t hidden = stack_.hidden;
  for (size_t g = 0; g < heads_.size(); ++g)
    w.require(heads_[g]->rows() == vocab_ && heads_[g]->cols() == hidden && tables_[g]->rows() == vocab_ &&
                  tables_[g]->cols() == talker_hidden_,
              "head and table shapes");
  if (w.has("projection")) {
    projection_ = w.matrix("projection", kernels);
    projection_bias_ = w.vector("projection_bias");
    w.require(projection_->cols() == talker_hidden_ && projection_->rows() == hidden &&
                  static_cast<int64_t>(projection_bias_.size()) == hidden,
              "projection shape");
  } else {
    w.require(talker_hidden_ == hidden, "no projection between different widths");
  }
  uintptr_t lo = UINTPTR_MAX, hi = 0;  // one range over every table (and the copied weights between them)
  for (const auto& table : tables_) {
    lo = std::min(lo, reinterpret_cast<uintptr_t>(table->data()));
    hi = std::max(hi, reinterpret_cast<uintptr_t>(table->data()) + table->bytes());
  }
  tables_begin_ = reinterpret_cast<const char*>(lo);
  tables_bytes_ = hi - lo;
  release_tables();
  const int64_t half = stack_.head_dim / 2, positions = steps() + 1;
  cos_.resize(positions * half);
  sin_.resize(positions * half);
  for (int64_t p = 0; p < positions; ++p) stack_.rope(p, cos_.data() + p * half, sin_.data() + p * half);
}

void SubcodeCpu::prepare(int64_t rows) {
  const LayerStack& s = stack_;
  const size_t n = static_cast<size_t>(2 * rows);
  Work& w = work_;
  w.stack.prepare(s, 2 * rows, team_->size(), talker_hidden_);
  w.inputs.resize(n * talker_hidden_);
  w.last.resize(rows * s.hidden);
  w.logits.resize(rows * vocab_);
  w.first_logits.resize(rows * vocab_);
  const size_t cache = s.layers.size() * rows * s.kv_heads * (steps() + 1) * s.head_dim;
  w.keys.resize(cache);
  w.values.resize(cache);
  w.scratch.resize(static_cast<size_t>(team_->size()));
  for (Scratch& scratch : w.scratch) {
    scratch.head.resize(s.head_dim);
    scratch.query.resize(s.head_dim);
    scratch.scores.resize(steps() + 1);
    scratch.order.resize(vocab_);
    scratch.scaled.resize(vocab_);
    scratch.probs.resize(vocab_);
    scratch.cumulative.resize(vocab_);
  }
}

void SubcodeCpu::project(int rank, int64_t n) {
  Work& w = work_;
  const int64_t hidden = stack_.hidden;
  if (!projection_) {
    if (rank == 0) std::copy(w.inputs.begin(), w.inputs.begin() + n * hidden, w.stack.x.begin());
    team_->barrier();
    return;
  }
  product(*team_, rank, w.stack, *projection_, w.inputs.data(), n, w.stack.x.data());
  if (rank == 0)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < hidden; ++i) w.stack.x[r * hidden + i] += projection_bias_[i];
  team_->barrier();
}

// Items are (row, kv head) pairs: each writes its kv head's new keys and values (cache rows no
// other item touches), then attends for that kv head's query heads, causally. Every head's
// arithmetic is the same whichever member runs it.
void SubcodeCpu::attend(int rank, const Layer& layer, int64_t index, int64_t rows, int64_t first, int64_t count) {
  Work& w = work_;
  Scratch& scratch = w.scratch[static_cast<size_t>(rank)];
  const LayerStack& s = stack_;
  const int64_t d = s.head_dim, half = d / 2, positions = steps() + 1, width = s.qkv_width();
  const int64_t group = s.heads / s.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float* normed = scratch.head.data();
  float* q = scratch.query.data();
  float* scores = scratch.scores.data();
  for (int64_t item = rank; item < rows * s.kv_heads; item += team_->size()) {
    const int64_t r = item / s.kv_heads, j = item % s.kv_heads;
    float* keys = w.keys.data() + ((index * rows + r) * s.kv_heads + j) * positions * d;
    float* values = w.values.data() + ((index * rows + r) * s.kv_heads + j) * positions * d;
    for (int64_t i = 0; i < count; ++i) {  // this step's keys and values into the cache
      const float* row = w.stack.qkv.data() + (r * count + i) * width;
      const int64_t p = first + i;
      s.norm_and_rotate(row + (s.heads + j) * d, layer.k_norm, cos_.data() + p * half, sin_.data() + p * half, 1.0f,
                        normed, keys + p * d);
      std::copy_n(row + (s.heads + s.kv_heads + j) * d, d, values + p * d);
    }
    for (int64_t i = 0; i < count; ++i) {  // a query at position p sees keys 0..p
      const int64_t position = first + i, seen = position + 1;
      const float* row = w.stack.qkv.data() + (r * count + i) * width;
      float* out = w.stack.attention.data() + (r * count + i) * s.heads * d;
      for (int64_t h = j * group; h < (j + 1) * group; ++h) {
        s.norm_and_rotate(row + h * d, layer.q_norm, cos_.data() + position * half, sin_.data() + position * half,
                          scale, normed, q);
        float max = -std::numeric_limits<float>::infinity();
        for (int64_t t = 0; t < seen; ++t) {
          scores[t] = s.kernels.dot(q, keys + t * d, d);
          max = std::max(max, scores[t]);
        }
        float total = 0.0f;
        for (int64_t t = 0; t < seen; ++t) total += scores[t] = std::exp(scores[t] - max);
        float* o = out + h * d;
        std::fill_n(o, d, 0.0f);
        for (int64_t t = 0; t < seen; ++t) {
          const float p = scores[t] / total;
          for (int64_t k = 0; k < d; ++k) o[k] += p * values[t * d + k];
        }
      }
    }
  }
}

void SubcodeCpu::layers(int rank, int64_t rows, int64_t first, int64_t count) {
  run_layers(stack_, work_.stack, *team_, rank, rows * count, [&](int member, int64_t index) {
    attend(member, stack_.layers[static_cast<size_t>(index)], index, rows, first, count);
  });
}

void SubcodeCpu::head(int rank, int64_t rows, int64_t count, int64_t step) {
  Work& w = work_;
  const int64_t hidden = stack_.hidden;
  if (rank == 0)
    for (int64_t r = 0; r < rows; ++r)
      rms_norm(stack_.kernels, w.stack.x.data() + (r * count + count - 1) * hidden, stack_.final_norm.data(), hidden,
               stack_.eps, w.last.data() + r * hidden);
  team_->barrier();
  product(*team_, rank, w.stack, *heads_[step], w.last.data(), rows, w.logits.data());
}

int64_t SubcodeCpu::sample(int rank, const float* logits, float temperature, int64_t top_k, float top_p,
                           float uniform) {
  if (!(temperature > 0.0f))  // greedy (the graph's test, NaN included): the lowest index of the largest logit
    return std::max_element(logits, logits + vocab_) - logits;
  // convert/subcode.py sample_codes, step by step in float32: the logits divided by the
  // temperature once (the same quotients the graph ranks), then the top ones by value, ties to
  // the lower index (a total order: any selection gives the same ones in the same order)
  Scratch& w = work_.scratch[static_cast<size_t>(rank)];
  const float* scaled = w.scaled.data();
  for (int64_t i = 0; i < vocab_; ++i) w.scaled[i] = logits[i] / temperature;
  std::iota(w.order.begin(), w.order.end(), 0);
  const int64_t width = std::min(kTopKMax, vocab_);
  std::partial_sort(w.order.begin(), w.order.begin() + width, w.order.end(), [scaled](int64_t a, int64_t b) {
    return scaled[a] > scaled[b] || (scaled[a] == scaled[b] && a < b);
  });
  const int64_t limit = (top_k <= 0 || top_k > width) ? width : top_k;
  float* probs = w.probs.data();
  float* cumulative = w.cumulative.data();
  std::fill_n(probs, width, 0.0f);
  const float top = scaled[w.order[0]];
  float total = 0.0f;
  for (int64_t i = 0; i < limit; ++i) total += probs[i] = std::exp(scaled[w.order[i]] - top);
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

void SubcodeCpu::release_tables() const {
  // the rows read go back to the page cache: one call (and one TLB flush) for all the tables;
  // the copied weights between them were handed back already and are never read
  release_mapped(tables_begin_, tables_bytes_);
}

std::string SubcodeCpu::describe() const {
  return std::string("subcode_cpu, ") + kernels().name + ", " + std::to_string(threads()) + " threads";
}

void SubcodeCpu::run(const SubcodeBatch& b, std::vector<float>* first_logits) {
  const int64_t rows = b.rows, steps = this->steps(), talker_rows = tables_.back()->rows();
  if (rows < 1) throw std::invalid_argument("subcode: no rows");
  for (int64_t r = 0; r < rows; ++r)
    if (b.code0[r] < 0 || b.code0[r] >= talker_rows) throw std::invalid_argument("subcode: code0 out of range");
  prepare(rows);
  Work& w = work_;
  const int64_t th = talker_hidden_;
  auto draw = [&](int rank, int64_t step) {  // the step's codes, their embeddings as the next inputs; rows dealt
                                             // round-robin over the members (each touches only its own)
    if (step == 0 && rank == 0) std::copy(w.logits.begin(), w.logits.end(), w.first_logits.begin());
    for (int64_t r = rank; r < rows; r += team_->size()) {
      const int64_t code = sample(rank, w.logits.data() + r * vocab_, b.temperature[r], b.top_k[r], b.top_p[r],
                                  b.uniform[r * steps + step]);
      b.codes[r * steps + step] = code;
      float* in = w.inputs.data() + r * th;
      tables_[step]->row(code, in);
      float* frame = b.embedding + r * th;
      for (int64_t i = 0; i < th; ++i) frame[i] += in[i];
    }
  };
  team_->run([&](int rank) noexcept {  // nothing in it allocates (prepare) or throws
    if (rank == 0)
      for (int64_t r = 0; r < rows; ++r) {  // positions 0, 1: [hidden ; E0[code0]]
        std::copy_n(b.hidden + r * th, th, w.inputs.data() + 2 * r * th);
        tables_.back()->row(b.code0[r], w.inputs.data() + (2 * r + 1) * th);
        std::copy_n(w.inputs.data() + (2 * r + 1) * th, th, b.embedding + r * th);
      }
    team_->barrier();
    project(rank, 2 * rows);
    layers(rank, rows, 0, 2);
    head(rank, rows, 2, 0);
    draw(rank, 0);
    team_->barrier();
    for (int64_t step = 1; step < steps; ++step) {
      project(rank, rows);
      layers(rank, rows, step + 1, 1);
      head(rank, rows, 1, step);
      draw(rank, step);
      team_->barrier();
    }
  });
  release_tables();
  if (first_logits) first_logits->assign(w.first_logits.begin(), w.first_logits.end());
}

}  // namespace qwen3tts
