// An INT8 embedding table read in place: the code predictor's codebook tables
// (docs/ARCHITECTURE.md, "Memory: what the talker's side holds").
//
// A frame reads one row of each of the 16 tables, so a private copy of them (1.7B: 69 MB,
// 0.6B: 35 MB) is memory the runner holds for a few kB of reads per frame. The table's rows
// stay where the converted IR has them (nncf's INT8_SYM: i8 [N, K], one scale per row), in
// the runner's own mapping of the weights file (mapped_ir.hpp), and the code predictor hands the
// pages read back after each call (release_mapped over data()..bytes() of all its tables); the
// next read faults them in again from the page cache, a few microseconds per row. Only the
// per-row scales are copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <openvino/op/constant.hpp>

namespace qwen3tts {

class EmbeddingTable {
 public:
  // From nncf's constants q [N, K] i8 and scale [N, 1] (f16 or f32). Keeps `q` alive; `owner`
  // keeps the memory it points into alive where that is a mapping of the runner's own
  // (MappedIr::mapping()), else it may be null. Throws std::invalid_argument unless INT8.
  EmbeddingTable(std::shared_ptr<ov::op::v0::Constant> q, const ov::op::v0::Constant& scale,
                 std::shared_ptr<const void> owner);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // Row n dequantized, q · scale.
  void row(int64_t n, float* out) const;
  // Where the rows are: what release_mapped (mapped_ir.hpp) hands back.
  const void* data() const { return values_; }
  size_t bytes() const { return static_cast<size_t>(rows_ * cols_); }

 private:
  std::shared_ptr<ov::op::v0::Constant> q_;
  std::shared_ptr<const void> owner_;
  const int8_t* values_ = nullptr;
  std::vector<float> scales_;  // [N]
  int64_t rows_ = 0, cols_ = 0;
};

}  // namespace qwen3tts
