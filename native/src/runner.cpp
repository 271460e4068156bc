#include "qwen3tts/runner.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "qwen3tts/executors.hpp"
#include "qwen3tts/shared_core.hpp"

namespace qwen3tts {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

template <typename T>
T* sized(std::vector<T>& v, size_t n) {
  v.resize(n);
  return v.data();
}

}  // namespace

Runner::Runner(const RunnerConfig& config, std::shared_ptr<const CodecGraphs> codec, TestHooks hooks)
    : config_(config), core_(shared_core()), codec_graphs_(std::move(codec)) {
  if (config_.groups < 2) throw std::invalid_argument("groups must be >= 2");
  ExecutorLoader load(core_, config_, std::move(hooks));  // checks config.kernels against this CPU first
  load_memory_.push_back({"before", ResidentMemory::now()});
  if (codec_graphs_) codec_ = codec_graphs_->open();
  talker_ = load.talker();
  hidden_ = talker_->hidden();
  vocab_ = talker_->vocab();
  block_size_ = talker_->block_size();
  kv_block_bytes_ = talker_->block_bytes();
  talker_runtime_ = talker_->describe();
  rows_exact_ = talker_->rows_exact();
  check_ids();
  load_memory_.push_back({"talker", ResidentMemory::now()});
  subcode_ = load.subcode(hidden_);
  subcode_runtime_ = subcode_->describe();
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
  codec_graphs_.reset();  // the compiled codec goes with its last runner
  subcode_.reset();
  talker_.reset();  // with it the KV cache
}

std::shared_ptr<const CodecGraphs> Runner::codec_graphs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return codec_graphs_;
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

void Runner::check_ids() const {
  if (config_.eos < 0 || config_.eos >= vocab_ || config_.suppress_from < 0 || config_.suppress_from > vocab_)
    throw std::invalid_argument("eos and suppress_from must be talker ids");
}

void Runner::allocate_kv(int64_t num_blocks) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_open();
  if (num_blocks_ > 0) throw std::logic_error("the KV cache is allocated already");
  if (num_blocks < 1) throw std::invalid_argument("the KV cache needs at least one block");
  talker_->allocate(num_blocks);  // allocated, not touched: a block becomes resident when a sequence first writes it
  num_blocks_ = num_blocks;
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
  if (!plan.copies.empty()) talker_->copy_blocks(plan.copies);
  const size_t n = plan.past_lens.size(), total = plan.positions.size(), k = plan.sample_rows.size();
  StepOutput out;
  out.codes.assign(k * static_cast<size_t>(config_.groups), 0);
  out.embeddings.assign(k * static_cast<size_t>(hidden_), 0.0f);
  if (total == 0) return out;  // copies only
  Scratch& s = scratch_;
  const auto begin = Clock::now();
  talker_->run({static_cast<int64_t>(total), static_cast<int64_t>(n), static_cast<int64_t>(k), plan.embeds.data(),
                plan.positions.data(), plan.past_lens.data(), plan.begins.data(), plan.block_indices.data(),
                plan.block_begins.data(), plan.max_context, plan.sample_rows.data(),
                sized(s.logits, k * static_cast<size_t>(vocab_)), sized(s.hidden, k * static_cast<size_t>(hidden_))});
  add_time(&StepTimes::talker_s, seconds_since(begin));
  if (k == 0) return out;
  run_subcode(plan, sample_code0(plan), out);
  return out;
}

std::vector<int64_t> Runner::sample_code0(const StepPlan& plan) {
  const size_t k = plan.sample_rows.size();
  const float* logits = scratch_.logits.data();
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

void Runner::run_subcode(const StepPlan& plan, const std::vector<int64_t>& code0, StepOutput& out) {
  const size_t groups = static_cast<size_t>(config_.groups), steps = groups - 1, width = static_cast<size_t>(hidden_);
  std::vector<size_t> rows;  // the sampled rows that make a frame
  for (size_t r = 0; r < code0.size(); ++r) {
    out.codes[r * groups] = code0[r];
    if (code0[r] != config_.eos) rows.push_back(r);
  }
  if (rows.empty()) return;
  const size_t k = rows.size();
  Scratch& s = scratch_;
  float* h = sized(s.subcode_hidden, k * width);
  int64_t* codes = sized(s.code0, k);
  float* temperature = sized(s.temperature, k);
  int64_t* top_k = sized(s.top_k, k);
  float* top_p = sized(s.top_p, k);
  float* uniform = sized(s.uniform, k * steps);
  for (size_t i = 0; i < k; ++i) {
    const size_t r = rows[i];
    const SamplingParams& p = plan.params[r];
    std::memcpy(h + i * width, s.hidden.data() + r * width, width * sizeof(float));
    codes[i] = code0[r];
    temperature[i] = p.subtalker_do_sample ? static_cast<float>(p.subtalker_temperature) : 0.0f;
    top_k[i] = p.subtalker_top_k;
    top_p[i] = static_cast<float>(p.subtalker_top_p);
    for (size_t j = 0; j < steps; ++j)
      uniform[i * steps + j] = static_cast<float>(plan.uniforms[r * groups + 1 + j]);
  }
  const int64_t* sub = sized(s.codes, k * steps);
  const float* embedding = sized(s.embedding, k * width);
  const auto begin = Clock::now();
  subcode_->run({static_cast<int64_t>(k), h, codes, temperature, top_k, top_p, uniform, s.codes.data(),
                 s.embedding.data()});
  add_time(&StepTimes::subcode_s, seconds_since(begin));
  for (size_t i = 0; i < k; ++i) {
    std::copy(sub + i * steps, sub + (i + 1) * steps, out.codes.begin() + rows[i] * groups + 1);
    std::copy(embedding + i * width, embedding + (i + 1) * width, out.embeddings.begin() + rows[i] * width);
  }
}

void Runner::open_stream(int64_t id, const std::vector<int64_t>& prefix) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_open();
  if (!codec_) return;  // offline
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
  if (!codec_) throw std::logic_error("an offline runner has no codec streams");
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
