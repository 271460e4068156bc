#include "qwen3tts/runner.hpp"

#include "qwen3tts/int4_linear.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include <openvino/pass/manager.hpp>
#include <openvino/pass/sdpa_to_paged_attention.hpp>

namespace qwen3tts {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

ov::AnyMap to_any(const Properties& properties) {
  ov::AnyMap map;
  for (const auto& [key, value] : properties) map[key] = value;
  return map;
}

bool is_cache(const std::string& name) {
  return name.rfind("key_cache.", 0) == 0 || name.rfind("value_cache.", 0) == 0;
}

ov::Core& shared_core() {
  static ov::Core* core = new ov::Core();  // never deleted (see Runner::core_), nor at exit
  return *core;
}

// One of a request's own input tensors (TalkerIo, SubcodeIo), reshaped (it grows as needed):
// filling it costs less than a fresh tensor and set_tensor per input and call.
template <typename T>
T* reshaped(ov::Tensor& tensor, const ov::Shape& shape) {
  tensor.set_shape(shape);
  return tensor.data<T>();
}

template <typename T>
void fill(ov::Tensor& tensor, const std::vector<T>& values, const ov::Shape& shape) {
  std::memcpy(reshaped<T>(tensor, shape), values.data(), values.size() * sizeof(T));
}

int64_t static_dim(const ov::Output<const ov::Node>& output, size_t axis) {
  const auto shape = output.get_partial_shape();
  if (shape.rank().is_dynamic() || shape.size() <= axis || shape[axis].is_dynamic())
    throw std::runtime_error("the talker's " + output.get_any_name() + " has no static width");
  return shape[axis].get_length();
}

}  // namespace

Runner::Runner(const RunnerConfig& config) : config_(config), core_(shared_core()) {
  if (config_.groups < 2) throw std::invalid_argument("groups must be >= 2");
  // the named copy (an error now if this CPU does not run it), else the fastest, if any
  if (!config_.kernels.empty() || !supported_isas().empty()) kernels_ = &kernels_named(config_.kernels);
  load_memory_.push_back({"before", ResidentMemory::now()});
  compile_codec();  // the largest weights first: each graph's file pages are gone before the next is read
  load_memory_.push_back({"codec", ResidentMemory::now()});
  compile_talker();
  load_memory_.push_back({"talker", ResidentMemory::now()});
  compile_subcode();
  load_memory_.push_back({"subcode", ResidentMemory::now()});
}

Runner::~Runner() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_graphs();
}

void Runner::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_graphs();
}

void Runner::release_graphs() {
  closed_ = true;
  streams_.clear();
  primed_.clear();
  codec_.reset();  // each graph's request (and its tensors) before its compiled model
  subcode_cpu_.reset();
  talker_cpu_.reset();
  team_.reset();
  talker_io_ = {};
  subcode_io_ = {};
  talker_req_ = {};
  subcode_req_ = {};
  caches_.clear();  // the KV cache's tensors (held for block copies): its memory goes now too
  talker_ = {};
  subcode_ = {};
  irs_.clear();  // only now that nothing can read a constant: unmap the weights
}

void Runner::check_open() const {
  if (closed_) throw std::runtime_error("the runner is closed");
}

StepTimes Runner::times() const {
  std::lock_guard<std::mutex> lock(times_mutex_);
  return times_;
}

void Runner::add_time(double StepTimes::*field, double seconds) {
  std::lock_guard<std::mutex> lock(times_mutex_);
  times_.*field += seconds;
}

void Runner::compile_codec() {
  auto compile = [&](const std::map<int, std::string>& paths) {
    std::map<int, ov::CompiledModel> graphs;
    for (const auto& [size, path] : paths) {
      MappedIr ir(core_, path);
      if (config_.decoder_batch > 0) {  // static shapes: what an NPU needs, and faster on a CPU
        std::map<std::string, ov::PartialShape> shapes;
        for (const auto& input : ir.model()->inputs()) {
          auto shape = input.get_partial_shape();
          shape[0] = config_.decoder_batch;
          shapes[input.get_any_name()] = shape;
        }
        ir.model()->reshape(shapes);
      }
      // static shapes: the plugin packs the weights while compiling
      graphs.emplace(size, core_.compile_model(ir.model(), config_.decoder_device, to_any(config_.decoder_properties)));
      ir.release();
      irs_.push_back(std::move(ir));
    }
    return graphs;
  };
  auto first = compile(config_.first_xml), steady = compile(config_.steady_xml);
  const std::vector<int> sizes{static_cast<int>(config_.first_chunk), static_cast<int>(config_.steady_chunk)};
  if (!first.empty() || !steady.empty())
    codec_ = std::make_unique<StreamingCodec>(std::move(first), std::move(steady), sizes);
  if (!config_.offline) {
    bool ok = codec_ && (codec_->has_first(config_.first_chunk) || codec_->has_steady(config_.first_chunk)) &&
              codec_->has_steady(config_.steady_chunk);
    if (!ok)
      throw std::invalid_argument("no codec graphs for chunks first=" + std::to_string(config_.first_chunk) +
                                  " steady=" + std::to_string(config_.steady_chunk));
  }
}

