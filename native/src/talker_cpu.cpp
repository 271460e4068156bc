#include "qwen3tts/talker_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace qwen3tts {

TalkerCpu::TalkerCpu(const ov::Model& model, std::shared_ptr<ThreadTeam> team, bool u8_cache, int64_t block_size,
                     const Kernels& kernels)
    : stack_(NamedWeights(model, "talker"), kernels),
      team_(std::move(team)),
      u8_(u8_cache),
      block_size_(block_size),
      row_bytes_(u8_cache ? stack_.head_dim + 2 * static_cast<int64_t>(sizeof(float))
                          : stack_.head_dim * static_cast<int64_t>(sizeof(float))) {
  const NamedWeights w(model, "talker");
  head_ = w.matrix("head", kernels);
  w.require(head_->cols() == stack_.hidden, "codec head shape");
  if (block_size_ < 1) throw std::invalid_argument("talker_cpu: block size must be >= 1");
}

void TalkerCpu::allocate(int64_t blocks) {
  if (blocks < 1) throw std::invalid_argument("talker_cpu: the KV cache needs at least one block");
  cache_ = ov::Tensor(ov::element::u8, ov::Shape{static_cast<size_t>(blocks * block_bytes())});
  cache_base_ = cache_.data<uint8_t>();
  blocks_ = blocks;
}

std::string TalkerCpu::describe() const {
  return std::string("talker_cpu, ") + kernels().name + ", " + (u8_ ? "u8" : "f32") + " cache, " +
         std::to_string(threads()) + " threads";
}

void TalkerCpu::copy_blocks(const std::vector<int32_t>& pairs) {
  const int64_t bytes = block_bytes();
  for (size_t i = 0; i + 1 < pairs.size(); i += 2)
    std::memcpy(cache_base_ + pairs[i + 1] * bytes, cache_base_ + pairs[i] * bytes, static_cast<size_t>(bytes));
}

void TalkerCpu::store(const float* x, uint8_t* row) const {
  const int64_t d = stack_.head_dim;
  if (!u8_) {
    std::memcpy(row, x, static_cast<size_t>(d) * sizeof(float));
    return;
  }
  const auto [lo, hi] = std::minmax_element(x, x + d);
  const float min = *lo, scale = *hi > *lo ? (*hi - *lo) / 255.0f : 1.0f;
  const float inverse = 1.0f / scale;
  for (int64_t i = 0; i < d; ++i)
    row[i] = static_cast<uint8_t>(std::min(255.0f, std::max(0.0f, std::nearbyint((x[i] - min) * inverse))));
  std::memcpy(row + d, &scale, sizeof(float));
  std::memcpy(row + d + sizeof(float), &min, sizeof(float));
}

float TalkerCpu::score(const float* q, float q_sum, const uint8_t* key) const {
  const int64_t d = stack_.head_dim;
  if (!u8_) return stack_.kernels.dot(q, reinterpret_cast<const float*>(key), d);
  float scale, min;
  std::memcpy(&scale, key + d, sizeof(float));
  std::memcpy(&min, key + d + sizeof(float), sizeof(float));
  return scale * stack_.kernels.dot_u8(q, key, d) + min * q_sum;  // Σ q·(k·scale + min)
}

void TalkerCpu::accumulate(float p, const uint8_t* value, float* out, float& offset) const {
  const int64_t d = stack_.head_dim;
  if (!u8_) {
    stack_.kernels.axpy(p, reinterpret_cast<const float*>(value), d, out);
    return;
  }
  float scale, min;
  std::memcpy(&scale, value + d, sizeof(float));
  std::memcpy(&min, value + d + sizeof(float), sizeof(float));
  stack_.kernels.axpy_u8(p * scale, value, d, out);
  offset += p * min;  // added to every element once the row is summed
}

void TalkerCpu::prepare(const TalkerCall& c) {
  Work& w = work_;
  const int64_t half = stack_.head_dim / 2;
  w.stack.prepare(stack_, std::max<int64_t>(c.rows, c.samples), team_->size(), stack_.hidden);
  w.cos.resize(c.rows * half);
  w.sin.resize(c.rows * half);
  for (int64_t r = 0; r < c.rows; ++r) stack_.rope(c.positions[r], w.cos.data() + r * half, w.sin.data() + r * half);
  w.last.resize(c.samples * stack_.hidden);
  int64_t longest = 1;
  for (int64_t s = 0; s < c.sequences; ++s)
    longest = std::max<int64_t>(longest, int64_t{c.past_lens[s]} + c.begins[s + 1] - c.begins[s]);
  w.scratch.resize(static_cast<size_t>(team_->size()));
  for (Scratch& s : w.scratch) {
    s.normed.resize(stack_.head_dim);
    s.query.resize(stack_.head_dim);
    s.out.resize(stack_.head_dim);
    s.scores.resize(longest);
  }
}

