#include "qwen3tts/codec_stream.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace qwen3tts {

namespace {
const std::string kState = "state.", kNext = "next.";
}

StreamingCodec::Graph StreamingCodec::make_graph(ov::CompiledModel compiled) {
  Graph g{compiled, compiled.create_infer_request(), 0};
  auto dim = compiled.input("codes").get_partial_shape()[0];
  g.batch = dim.is_static() ? dim.get_length() : 0;
  return g;
}

StreamingCodec::StreamingCodec(std::map<int, ov::CompiledModel> first, std::map<int, ov::CompiledModel> steady) {
  if (first.empty() && steady.empty()) throw std::invalid_argument("no codec graphs");
  for (auto& [n, m] : first) first_.emplace(n, make_graph(m));
  for (auto& [n, m] : steady) steady_.emplace(n, make_graph(m));
  const ov::CompiledModel& some = first_.empty() ? steady_.begin()->second.compiled : first_.begin()->second.compiled;
  auto codes = some.input("codes").get_partial_shape();
  quantizers_ = codes[1].get_length();
  samples_per_frame_ = some.output("pcm").get_partial_shape()[1].get_length() / codes[2].get_length();
  for (const auto& output : some.outputs()) {
    const std::string& name = output.get_any_name();
    if (name.rfind(kNext, 0) != 0) continue;
    StateSlot slot{name.substr(kNext.size()), output.get_element_type(), {}, 0};
    auto shape = output.get_partial_shape();
    for (size_t d = 1; d < shape.size(); ++d) slot.row_shape.push_back(shape[d].get_length());
    slot.row_bytes = slot.type.size() * ov::shape_size(slot.row_shape);
    layout_.push_back(slot);
  }
}

std::vector<std::vector<float>> StreamingCodec::decode(const std::vector<CodecState*>& streams,
                                                       const std::vector<std::vector<int64_t>>& codes,
                                                       const std::vector<int64_t>& frames, int size) {
  const size_t n = streams.size();
  if (n == 0 || codes.size() != n || frames.size() != n) throw std::invalid_argument("need one chunk per stream");
  bool fresh = std::all_of(streams.begin(), streams.end(), [](const CodecState* s) { return s->tensors.empty(); });
  Graph* graph = nullptr;
  bool is_first = false;
  if (fresh && first_.count(size)) {
    graph = &first_.at(size);
    is_first = true;
  } else if (steady_.count(size)) {
    graph = &steady_.at(size);
  } else {
    throw std::invalid_argument("no codec graph of " + std::to_string(size) + " frames");
  }
  if (graph->batch && static_cast<int64_t>(n) > graph->batch) {  // a static batch too small: several calls
    std::vector<std::vector<float>> all;
    for (size_t i = 0; i < n; i += graph->batch) {
      size_t end = std::min(n, i + static_cast<size_t>(graph->batch));
      auto part = decode({streams.begin() + i, streams.begin() + end}, {codes.begin() + i, codes.begin() + end},
                         {frames.begin() + i, frames.begin() + end}, size);
      for (auto& p : part) all.push_back(std::move(p));
    }
    return all;
  }
  const size_t rows = graph->batch ? graph->batch : n;
  ov::Tensor code_tensor(ov::element::i64, {rows, static_cast<size_t>(quantizers_), static_cast<size_t>(size)});
  int64_t* c = code_tensor.data<int64_t>();
  std::fill(c, c + code_tensor.get_size(), 0);
  for (size_t row = 0; row < n; ++row) {
    if (streams[row]->closed) throw std::invalid_argument("stream already ended with a partial chunk");
    if (frames[row] < 1 || frames[row] > size) throw std::invalid_argument("chunk size out of range");
    for (int64_t t = 0; t < frames[row]; ++t)
      for (int64_t q = 0; q < quantizers_; ++q) c[(row * quantizers_ + q) * size + t] = codes[row][t * quantizers_ + q];
  }
  ov::InferRequest& req = graph->request;
  req.set_tensor("codes", code_tensor);
  if (!is_first) {
    for (size_t s = 0; s < layout_.size(); ++s) {
      const StateSlot& slot = layout_[s];
      ov::Shape shape{rows};
      shape.insert(shape.end(), slot.row_shape.begin(), slot.row_shape.end());
      ov::Tensor state(slot.type, shape);
      auto* bytes = static_cast<uint8_t*>(state.data());
      std::memset(bytes, 0, state.get_byte_size());  // fresh and idle rows start from zeros
      for (size_t row = 0; row < n; ++row)
        if (!streams[row]->tensors.empty())
          std::memcpy(bytes + row * slot.row_bytes, streams[row]->tensors[s].data(), slot.row_bytes);
      req.set_tensor(kState + slot.name, state);
    }
  }
  req.infer();
  const ov::Tensor pcm = req.get_tensor("pcm");
  const float* p = pcm.data<const float>();
  const size_t row_samples = pcm.get_shape()[1];
  std::vector<std::vector<float>> out(n);
  for (size_t row = 0; row < n; ++row) {
    CodecState& stream = *streams[row];
    const float* start = p + row * row_samples;
    out[row].assign(start, start + frames[row] * samples_per_frame_);
    stream.frames += frames[row];
    if (frames[row] < size) {
      stream.closed = true;
      stream.tensors.clear();
    } else {
      stream.tensors.resize(layout_.size());
      for (size_t s = 0; s < layout_.size(); ++s) {
        const ov::Tensor next = req.get_tensor(kNext + layout_[s].name);
        const auto* bytes = static_cast<const uint8_t*>(next.data());
        stream.tensors[s].assign(bytes + row * layout_[s].row_bytes, bytes + (row + 1) * layout_[s].row_bytes);
      }
    }
  }
  return out;
}

CodecState StreamingCodec::prime(const std::vector<int64_t>& codes) {
  const int64_t total = static_cast<int64_t>(codes.size()) / quantizers_;
  if (total * quantizers_ != static_cast<int64_t>(codes.size()))
    throw std::invalid_argument("reference codes must be frames × " + std::to_string(quantizers_));
  CodecState stream;
  for (int64_t start = 0; start < total;) {
    int size = 0;
    for (auto it = steady_.rbegin(); it != steady_.rend() && size == 0; ++it)
      if (it->first <= total - start) size = it->first;
    if (size == 0)
      throw std::invalid_argument("steady codec graphs cannot cover " + std::to_string(total) +
                                  " reference frames exactly (compile the 1-frame graph)");
    std::vector<int64_t> chunk(codes.begin() + start * quantizers_, codes.begin() + (start + size) * quantizers_);
    decode({&stream}, {chunk}, {size}, size);
    start += size;
  }
  stream.frames = 0;
  return stream;
}

}  // namespace qwen3tts