void Runner::compile_talker() {
  MappedIr ir(core_, config_.talker_xml);
  if (use_talker_cpu(*ir.model())) {  // its weights are copied: the mapped IR goes now
    hidden_ = talker_cpu_->hidden();
    vocab_ = talker_cpu_->vocab();
    block_size_ = talker_cpu_->block_size();
    kv_block_bytes_ = talker_cpu_->block_bytes();
    check_ids();
    talker_io_.logits = ov::Tensor(ov::element::f32, {1, static_cast<size_t>(vocab_)});
    talker_io_.hidden = ov::Tensor(ov::element::f32, {1, static_cast<size_t>(hidden_)});
    return;
  }
  ov::pass::Manager passes;
  passes.register_pass<ov::pass::SDPAToPagedAttention>();
  passes.run_passes(ir.model());
  int64_t paged = 0;
  for (const auto& op : ir.model()->get_ordered_ops())
    paged += std::string(op->get_type_name()) == "PagedAttentionExtension";
  if (paged != config_.num_layers)
    throw std::runtime_error("SDPAToPagedAttention inserted " + std::to_string(paged) +
                             " PagedAttention nodes, expected " + std::to_string(config_.num_layers));
  use_int4_kernel(ir.model(), config_.talker_device);
  talker_ = core_.compile_model(ir.model(), config_.talker_device, to_any(config_.talker_properties));
  talker_req_ = talker_.create_infer_request();
  const auto io = [&](const char* name) { return talker_req_.get_tensor(name); };
  talker_io_ = {io("inputs_embeds"), io("position_ids"), io("past_lens"), io("subsequence_begins"),
                io("block_indices"), io("block_indices_begins"), io("max_context_len"), io("sample_rows"),
                io("logits"), io("hidden")};
  // inputs_embeds is [?, ?] after the transformation; the outputs keep their widths
  hidden_ = static_dim(talker_.output("hidden"), 1);
  vocab_ = static_dim(talker_.output("logits"), 1);
  check_ids();
  for (const auto& input : talker_.inputs()) {
    const std::string& name = input.get_any_name();
    if (!is_cache(name)) continue;
    auto shape = input.get_partial_shape();
    int64_t bytes = input.get_element_type().size();
    for (size_t d = 1; d < shape.size(); ++d) bytes *= shape[d].get_length();
    kv_block_bytes_ += bytes;
    if (name == "value_cache.0") block_size_ = shape[2].get_length();
  }
  // The plugin packs the weights of a dynamic-shape graph at its first inference: one
  // token into a cache of its own (the real one, allocate_kv's, is written only by
  // sequences), then the mapped pages can go.
  set_caches(1);
  TalkerIo& t = talker_io_;
  fill(t.embeds, std::vector<float>(hidden_), {1, static_cast<size_t>(hidden_)});
  fill(t.positions, std::vector<int64_t>{0}, {1});
  fill(t.past_lens, std::vector<int32_t>{0}, {1});
  fill(t.begins, std::vector<int32_t>{0, 1}, {2});
  fill(t.block_indices, std::vector<int32_t>{0}, {1});
  fill(t.block_begins, std::vector<int32_t>{0, 1}, {2});
  fill(t.max_context, std::vector<int32_t>{1}, {});
  fill(t.sample_rows, std::vector<int64_t>{0}, {1});
  talker_req_.infer();
  ir.release();
  irs_.push_back(std::move(ir));
}

void Runner::check_ids() const {
  if (config_.eos < 0 || config_.eos >= vocab_ || config_.suppress_from < 0 || config_.suppress_from > vocab_)
    throw std::invalid_argument("eos and suppress_from must be talker ids");
}

std::string Runner::cpu_stack_refused(const std::string& device) const {
  if (device.rfind("CPU", 0) != 0) return "not on the CPU";
  if (kernels_ == nullptr) return "the runner's own kernels need a CPU with AVX2 and FMA";
  return "";
}

