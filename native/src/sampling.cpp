#include "qwen3tts/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

namespace qwen3tts {

void process_talker_logits(std::vector<float>& z, const std::vector<int64_t>& generated, int64_t step, float penalty,
                           int64_t eos, int64_t suppress_from, int64_t min_frames) {
  const float inf = std::numeric_limits<float>::infinity();
  if (penalty != 1.0f && !generated.empty()) {
    for (int64_t id : std::set<int64_t>(generated.begin(), generated.end())) {
      float score = z[id];
      z[id] = score < 0 ? score * penalty : score / penalty;
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
  if (top_k > 0 && top_k < n) {
    std::vector<double> copy(z);
    std::nth_element(copy.begin(), copy.begin() + (top_k - 1), copy.end(), std::greater<double>());
    double kth = copy[top_k - 1];
    for (double& v : z)
      if (v < kth) v = -inf;
  }
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return z[a] > z[b]; });
  std::vector<double> probs(n);
  for (int64_t i = 0; i < n; ++i) probs[i] = std::exp(z[order[i]] - z[order[0]]);
  double total = pairwise_sum(probs.data(), n);
  for (double& p : probs) p /= total;
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
  std::vector<double> cum(kept);
  std::partial_sum(probs.begin(), probs.begin() + kept, cum.begin());
  double target = uniform * cum[kept - 1];
  int64_t index = std::upper_bound(cum.begin(), cum.end(), target) - cum.begin();  // side="right"
  return order[std::min(index, kept - 1)];
}

}  // namespace qwen3tts
