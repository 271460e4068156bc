#include "qwen3tts/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace qwen3tts {

void process_talker_logits(std::vector<float>& z, const int64_t* generated, size_t count, int64_t step,
                           float penalty, int64_t eos, int64_t suppress_from, int64_t min_frames) {
  const float inf = std::numeric_limits<float>::infinity();
  if (penalty != 1.0f && count > 0) {
    std::vector<bool> seen(z.size());  // each id once (numpy.unique), in any order: they are independent
    for (const int64_t* id = generated; id != generated + count; ++id) {
      if (seen[*id]) continue;
      seen[*id] = true;
      float score = z[*id];
      z[*id] = score < 0 ? score * penalty : score / penalty;
    }
  }
  if (step < min_frames) z[eos] = -inf;
  float keep_eos = z[eos];
  for (int64_t i = suppress_from; i < static_cast<int64_t>(z.size()); ++i) z[i] = -inf;
  z[eos] = keep_eos;
}

double pairwise_sum(const double* a, int64_t n) {
  if (n < 8) {
    double res = 0.0;
    for (int64_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  int64_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

int64_t argmax(const std::vector<float>& z) {
  return std::distance(z.begin(), std::max_element(z.begin(), z.end()));
}

int64_t sample_row(const std::vector<float>& zf, double temperature, int64_t top_k, double top_p, double uniform) {
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t n = static_cast<int64_t>(zf.size());
  std::vector<double> z(n);
  for (int64_t i = 0; i < n; ++i) z[i] = static_cast<double>(zf[i]) / temperature;
  double kth = -inf;  // top-k: the ids below the k-th largest value (ties kept) are out
  if (top_k > 0 && top_k < n) {
    std::vector<double> copy(z);
    std::nth_element(copy.begin(), copy.begin() + (top_k - 1), copy.end(), std::greater<double>());
    kth = copy[top_k - 1];
  }
  // numpy's stable argsort of -z after top-k: descending, ties in id order. The ids out (top-k's
  // and the suppressed, -inf) tie at -inf below the others, in id order, with probability 0:
  // only the `drawn` ids before them are sorted and computed.
  const auto is_out = [&](int64_t i) { return z[i] < kth || z[i] == -inf; };
  std::vector<int64_t> order;
  for (int64_t i = 0; i < n; ++i)
    if (!is_out(i)) order.push_back(i);
  const int64_t drawn = static_cast<int64_t>(order.size());
  if (drawn == 0) return n - 1;  // all -inf: every probability would be NaN, the draw past the last id
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return z[a] > z[b]; });
  std::vector<double> probs(n);
  for (int64_t i = 0; i < drawn; ++i) probs[i] = std::exp(z[order[i]] - z[order[0]]);
  double total = pairwise_sum(probs.data(), n);  // numpy's order over all n (the zeros add nothing)
  // total >= probs[0] = 1, so the zeros would stay 0; a NaN total (an infinite logit) makes every
  // drawn probability NaN, and so every cumulative sum: the zeros after them change nothing.
  for (int64_t i = 0; i < drawn; ++i) probs[i] /= total;
  int64_t kept = n;
  if (top_p < 1.0) {
    double cum = 0.0;
    int64_t first = n;  // searchsorted(cum, top_p, side="left")
    for (int64_t i = 0; i < n; ++i) {
      cum += probs[i];
      if (cum >= top_p) { first = i; break; }
    }
    kept = std::min(first + 1, n);
    double head = pairwise_sum(probs.data(), kept);
    for (int64_t i = 0; i < kept; ++i) probs[i] /= head;
  }
  // The draw over the kept ids; past the drawn ones the cumulative sum stays at its last value,
  // so a draw no drawn id takes falls past the last kept id, which may be one of the ids out.
  const int64_t m = std::min(kept, drawn);
  std::vector<double> cum(m);
  std::partial_sum(probs.begin(), probs.begin() + m, cum.begin());
  double target = uniform * cum[m - 1];
  int64_t index = std::upper_bound(cum.begin(), cum.end(), target) - cum.begin();  // side="right"
  if (index < m) return order[index];
  if (kept <= drawn) return order[kept - 1];
  for (int64_t i = 0, skip = kept - 1 - drawn;; ++i)  // the (kept - drawn)-th id out
    if (is_out(i) && skip-- == 0) return i;
}

}  // namespace qwen3tts