std::shared_ptr<ThreadTeam> Runner::team() {
  if (team_) return team_;
  int64_t threads = config_.subcode_threads;
  if (threads <= 0 && talker_) {  // the CPU plugin's choice where it runs the talker
    if (config_.talker_device.rfind("CPU", 0) == 0) threads = talker_.get_property(ov::inference_num_threads);
  } else if (threads <= 0) {
    auto it = config_.talker_properties.find("INFERENCE_NUM_THREADS");
    threads = it != config_.talker_properties.end() ? std::stoll(it->second) : 0;
  }
  team_ = std::make_shared<ThreadTeam>(static_cast<int>(threads > 0 ? threads : available_cores()));
  return team_;
}

bool Runner::use_talker_cpu(const ov::Model& model) {
  if (!config_.talker_cpu) return false;
  const std::string refused = cpu_stack_refused(config_.talker_device);
  if (!refused.empty()) {
    talker_runtime_ = "openvino (" + refused + ")";
    return false;
  }
  try {
    talker_cpu_ = std::make_unique<TalkerCpu>(model, team(), config_.talker_u8_cache, config_.talker_block_size,
                                              *kernels_);
  } catch (const std::invalid_argument& e) {  // not this graph's (older, fp16): the graph runs
    talker_runtime_ = std::string("openvino (") + e.what() + ")";
    return false;
  }
  talker_runtime_ = std::string("talker_cpu, ") + talker_cpu_->kernels().name + ", " +
                    (config_.talker_u8_cache ? "u8" : "f32") + " cache, " + std::to_string(talker_cpu_->threads()) +
                    " threads";
  rows_exact_ = true;
  return true;
}

void Runner::use_int4_kernel(const std::shared_ptr<ov::Model>& model, const std::string& device) {
  if (config_.int4_linear && device.rfind("CPU", 0) == 0 && kernels_ != nullptr)
    int4_products_ += use_int4_linear(model, *kernels_);
}

void Runner::set_caches(int64_t blocks) {
  caches_.clear();
  for (const auto& input : talker_.inputs()) {
    if (!is_cache(input.get_any_name())) continue;
    ov::Shape shape{static_cast<size_t>(blocks)};
    auto partial = input.get_partial_shape();
    for (size_t d = 1; d < partial.size(); ++d) shape.push_back(partial[d].get_length());
    caches_.emplace_back(input.get_element_type(), shape);
    talker_req_.set_tensor(input.get_any_name(), caches_.back());
  }
}

bool Runner::use_subcode_cpu(const ov::Model& model) {
  if (!config_.subcode_cpu) return false;
  const std::string refused = cpu_stack_refused(config_.subcode_device);
  if (!refused.empty()) {
    subcode_runtime_ = "openvino (" + refused + ")";
    return false;
  }
  try {
    subcode_cpu_ = std::make_unique<SubcodeCpu>(model, team(), *kernels_);
  } catch (const std::invalid_argument& e) {  // not this graph's (older, fp16): the graph runs
    subcode_runtime_ = std::string("openvino (") + e.what() + ")";
    return false;
  }
  if (subcode_cpu_->talker_hidden() != hidden_ || subcode_cpu_->steps() != config_.groups - 1)
    throw std::runtime_error("the subcode graph does not fit the talker (hidden width or code groups)");
  subcode_runtime_ = std::string("subcode_cpu, ") + subcode_cpu_->kernels().name + ", " +
                     std::to_string(subcode_cpu_->threads()) + " threads";
  return true;
}

