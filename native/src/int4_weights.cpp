#include "qwen3tts/int4_weights.hpp"

#include <algorithm>
#include <stdexcept>

namespace qwen3tts {

Int4Weights::Int4Weights(const ov::op::v0::Constant& q, const ov::op::v0::Constant& scale, const Kernels& kernels)
    : QuantizedMatrix(kernels, 2) {
  const ov::Shape& shape = q.get_shape();
  if (q.get_element_type() != ov::element::i4 || shape.size() != 3)
    throw std::invalid_argument("Int4Weights: expected i4 weights [N, groups, group]");
  rows_ = static_cast<int64_t>(shape[0]);
  group_ = static_cast<int64_t>(shape[2]);
  cols_ = static_cast<int64_t>(shape[1]) * group_;
  if (rows_ % kBlockRows != 0 || group_ % 16 != 0)  // 16 is a multiple of kInt4LineInputs
    throw std::invalid_argument("Int4Weights: rows must be a multiple of 16 and the group of 16");
  const std::vector<float> s = scale.cast_vector<float>();
  const int64_t groups = cols_ / group_;
  if (static_cast<int64_t>(s.size()) != rows_ * groups)
    throw std::invalid_argument("Int4Weights: expected one scale per row and group");
  const auto* packed = static_cast<const uint8_t*>(q.get_data_ptr());
  auto nibble = [&](int64_t n, int64_t k) {  // q + 8, unsigned (i4 is two's complement, low nibble first)
    const int64_t i = n * cols_ + k;
    return static_cast<uint8_t>(((packed[i / 2] >> (4 * (i % 2))) & 0x0F) ^ 0x08);
  };
  nibbles_.resize(static_cast<size_t>(rows_ * cols_ / 2));
  scales_.resize(static_cast<size_t>(rows_ * groups));
  for (int64_t block = 0; block < rows_ / kBlockRows; ++block) {
    uint8_t* out = nibbles_.data() + block * (cols_ / 2) * kBlockRows;
    for (int64_t line = 0; line < cols_ / kInt4LineInputs; ++line)
      for (int64_t lane = 0; lane < kBlockRows; ++lane)
        for (int64_t i = 0; i < 4; ++i) {
          const int64_t n = block * kBlockRows + lane, k = line * kInt4LineInputs + i;
          out[line * 64 + lane * 4 + i] = static_cast<uint8_t>(nibble(n, k) | (nibble(n, k + 4) << 4));
        }
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t lane = 0; lane < kBlockRows; ++lane)
        scales_[(block * groups + g) * kBlockRows + lane] = s[(block * kBlockRows + lane) * groups + g];
  }
}

void Int4Weights::multiply_passes(const QuantizedRows& x, float* y, int64_t begin, int64_t end) const {
  kernels_->int4_blocks(nibbles_.data(), scales_.data(), x, 2 * begin, std::min(2 * end, blocks()), rows_, y);
}

}  // namespace qwen3tts
