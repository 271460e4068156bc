#include "qwen3tts/embedding_table.hpp"

#include <stdexcept>
#include <utility>

namespace qwen3tts {

EmbeddingTable::EmbeddingTable(std::shared_ptr<ov::op::v0::Constant> q, const ov::op::v0::Constant& scale,
                               std::shared_ptr<const void> owner)
    : q_(std::move(q)), owner_(std::move(owner)) {
  const ov::Shape& shape = q_->get_shape();
  if (q_->get_element_type() != ov::element::i8 || shape.size() != 2)
    throw std::invalid_argument("EmbeddingTable: expected i8 weights [N, K]");
  rows_ = static_cast<int64_t>(shape[0]);
  cols_ = static_cast<int64_t>(shape[1]);
  scales_ = scale.cast_vector<float>();
  if (rows_ < 1 || cols_ < 1 || static_cast<int64_t>(scales_.size()) != rows_)
    throw std::invalid_argument("EmbeddingTable: expected one scale per row");
  values_ = static_cast<const int8_t*>(q_->get_data_ptr());
}

void EmbeddingTable::row(int64_t n, float* out) const {
  const int8_t* q = values_ + n * cols_;
  for (int64_t k = 0; k < cols_; ++k) out[k] = static_cast<float>(q[k]) * scales_[n];
}

}  // namespace qwen3tts
