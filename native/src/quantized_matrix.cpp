#include "qwen3tts/quantized_matrix.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "qwen3tts/vnni.hpp"

namespace qwen3tts {

namespace {

constexpr int64_t kLineInputs = 4;  // inputs per 64-byte line of an INT8 block
constexpr int64_t kMaxRows = 4;     // activation rows per pass over a block (registers)

QWEN3TTS_VNNI void quantize_group(const float* x, int64_t group, int8_t* q, float& scale, int32_t& sum) {
  __m512 amax = _mm512_setzero_ps();
  for (int64_t k = 0; k < group; k += 16) amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(x + k)));
  const float max = _mm512_reduce_max_ps(amax);
  scale = max / 127.0f;
  const __m512 inverse = _mm512_set1_ps(max > 0.0f ? 127.0f / max : 0.0f);
  __m512i total = _mm512_setzero_si512();
  for (int64_t k = 0; k < group; k += 16) {
    __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + k), inverse));  // round to nearest even
    total = _mm512_add_epi32(total, v);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), _mm512_cvtsepi32_epi8(v));
  }
  sum = _mm512_reduce_add_epi32(total);
}

// y[r, block] for R activation rows and one 16-row INT8 block, every group.
template <int R>
QWEN3TTS_VNNI void multiply_block(const uint8_t* bytes, const float* scales, const QuantizedRows& x, int64_t row0,
                                  int64_t stride_y, float* y) {
  const int64_t cols = x.cols, group = x.group, groups = cols / group;
  __m512 out[R];
  for (int r = 0; r < R; ++r) out[r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i even[R], odd[R];  // two chains per accumulator hide the dot products' latency
    for (int r = 0; r < R; ++r) {
      even[r] = _mm512_set1_epi32(-128 * x.sums[(row0 + r) * groups + g]);
      odd[r] = _mm512_setzero_si512();
    }
    for (int64_t k = g * group; k < (g + 1) * group; k += 2 * kLineInputs) {
      const __m512i first = _mm512_loadu_si512(bytes + k / kLineInputs * 64);
      const __m512i second = _mm512_loadu_si512(bytes + (k / kLineInputs + 1) * 64);
      for (int r = 0; r < R; ++r) {
        const int8_t* xr = x.values.data() + (row0 + r) * cols + k;
        int32_t x0, x1;
        std::memcpy(&x0, xr, 4);
        std::memcpy(&x1, xr + 4, 4);
        even[r] = _mm512_dpbusd_epi32(even[r], first, _mm512_set1_epi32(x0));
        odd[r] = _mm512_dpbusd_epi32(odd[r], second, _mm512_set1_epi32(x1));
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(even[r], odd[r]));
      out[r] = _mm512_fmadd_ps(dot, _mm512_set1_ps(x.scales[(row0 + r) * groups + g]), out[r]);
    }
  }
  const __m512 s = _mm512_loadu_ps(scales);
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(y + (row0 + r) * stride_y, _mm512_mul_ps(out[r], s));
}

}  // namespace

bool vnni_supported() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni");
}

void quantize_rows(const float* x, int64_t m, int64_t cols, int64_t group, QuantizedRows& out) {
  const int64_t groups = cols / group;
  out.rows = m;
  out.cols = cols;
  out.group = group;
  out.values.resize(static_cast<size_t>(m * cols));
  out.scales.resize(static_cast<size_t>(m * groups));
  out.sums.resize(static_cast<size_t>(m * groups));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t g = 0; g < groups; ++g)
      quantize_group(x + r * cols + g * group, group, out.values.data() + r * cols + g * group,
                     out.scales[r * groups + g], out.sums[r * groups + g]);
}

Int8Weights::Int8Weights(const ov::op::v0::Constant& q, const ov::op::v0::Constant& scale) {
  const ov::Shape& shape = q.get_shape();
  if (q.get_element_type() != ov::element::i8 || shape.size() != 2)
    throw std::invalid_argument("Int8Weights: expected i8 weights [N, K]");
  rows_ = static_cast<int64_t>(shape[0]);
  cols_ = static_cast<int64_t>(shape[1]);
  group_ = cols_ % 128 == 0 ? 128 : cols_;
  if (rows_ < 1 || cols_ < 1 || rows_ % kBlockRows != 0 || cols_ % 16 != 0)
    throw std::invalid_argument("Int8Weights: rows and inputs must be positive multiples of 16");
  scales_ = scale.cast_vector<float>();
  if (static_cast<int64_t>(scales_.size()) != rows_)
    throw std::invalid_argument("Int8Weights: expected one scale per row");
  const auto* values = static_cast<const int8_t*>(q.get_data_ptr());
  bytes_.resize(static_cast<size_t>(rows_ * cols_));
  for (int64_t block = 0; block < rows_ / kBlockRows; ++block) {
    uint8_t* out = bytes_.data() + block * cols_ * kBlockRows;
    for (int64_t line = 0; line < cols_ / kLineInputs; ++line)
      for (int64_t lane = 0; lane < kBlockRows; ++lane)
        for (int64_t i = 0; i < kLineInputs; ++i)
          out[line * 64 + lane * 4 + i] =
              static_cast<uint8_t>(values[(block * kBlockRows + lane) * cols_ + line * kLineInputs + i] + 128);
  }
}

void Int8Weights::row(int64_t n, float* out) const {
  const int64_t block = n / kBlockRows, lane = n % kBlockRows;
  const uint8_t* bytes = bytes_.data() + block * cols_ * kBlockRows;
  for (int64_t k = 0; k < cols_; ++k)
    out[k] = static_cast<float>(int{bytes[k / kLineInputs * 64 + lane * 4 + k % kLineInputs]} - 128) * scales_[n];
}

void Int8Weights::multiply_part(const QuantizedRows& x, float* y, int part, int parts) const {
  const int64_t blocks = rows_ / kBlockRows, begin = blocks * part / parts, end = blocks * (part + 1) / parts;
  for (int64_t block = begin; block < end; ++block) {
    const uint8_t* bytes = bytes_.data() + block * cols_ * kBlockRows;
    const float* scales = scales_.data() + block * kBlockRows;
    float* out = y + block * kBlockRows;
    for (int64_t r = 0; r < x.rows; r += kMaxRows) {
      switch (std::min(kMaxRows, x.rows - r)) {
        case 1: multiply_block<1>(bytes, scales, x, r, rows_, out); break;
        case 2: multiply_block<2>(bytes, scales, x, r, rows_, out); break;
        case 3: multiply_block<3>(bytes, scales, x, r, rows_, out); break;
        default: multiply_block<4>(bytes, scales, x, r, rows_, out); break;
      }
    }
  }
}

}  // namespace qwen3tts
