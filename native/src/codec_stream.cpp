#include "qwen3tts/codec_stream.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace qwen3tts {

namespace {
const std::string kState = "state.", kNext = "next.", kFrames = "frames";
}

StreamingCodec::Graph StreamingCodec::make_graph(ov::CompiledModel compiled) {
  Graph g{compiled, compiled.create_infer_request()};
  auto codes = compiled.input("codes").get_partial_shape();
  g.batch = codes[0].is_static() ? codes[0].get_length() : 0;
  g.frames = codes[2].get_length();
  for (const auto& input : compiled.inputs()) {
    for (const auto& name : input.get_names()) {
      g.any_length = g.any_length || name == kFrames;
      g.stateful = g.stateful || name.rfind(kState, 0) == 0;
    }
  }
  return g;
}

StreamingCodec::StreamingCodec(std::map<int, ov::CompiledModel> first, std::map<int, ov::CompiledModel> steady,
                               const std::vector<int>& sizes) {
  if (first.empty() && steady.empty()) throw std::invalid_argument("no codec graphs");
  for (auto& [n, m] : first) first_[n] = &graphs_.emplace_back(make_graph(m));
  for (auto it = steady.rbegin(); it != steady.rend(); ++it) {
    Graph* graph = &graphs_.emplace_back(make_graph(it->second));
    steady_[it->first] = graph;
    by_length_.push_back(graph);
  }
  for (int size : sizes) {
    if (steady_.count(size)) continue;
    for (auto it = by_length_.rbegin(); it != by_length_.rend(); ++it)  // the shortest first
      if ((*it)->any_length && (*it)->frames >= size) {
        steady_[size] = *it;
        break;
      }
  }
  const ov::CompiledModel& some = graphs_.front().compiled;
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
  Graph* graph = fresh && first_.count(size) ? first_.at(size) : steady_.count(size) ? steady_.at(size) : nullptr;
  if (!graph) throw std::invalid_argument("no codec graph of " + std::to_string(size) + " frames");
  for (size_t row = 0; row < n; ++row) {
    if (streams[row]->closed) throw std::invalid_argument("stream already ended with a partial chunk");
    if (frames[row] < 1 || frames[row] > size) throw std::invalid_argument("chunk size out of range");
  }
  return run(*graph, streams, codes, frames);
}

std::vector<std::vector<float>> StreamingCodec::run(Graph& graph, const std::vector<CodecState*>& streams,
                                                    const std::vector<std::vector<int64_t>>& codes,
                                                    const std::vector<int64_t>& frames) {
  const size_t n = streams.size();
  if (graph.batch && static_cast<int64_t>(n) > graph.batch) {  // a static batch too small: several calls
    std::vector<std::vector<float>> all;
    for (size_t i = 0; i < n; i += graph.batch) {
      size_t end = std::min(n, i + static_cast<size_t>(graph.batch));
      auto part = run(graph, {streams.begin() + i, streams.begin() + end}, {codes.begin() + i, codes.begin() + end},
                      {frames.begin() + i, frames.begin() + end});
      for (auto& p : part) all.push_back(std::move(p));
    }
    return all;
  }
  const size_t rows = graph.batch ? graph.batch : n;
  const int64_t length = graph.frames;
  // The request's own input tensors, filled in place: a fresh ~5 MB state tensor per call cost
  // its allocation and page faults on every chunk.
  ov::InferRequest& req = graph.request;
  ov::Tensor code_tensor = req.get_tensor("codes");
  code_tensor.set_shape({rows, static_cast<size_t>(quantizers_), static_cast<size_t>(length)});
  int64_t* c = code_tensor.data<int64_t>();
  std::fill(c, c + code_tensor.get_size(), 0);
  for (size_t row = 0; row < n; ++row)
    for (int64_t t = 0; t < frames[row]; ++t)
      for (int64_t q = 0; q < quantizers_; ++q)
        c[(row * quantizers_ + q) * length + t] = codes[row][t * quantizers_ + q];
  if (graph.any_length) {
    ov::Tensor real = req.get_tensor(kFrames);
    real.set_shape({rows});
    std::fill(real.data<int64_t>(), real.data<int64_t>() + rows, length);  // idle rows: full chunks
    std::copy(frames.begin(), frames.end(), real.data<int64_t>());
  }
  if (graph.stateful) {
    for (size_t s = 0; s < layout_.size(); ++s) {
      const StateSlot& slot = layout_[s];
      ov::Shape shape{rows};
      shape.insert(shape.end(), slot.row_shape.begin(), slot.row_shape.end());
      ov::Tensor state = req.get_tensor(kState + slot.name);
      state.set_shape(shape);
      auto* bytes = static_cast<uint8_t*>(state.data());
      for (size_t row = 0; row < rows; ++row)
        if (row < n && !streams[row]->tensors.empty())
          std::memcpy(bytes + row * slot.row_bytes, streams[row]->tensors[s].data(), slot.row_bytes);
        else
          std::memset(bytes + row * slot.row_bytes, 0, slot.row_bytes);  // fresh and idle rows start from zeros
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
    if (frames[row] < length && !graph.any_length) {
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
    const int64_t left = total - start;
    Graph* graph = nullptr;
    for (Graph* g : by_length_)  // the longest that fits
      if (!graph && g->frames <= left) graph = g;
    for (auto it = by_length_.rbegin(); it != by_length_.rend() && !graph; ++it)  // or the shortest taking less
      if ((*it)->any_length) graph = *it;
    if (!graph)
      throw std::invalid_argument("steady codec graphs cannot cover " + std::to_string(total) +
                                  " reference frames exactly (compile the 1-frame graph)");
    const int64_t take = std::min(graph->frames, left);
    std::vector<int64_t> chunk(codes.begin() + start * quantizers_, codes.begin() + (start + take) * quantizers_);
    run(*graph, {&stream}, {chunk}, {take});
    start += take;
  }
  stream.frames = 0;
  return stream;
}

}  // namespace qwen3tts
