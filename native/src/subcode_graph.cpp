#include "qwen3tts/subcode_graph.hpp"

#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

namespace qwen3tts {

namespace {

int64_t width(const ov::Output<const ov::Node>& port) {
  const ov::PartialShape shape = port.get_partial_shape();
  if (shape.rank().is_dynamic() || shape.size() != 2 || shape[1].is_dynamic())
    throw std::runtime_error("the subcode graph's " + port.get_any_name() + " has no static width");
  return shape[1].get_length();
}

}  // namespace

SubcodeGraph::SubcodeGraph(ov::Core& core, MappedIr ir, const std::string& device, const Properties& properties,
                           std::string why, const GraphHook& before_compile)
    : ir_(std::move(ir)), why_(std::move(why)) {
  if (before_compile) before_compile(ir_.model());
  compiled_ = core.compile_model(ir_.model(), device, to_any(properties));
  talker_hidden_ = width(compiled_.input("hidden"));
  steps_ = width(compiled_.output("codes"));
  request_ = compiled_.create_infer_request();
  const auto io = [&](const char* name) { return request_.get_tensor(name); };
  io_ = {io("hidden"), io("code0"), io("temperature"), io("top_k"), io("top_p"), io("uniform"), io("codes"),
         io("frame_embedding")};
  // packs the weights (dynamic shapes: at the first inference), as the talker's graph
  const std::vector<float> hidden(static_cast<size_t>(talker_hidden_)), uniform(static_cast<size_t>(steps_), 0.5f);
  const int64_t code0 = 0, top_k = 1;
  const float temperature = 0.0f, top_p = 1.0f;
  run({1, hidden.data(), &code0, &temperature, &top_k, &top_p, uniform.data(), nullptr, nullptr});
  ir_.release();
}

SubcodeGraph::~SubcodeGraph() {
  io_ = {};
  request_ = {};
  compiled_ = {};
}

void SubcodeGraph::run(const SubcodeBatch& b) {
  const auto k = static_cast<size_t>(b.rows), width = static_cast<size_t>(talker_hidden_);
  const auto steps = static_cast<size_t>(steps_);
  fill(io_.hidden, b.hidden, {k, width});
  fill(io_.code0, b.code0, {k});
  fill(io_.temperature, b.temperature, {k});
  fill(io_.top_k, b.top_k, {k});
  fill(io_.top_p, b.top_p, {k});
  fill(io_.uniform, b.uniform, {k, steps});
  request_.infer();
  if (b.codes) std::memcpy(b.codes, io_.codes.data(), k * steps * sizeof(int64_t));
  if (b.embedding) std::memcpy(b.embedding, io_.embedding.data(), k * width * sizeof(float));
}

}  // namespace qwen3tts
