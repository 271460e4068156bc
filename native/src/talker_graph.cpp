#include "qwen3tts/talker_graph.hpp"

#include <cstring>
#include <stdexcept>
#include <utility>

#include <openvino/pass/manager.hpp>
#include <openvino/pass/sdpa_to_paged_attention.hpp>

namespace qwen3tts {

namespace {

bool is_cache(const std::string& name) {
  return name.rfind("key_cache.", 0) == 0 || name.rfind("value_cache.", 0) == 0;
}

int64_t static_dim(const ov::Output<const ov::Node>& output, size_t axis) {
  const auto shape = output.get_partial_shape();
  if (shape.rank().is_dynamic() || shape.size() <= axis || shape[axis].is_dynamic())
    throw std::runtime_error("the talker's " + output.get_any_name() + " has no static width");
  return shape[axis].get_length();
}

}  // namespace

TalkerGraph::TalkerGraph(ov::Core& core, MappedIr ir, int64_t layers, const std::string& device,
                         const Properties& properties, std::string why, const GraphHook& before_compile)
    : ir_(std::move(ir)), device_(device), why_(std::move(why)) {
  ov::pass::Manager passes;
  passes.register_pass<ov::pass::SDPAToPagedAttention>();
  passes.run_passes(ir_.model());
  int64_t paged = 0;
  for (const auto& op : ir_.model()->get_ordered_ops())
    paged += std::string(op->get_type_name()) == "PagedAttentionExtension";
  if (paged != layers)
    throw std::runtime_error("SDPAToPagedAttention inserted " + std::to_string(paged) +
                             " PagedAttention nodes, expected " + std::to_string(layers));
  if (before_compile) before_compile(ir_.model());
  compiled_ = core.compile_model(ir_.model(), device, to_any(properties));
  request_ = compiled_.create_infer_request();
  const auto io = [&](const char* name) { return request_.get_tensor(name); };
  io_ = {io("inputs_embeds"), io("position_ids"), io("past_lens"), io("subsequence_begins"), io("block_indices"),
         io("block_indices_begins"), io("max_context_len"), io("sample_rows"), io("logits"), io("hidden")};
  // inputs_embeds is [?, ?] after the transformation; the outputs keep their widths
  hidden_ = static_dim(compiled_.output("hidden"), 1);
  vocab_ = static_dim(compiled_.output("logits"), 1);
  for (const auto& input : compiled_.inputs()) {
    const std::string& name = input.get_any_name();
    if (!is_cache(name)) continue;
    auto shape = input.get_partial_shape();
    int64_t bytes = input.get_element_type().size();
    for (size_t d = 1; d < shape.size(); ++d) bytes *= shape[d].get_length();
    block_bytes_ += bytes;
    if (name == "value_cache.0") block_size_ = shape[2].get_length();
  }
  // The plugin packs the weights of a dynamic-shape graph at its first inference: one token
  // into a cache of its own (the real one, allocate()'s, is written only by sequences), then
  // the mapped pages can go.
  set_caches(1);
  const std::vector<float> embeds(static_cast<size_t>(hidden_));
  const int64_t position = 0, row = 0;
  const int32_t zero = 0, one = 1, pair[2] = {0, 1};
  run({1, 1, 1, embeds.data(), &position, &zero, pair, &zero, pair, one, &row, nullptr, nullptr});
  ir_.release();
}

TalkerGraph::~TalkerGraph() {
  io_ = {};  // the request's tensors, the request, the caches, then the compiled model
  request_ = {};
  caches_.clear();
  compiled_ = {};
}

int64_t TalkerGraph::cpu_threads() const {
  return device_.rfind("CPU", 0) == 0 ? static_cast<int64_t>(compiled_.get_property(ov::inference_num_threads)) : 0;
}

void TalkerGraph::set_caches(int64_t blocks) {
  caches_.clear();
  for (const auto& input : compiled_.inputs()) {
    if (!is_cache(input.get_any_name())) continue;
    ov::Shape shape{static_cast<size_t>(blocks)};
    auto partial = input.get_partial_shape();
    for (size_t d = 1; d < partial.size(); ++d) shape.push_back(partial[d].get_length());
    caches_.emplace_back(input.get_element_type(), shape);
    request_.set_tensor(input.get_any_name(), caches_.back());
  }
}

void TalkerGraph::allocate(int64_t blocks) {
  set_caches(blocks);  // allocated, not touched
  blocks_ = blocks;
}

void TalkerGraph::copy_blocks(const std::vector<int32_t>& pairs) {
  for (ov::Tensor& cache : caches_) {
    const size_t row = cache.get_byte_size() / cache.get_shape()[0];
    auto* bytes = static_cast<uint8_t*>(cache.data());
    for (size_t i = 0; i + 1 < pairs.size(); i += 2)
      std::memcpy(bytes + static_cast<size_t>(pairs[i + 1]) * row, bytes + static_cast<size_t>(pairs[i]) * row, row);
  }
}

void TalkerGraph::run(const TalkerCall& c) {
  const auto rows = static_cast<size_t>(c.rows), n = static_cast<size_t>(c.sequences);
  const auto k = static_cast<size_t>(c.samples);
  const size_t tables = static_cast<size_t>(c.block_begins[n]);
  const int64_t first = 0;  // the graph wants a sampled row, even in a step that samples none
  fill(io_.embeds, c.embeds, {rows, static_cast<size_t>(hidden_)});
  fill(io_.positions, c.positions, {rows});
  fill(io_.past_lens, c.past_lens, {n});
  fill(io_.begins, c.begins, {n + 1});
  fill(io_.block_indices, c.block_indices, {tables});
  fill(io_.block_begins, c.block_begins, {n + 1});
  fill(io_.max_context, &c.max_context, {});
  fill(io_.sample_rows, k > 0 ? c.sample_rows : &first, {k > 0 ? k : 1});
  request_.infer();
  if (c.logits) std::memcpy(c.logits, io_.logits.data(), k * static_cast<size_t>(vocab_) * sizeof(float));
  if (c.hidden) std::memcpy(c.hidden, io_.hidden.data(), k * static_cast<size_t>(hidden_) * sizeof(float));
}

}  // namespace qwen3tts