void Runner::compile_subcode() {
  MappedIr ir(core_, config_.subcode_xml);
  const size_t steps = static_cast<size_t>(config_.groups - 1);
  if (use_subcode_cpu(*ir.model())) {  // its weights are copied: the mapped IR goes now
    const size_t width = static_cast<size_t>(hidden_);
    subcode_io_ = {ov::Tensor(ov::element::f32, {1, width}), ov::Tensor(ov::element::i64, {1}),
                   ov::Tensor(ov::element::f32, {1}),        ov::Tensor(ov::element::i64, {1}),
                   ov::Tensor(ov::element::f32, {1}),        ov::Tensor(ov::element::f32, {1, steps}),
                   ov::Tensor(ov::element::i64, {1, steps}), ov::Tensor(ov::element::f32, {1, width})};
    return;
  }
  use_int4_kernel(ir.model(), config_.subcode_device);
  subcode_ = core_.compile_model(ir.model(), config_.subcode_device, to_any(config_.subcode_properties));
  subcode_req_ = subcode_.create_infer_request();
  const auto io = [&](const char* name) { return subcode_req_.get_tensor(name); };
  subcode_io_ = {io("hidden"), io("code0"), io("temperature"), io("top_k"), io("top_p"), io("uniform"),
                 io("codes"), io("frame_embedding")};
  SubcodeIo& s = subcode_io_;
  fill(s.hidden, std::vector<float>(hidden_), {1, static_cast<size_t>(hidden_)});
  fill(s.code0, std::vector<int64_t>{0}, {1});
  fill(s.temperature, std::vector<float>{0.0f}, {1});
  fill(s.top_k, std::vector<int64_t>{1}, {1});
  fill(s.top_p, std::vector<float>{1.0f}, {1});
  fill(s.uniform, std::vector<float>(steps, 0.5f), {1, steps});
  subcode_req_.infer();  // packs the weights (dynamic shapes), as for the talker
  ir.release();
  irs_.push_back(std::move(ir));
}

void Runner::allocate_kv(int64_t num_blocks) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_open();
  if (num_blocks_ > 0) throw std::logic_error("the KV cache is allocated already");
  if (num_blocks < 1) throw std::invalid_argument("the KV cache needs at least one block");
  // allocated, not touched: a block becomes resident when a sequence first writes it
  if (talker_cpu_) talker_cpu_->allocate(num_blocks);
  else set_caches(num_blocks);
  num_blocks_ = num_blocks;
}

void Runner::copy_blocks(const std::vector<int32_t>& pairs) {
  if (pairs.empty()) return;  // most steps: not even a look at the ~60 cache tensors
  if (talker_cpu_) {
    for (size_t i = 0; i + 1 < pairs.size(); i += 2) talker_cpu_->copy_block(pairs[i], pairs[i + 1]);
    return;
  }
  for (ov::Tensor& cache : caches_) {
    const size_t row = cache.get_byte_size() / cache.get_shape()[0];
    auto* bytes = static_cast<uint8_t*>(cache.data());
    for (size_t i = 0; i + 1 < pairs.size(); i += 2)
      std::memcpy(bytes + static_cast<size_t>(pairs[i + 1]) * row, bytes + static_cast<size_t>(pairs[i]) * row, row);
  }
}

void Runner::check(const StepPlan& p) const {
  auto require = [](bool ok, const char* what) {
    if (!ok) throw std::invalid_argument(std::string("step plan: ") + what);
  };
  auto block = [&](int32_t b) { return b >= 0 && b < num_blocks_; };
  auto offsets = [](const auto& begins, size_t end) {  // from 0, never down, to `end`
    if (begins.empty() || begins.front() != 0 || static_cast<size_t>(begins.back()) != end) return false;
    return std::is_sorted(begins.begin(), begins.end());
  };
  const size_t total = p.positions.size(), n = p.past_lens.size(), k = p.sample_rows.size();
  const size_t groups = static_cast<size_t>(config_.groups);
  require(p.copies.size() % 2 == 0 && std::all_of(p.copies.begin(), p.copies.end(), block),
          "copies must be (source, target) pairs of blocks of the KV cache");
  require(p.embeds.size() == total * static_cast<size_t>(hidden_), "embeds must be [positions, hidden]");
  require(p.begins.size() == n + 1 && offsets(p.begins, total), "begins must be offsets of the rows");
  require(p.block_begins.size() == n + 1 && offsets(p.block_begins, p.block_indices.size()),
          "block_begins must be offsets of block_indices");
  require(std::all_of(p.block_indices.begin(), p.block_indices.end(), block),
          "block_indices must be blocks of the KV cache");
  int64_t longest = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t context = int64_t{p.past_lens[i]} + p.begins[i + 1] - p.begins[i];
    require(p.past_lens[i] >= 0 && context <= int64_t{p.block_begins[i + 1] - p.block_begins[i]} * block_size_,
            "a sequence's block table must hold its cached and fed tokens");
    longest = std::max(longest, context);
  }
  require(p.max_context >= longest, "max_context must cover every sequence");
  require(std::all_of(p.sample_rows.begin(), p.sample_rows.end(),
                      [&](int64_t r) { return r >= 0 && static_cast<size_t>(r) < total; }),
          "sample_rows must be rows of embeds");
  require(p.params.size() == k && p.uniforms.size() == k * groups, "every sampled row needs its params and draws");
  require(p.history_begins.size() == k + 1 && offsets(p.history_begins, p.history.size()),
          "history_begins must be offsets of history");
  require(std::all_of(p.history.begin(), p.history.end(), [&](int64_t c) { return c >= 0 && c < vocab_; }),
          "history must hold talker ids");
}

