#include "qwen3tts/quantized_matrix.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace qwen3tts {

void quantize_rows(const Kernels& kernels, const float* x, int64_t m, int64_t cols, int64_t group, QuantizedRows& out) {
  const int64_t groups = cols / group;
  out.rows = m;
  out.cols = cols;
  out.group = group;
  out.values.resize(static_cast<size_t>(m * cols));
  out.scales.resize(static_cast<size_t>(m * groups));
  out.sums.resize(static_cast<size_t>(m * groups));
  for (int64_t r = 0; r < m; ++r)
    kernels.quantize(x + r * cols, cols, group, out.values.data() + r * cols, out.scales.data() + r * groups,
                     out.sums.data() + r * groups);
}

Int8Weights::Int8Weights(const ov::op::v0::Constant& q, const ov::op::v0::Constant& scale, const Kernels& kernels)
    : QuantizedMatrix(kernels, 1) {
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
    for (int64_t line = 0; line < cols_ / kInt8LineInputs; ++line)
      for (int64_t lane = 0; lane < kBlockRows; ++lane)
        for (int64_t i = 0; i < kInt8LineInputs; ++i)
          out[line * 64 + lane * 4 + i] =
              static_cast<uint8_t>(values[(block * kBlockRows + lane) * cols_ + line * kInt8LineInputs + i] + 128);
  }
}

void Int8Weights::multiply_passes(const QuantizedRows& x, float* y, int64_t begin, int64_t end) const {
  kernels_->int8_blocks(bytes_.data(), scales_.data(), x, begin, end, rows_, y);  // a pass is one block
}

}  // namespace qwen3tts