// Work items are (sequence, kv head) pairs, dealt round-robin over the members: each writes
// its new keys and values (rows no other item touches), then attends for the kv head's
// query heads of its new rows, causally.
void TalkerCpu::attend(int rank, int64_t layer, const TalkerCall& c) {
  const LayerStack& s = stack_;
  Work& w = work_;
  Scratch& scratch = w.scratch[static_cast<size_t>(rank)];
  const int64_t d = s.head_dim, half = d / 2, width = s.qkv_width(), group = s.heads / s.kv_heads;
  const float factor = 1.0f / std::sqrt(static_cast<float>(d));
  const int members = team_->size();
  for (int64_t item = rank; item < c.sequences * s.kv_heads; item += members) {
    const int64_t seq = item / s.kv_heads, g = item % s.kv_heads;
    const int64_t past = c.past_lens[seq], first = c.begins[seq], count = c.begins[seq + 1] - first;
    const int32_t* table = c.block_indices + c.block_begins[seq];
    auto cached = [&](int kind, int64_t t) { return row(table[t / block_size_], layer, kind, g, t % block_size_); };
    for (int64_t j = 0; j < count; ++j) {
      const int64_t r = first + j;
      const float* qkv = w.stack.qkv.data() + r * width;
      s.norm_and_rotate(qkv + (s.heads + g) * d, s.layers[layer].k_norm, w.cos.data() + r * half,
                        w.sin.data() + r * half, 1.0f, scratch.normed.data(), scratch.out.data());
      store(scratch.out.data(), cached(0, past + j));
      store(qkv + (s.heads + s.kv_heads + g) * d, cached(1, past + j));
    }
    for (int64_t j = 0; j < count; ++j) {
      const int64_t r = first + j, seen = past + j + 1;
      const float* qkv = w.stack.qkv.data() + r * width;
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        float* q = scratch.query.data();
        s.norm_and_rotate(qkv + h * d, s.layers[layer].q_norm, w.cos.data() + r * half, w.sin.data() + r * half,
                          factor, scratch.normed.data(), q);
        float q_sum = 0.0f;
        for (int64_t i = 0; i < d; ++i) q_sum += q[i];
        float* scores = scratch.scores.data();
        float max = -std::numeric_limits<float>::infinity();
        for (int64_t t = 0; t < seen; ++t) max = std::max(max, scores[t] = score(q, q_sum, cached(0, t)));
        float total = 0.0f;
        for (int64_t t = 0; t < seen; ++t) total += scores[t] = std::exp(scores[t] - max);
        float* out = w.stack.attention.data() + r * s.heads * d + h * d;
        std::fill_n(out, d, 0.0f);
        float offset = 0.0f;
        for (int64_t t = 0; t < seen; ++t) accumulate(scores[t] / total, cached(1, t), out, offset);
        if (offset != 0.0f)
          for (int64_t i = 0; i < d; ++i) out[i] += offset;
      }
    }
  }
}

void TalkerCpu::run(const TalkerCall& c) {
  if (!cache_base_) throw std::logic_error("talker_cpu: allocate() before run()");
  if (c.rows < 1) return;
  prepare(c);
  Work& w = work_;
  const int64_t hidden = stack_.hidden;
  std::copy_n(c.embeds, c.rows * hidden, w.stack.x.begin());
  team_->run([&](int rank) noexcept {  // nothing in it allocates (prepare) or throws
    run_layers(stack_, w.stack, *team_, rank, c.rows, [&](int member, int64_t layer) { attend(member, layer, c); });
    if (c.samples == 0) return;
    if (rank == 0)
      for (int64_t i = 0; i < c.samples; ++i) {
        rms_norm(stack_.kernels, w.stack.x.data() + c.sample_rows[i] * hidden, stack_.final_norm.data(), hidden,
                 stack_.eps, w.last.data() + i * hidden);
        std::copy_n(w.last.data() + i * hidden, hidden, c.hidden + i * hidden);
      }
    team_->barrier();
    product(*team_, rank, w.stack, *head_, w.last.data(), c.samples, c.logits);
  });
}

}  // namespace qwen3tts