StepOutput Runner::forward(const StepPlan& plan) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_open();
  if (num_blocks_ == 0) throw std::logic_error("allocate_kv() before forward()");
  check(plan);
  copy_blocks(plan.copies);
  const size_t n = plan.past_lens.size(), total = plan.positions.size(), k = plan.sample_rows.size();
  StepOutput out;
  out.codes.assign(k * static_cast<size_t>(config_.groups), 0);
  out.embeddings.assign(k * static_cast<size_t>(hidden_), 0.0f);
  if (total == 0) return out;  // copies only
  TalkerIo& t = talker_io_;
  auto begin = Clock::now();
  if (talker_cpu_) {
    talker_cpu_->run({static_cast<int64_t>(total), static_cast<int64_t>(n), static_cast<int64_t>(k),
                      plan.embeds.data(), plan.positions.data(), plan.past_lens.data(), plan.begins.data(),
                      plan.block_indices.data(), plan.block_begins.data(), plan.sample_rows.data(),
                      reshaped<float>(t.logits, {k, static_cast<size_t>(vocab_)}),
                      reshaped<float>(t.hidden, {k, static_cast<size_t>(hidden_)})});
  } else {
    const std::vector<int64_t> rows = k > 0 ? plan.sample_rows : std::vector<int64_t>{0};  // the graph wants a row
    fill(t.embeds, plan.embeds, {total, static_cast<size_t>(hidden_)});
    fill(t.positions, plan.positions, {total});
    fill(t.past_lens, plan.past_lens, {n});
    fill(t.begins, plan.begins, {n + 1});
    fill(t.block_indices, plan.block_indices, {plan.block_indices.size()});
    fill(t.block_begins, plan.block_begins, {n + 1});
    fill(t.max_context, std::vector<int32_t>{plan.max_context}, {});
    fill(t.sample_rows, rows, {rows.size()});
    begin = Clock::now();
    talker_req_.infer();
  }
  add_time(&StepTimes::talker_s, seconds_since(begin));
  if (k == 0) return out;
  const std::vector<int64_t> code0 = sample_code0(plan, t.logits.data<const float>());
  run_subcode(plan, code0, t.hidden.data<const float>(), out);
  return out;
}

std::vector<int64_t> Runner::sample_code0(const StepPlan& plan, const float* logits) {
  const size_t k = plan.sample_rows.size();
  std::vector<int64_t> codes(k);
  for (size_t r = 0; r < k; ++r) {
    const SamplingParams& p = plan.params[r];
    const int64_t frames = plan.history_begins[r + 1] - plan.history_begins[r];
    std::vector<float> z(logits + r * vocab_, logits + (r + 1) * vocab_);
    process_talker_logits(z, plan.history.data() + plan.history_begins[r], static_cast<size_t>(frames), frames,
                          static_cast<float>(p.repetition_penalty), config_.eos, config_.suppress_from, p.min_frames);
    const double uniform = plan.uniforms[r * config_.groups];
    codes[r] = p.do_sample ? sample_row(z, p.temperature, p.top_k, p.top_p, uniform) : argmax(z);
  }
  return codes;
}

