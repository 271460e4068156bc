// Sampling semantics of the official implementation, exactly as
// wyoming_qwen3tts/engine/sampling.py computes them (that file documents the rules).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace qwen3tts {

struct SamplingParams {
  bool do_sample = true;
  int64_t top_k = 50;
  double top_p = 1.0;
  double temperature = 0.9;
  double repetition_penalty = 1.05;
  bool subtalker_do_sample = true;
  int64_t subtalker_top_k = 50;
  double subtalker_top_p = 1.0;
  double subtalker_temperature = 0.9;
  int64_t min_frames = 2;  // EOS is masked before this many frames
};

// Penalty over the group-0 codes generated so far (`count` ids of z, from `generated`) -> EOS
// masked before `min_frames` -> control ids suppressed except EOS; in place, in float32 like numpy.
void process_talker_logits(std::vector<float>& z, const int64_t* generated, size_t count, int64_t step,
                           float penalty, int64_t eos, int64_t suppress_from, int64_t min_frames);

// Temperature -> top-k (ties kept) -> top-p -> inverse-CDF draw, in float64 with numpy's
// summation order (pairwise sums, sequential cumulative sums).
int64_t sample_row(const std::vector<float>& z, double temperature, int64_t top_k, double top_p, double uniform);

// numpy.argmax: the first index of the largest value.
int64_t argmax(const std::vector<float>& z);

// numpy's pairwise summation of a contiguous float64 array (what ndarray.sum() computes).
double pairwise_sum(const double* a, int64_t n);

}  // namespace qwen3tts