void Runner::run_subcode(const StepPlan& plan, const std::vector<int64_t>& code0, const float* hidden,
                         StepOutput& out) {
  const size_t groups = static_cast<size_t>(config_.groups), steps = groups - 1, width = static_cast<size_t>(hidden_);
  std::vector<size_t> rows;  // the sampled rows that make a frame
  for (size_t r = 0; r < code0.size(); ++r) {
    out.codes[r * groups] = code0[r];
    if (code0[r] != config_.eos) rows.push_back(r);
  }
  if (rows.empty()) return;
  const size_t k = rows.size();
  SubcodeIo& s = subcode_io_;
  float* h = reshaped<float>(s.hidden, {k, width});
  int64_t* codes = reshaped<int64_t>(s.code0, {k});
  float* temperature = reshaped<float>(s.temperature, {k});
  int64_t* top_k = reshaped<int64_t>(s.top_k, {k});
  float* top_p = reshaped<float>(s.top_p, {k});
  float* uniform = reshaped<float>(s.uniform, {k, steps});
  for (size_t i = 0; i < k; ++i) {
    const size_t r = rows[i];
    const SamplingParams& p = plan.params[r];
    std::memcpy(h + i * width, hidden + r * width, width * sizeof(float));
    codes[i] = code0[r];
    temperature[i] = p.subtalker_do_sample ? static_cast<float>(p.subtalker_temperature) : 0.0f;
    top_k[i] = p.subtalker_top_k;
    top_p[i] = static_cast<float>(p.subtalker_top_p);
    for (size_t j = 0; j < steps; ++j)
      uniform[i * steps + j] = static_cast<float>(plan.uniforms[r * groups + 1 + j]);
  }
  auto begin = Clock::now();
  if (subcode_cpu_) {
    subcode_cpu_->run({static_cast<int64_t>(k), h, codes, temperature, top_k, top_p, uniform,
                       reshaped<int64_t>(s.codes, {k, steps}), reshaped<float>(s.embedding, {k, width})});
  } else {
    subcode_req_.infer();
  }
  add_time(&StepTimes::subcode_s, seconds_since(begin));
  const int64_t* sub = s.codes.data<const int64_t>();
  const float* embedding = s.embedding.data<const float>();
  for (size_t i = 0; i < k; ++i) {
    std::copy(sub + i * steps, sub + (i + 1) * steps, out.codes.begin() + rows[i] * groups + 1);
    std::copy(embedding + i * width, embedding + (i + 1) * width, out.embeddings.begin() + rows[i] * width);
  }
}

void Runner::open_stream(int64_t id, const std::vector<int64_t>& prefix) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_open();
  if (config_.offline) return;
  if (streams_.count(id)) throw std::invalid_argument("codec stream " + std::to_string(id) + " is open already");
  if (prefix.size() % static_cast<size_t>(config_.groups) != 0)
    throw std::invalid_argument("reference codes must be [frames, groups]");
  streams_.emplace(id, prefix.empty() ? CodecState{} : primed(prefix));
}

void Runner::close_stream(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  streams_.erase(id);
}

CodecState Runner::primed(const std::vector<int64_t>& prefix) {
  for (auto it = primed_.begin(); it != primed_.end(); ++it) {
    if (it->first == prefix) {
      primed_.splice(primed_.begin(), primed_, it);
      return primed_.front().second;
    }
  }
  auto begin = Clock::now();
  CodecState state = codec_->prime(prefix);
  add_time(&StepTimes::codec_s, seconds_since(begin));  // the reference's decoding counts as codec time, as in Python
  primed_.emplace_front(prefix, state);
  if (primed_.size() > static_cast<size_t>(config_.primed_states)) primed_.pop_back();
  return state;
}

std::vector<std::vector<float>> Runner::decode(const std::vector<CodecChunk>& chunks) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_open();
  if (config_.offline) throw std::logic_error("an offline runner has no codec streams");
  const size_t groups = static_cast<size_t>(config_.groups);
  struct Call {
    std::vector<size_t> chunks;
    std::vector<CodecState*> states;
    std::vector<std::vector<int64_t>> codes;
    std::vector<int64_t> frames;
  };
  std::map<int, Call> calls;  // by chunk size: one codec call each
  std::vector<CodecState*> seen;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const CodecChunk& c = chunks[i];
    auto it = streams_.find(c.stream);
    if (it == streams_.end()) throw std::invalid_argument("no codec stream " + std::to_string(c.stream));
    if (std::find(seen.begin(), seen.end(), &it->second) != seen.end())
      throw std::invalid_argument("two chunks of codec stream " + std::to_string(c.stream) + " in one call");
    seen.push_back(&it->second);
    if (c.codes.empty() || c.codes.size() % groups != 0)
      throw std::invalid_argument("a chunk's codes must be [frames, groups], frames >= 1");
    Call& call = calls[c.size];
    call.chunks.push_back(i);
    call.states.push_back(&it->second);
    call.codes.push_back(c.codes);
    call.frames.push_back(static_cast<int64_t>(c.codes.size() / groups));
  }
  std::vector<std::vector<float>> pcm(chunks.size());
  for (auto& [size, call] : calls) {
    auto begin = Clock::now();
    auto out = codec_->decode(call.states, call.codes, call.frames, size);
    add_time(&StepTimes::codec_s, seconds_since(begin));
    for (size_t j = 0; j < call.chunks.size(); ++j) pcm[call.chunks[j]] = std::move(out[j]);
  }
  return pcm;
}

}  // namespace qwen3tts
