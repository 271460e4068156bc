#include "qwen3tts/runner.hpp"

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

template <typename T>
ov::Tensor tensor_of(const std::vector<T>& values, ov::element::Type type, ov::Shape shape) {
  ov::Tensor t(type, shape);
  std::memcpy(t.data(), values.data(), values.size() * sizeof(T));
  return t;
}

}  // namespace

Runner::Runner(const RunnerConfig& config) : config_(config), core_(shared_core()) {
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
  primed_.clear();
  codec_.reset();  // each graph's request before its compiled model
  talker_req_ = {};
  subcode_req_ = {};
  caches_.clear();  // the KV pool's tensors (held for block copies): its memory goes now too
  talker_ = {};
  subcode_ = {};
  irs_.clear();  // only now that nothing can read a constant: unmap the weights
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
  ov::pass::Manager passes;
  passes.register_pass<ov::pass::SDPAToPagedAttention>();
  passes.run_passes(ir.model());
  int64_t paged = 0;
  for (const auto& op : ir.model()->get_ordered_ops())
    paged += std::string(op->get_type_name()) == "PagedAttentionExtension";
  if (paged != config_.num_layers)
    throw std::runtime_error("SDPAToPagedAttention inserted " + std::to_string(paged) +
                             " PagedAttention nodes, expected " + std::to_string(config_.num_layers));
  talker_ = core_.compile_model(ir.model(), config_.talker_device, to_any(config_.talker_properties));
  talker_req_ = talker_.create_infer_request();
  hidden_ = static_cast<int64_t>(config_.tts_pad.size());  // inputs_embeds is [?, ?] after the transformation

  int64_t block_size = 0;
  for (const auto& input : talker_.inputs()) {
    const std::string& name = input.get_any_name();
    if (!is_cache(name)) continue;
    auto shape = input.get_partial_shape();
    int64_t bytes = input.get_element_type().size();
    for (size_t d = 1; d < shape.size(); ++d) bytes *= shape[d].get_length();
    kv_block_bytes_ += bytes;
    if (name == "value_cache.0") block_size = shape[2].get_length();
  }
  auto set_cache = [&](int64_t blocks) {
    caches_.clear();
    for (const auto& input : talker_.inputs()) {
      if (!is_cache(input.get_any_name())) continue;
      ov::Shape shape{static_cast<size_t>(blocks)};
      auto partial = input.get_partial_shape();
      for (size_t d = 1; d < partial.size(); ++d) shape.push_back(partial[d].get_length());
      caches_.emplace_back(input.get_element_type(), shape);
      talker_req_.set_tensor(input.get_any_name(), caches_.back());
    }
  };
  // The plugin packs the weights of a dynamic-shape graph at its first inference: one
  // token into a cache of its own (the pool is never written but by sequences), then the
  // mapped pages can go.
  set_cache(1);
  talker_req_.set_tensor("inputs_embeds", tensor_of(std::vector<float>(hidden_), ov::element::f32,
                                                     {1, static_cast<size_t>(hidden_)}));
  talker_req_.set_tensor("position_ids", tensor_of(std::vector<int64_t>{0}, ov::element::i64, {1}));
  talker_req_.set_tensor("past_lens", tensor_of(std::vector<int32_t>{0}, ov::element::i32, {1}));
  talker_req_.set_tensor("subsequence_begins", tensor_of(std::vector<int32_t>{0, 1}, ov::element::i32, {2}));
  talker_req_.set_tensor("block_indices", tensor_of(std::vector<int32_t>{0}, ov::element::i32, {1}));
  talker_req_.set_tensor("block_indices_begins", tensor_of(std::vector<int32_t>{0, 1}, ov::element::i32, {2}));
  talker_req_.set_tensor("max_context_len", tensor_of(std::vector<int32_t>{1}, ov::element::i32, {}));
  talker_req_.set_tensor("sample_rows", tensor_of(std::vector<int64_t>{0}, ov::element::i64, {1}));
  talker_req_.infer();
  ir.release();
  irs_.push_back(std::move(ir));

  int64_t blocks = config_.kv_blocks > 0 ? config_.kv_blocks
                                         : std::max<int64_t>(1, config_.kv_cache_bytes / kv_block_bytes_);
  pool_ = std::make_unique<BlockPool>(static_cast<int>(blocks), static_cast<int>(block_size),
                                      static_cast<int>(config_.prefix_entries));
  set_cache(blocks);  // allocated, not touched: a block becomes resident when a sequence first writes it
}

void Runner::compile_subcode() {
  MappedIr ir(core_, config_.subcode_xml);
  subcode_ = core_.compile_model(ir.model(), config_.subcode_device, to_any(config_.subcode_properties));
  subcode_req_ = subcode_.create_infer_request();
  const size_t steps = static_cast<size_t>(config_.groups - 1);
  subcode_req_.set_tensor("hidden", tensor_of(std::vector<float>(hidden_), ov::element::f32,
                                              {1, static_cast<size_t>(hidden_)}));
  subcode_req_.set_tensor("code0", tensor_of(std::vector<int64_t>{0}, ov::element::i64, {1}));
  subcode_req_.set_tensor("temperature", tensor_of(std::vector<float>{0.0f}, ov::element::f32, {1}));
  subcode_req_.set_tensor("top_k", tensor_of(std::vector<int64_t>{1}, ov::element::i64, {1}));
  subcode_req_.set_tensor("top_p", tensor_of(std::vector<float>{1.0f}, ov::element::f32, {1}));
  subcode_req_.set_tensor("uniform", tensor_of(std::vector<float>(steps, 0.5f), ov::element::f32, {1, steps}));
  subcode_req_.infer();  // packs the weights (dynamic shapes), as for the talker
  ir.release();
  irs_.push_back(std::move(ir));
}

std::shared_ptr<Sequence> Runner::add(std::vector<float> prefill, std::vector<float> trailing, int64_t hidden,
                                      const SamplingParams& params, std::vector<double> uniforms, int64_t max_frames,
                                      const std::vector<int64_t>& codec_prefix, bool text_open,
                                      int64_t prefix_len) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) throw std::runtime_error("the runner is closed");
  if (hidden != hidden_) throw std::invalid_argument("embedding width does not match the talker");
  int64_t length = static_cast<int64_t>(prefill.size()) / hidden;
  const int64_t frames = max_frames;  // the caller's budget (engine/runner.py frame_budget)
  if (frames < 0) throw std::invalid_argument("max_frames must be >= 0");
  if (static_cast<int64_t>(uniforms.size()) < frames * config_.groups)
    throw std::invalid_argument("need 16 uniforms per frame");
  auto seq = std::make_shared<Sequence>();
  seq->id = next_id_;
  seq->hidden = hidden;
  seq->trailing = std::move(trailing);
  seq->params = params;
  seq->max_frames = frames;
  seq->prompt_tokens = length;
  seq->text_open = text_open;
  seq->uniforms = std::move(uniforms);
  seq->pending = std::move(prefill);
  seq->groups = config_.groups;
  if (!codec_prefix.empty() && !config_.offline) seq->codec = primed(codec_prefix);
  pool_->reserve(seq->id, length + frames);
  ++next_id_;
  if (frames == 0) {
    finish(*seq, "length");
  } else {
    start_prefix(*seq, prefix_len);
    active_.push_back(seq);
  }
  return seq;
}

void Runner::start_prefix(Sequence& s, int64_t prefix_len) {
  const int64_t shared = prefix_len - 1;
  if (!config_.prefix_cache || shared < 1 || shared >= s.pending_rows()) return;
  s.prefix_tokens = shared;
  std::string key(reinterpret_cast<const char*>(s.pending.data()), shared * hidden_ * sizeof(float));
  const std::vector<int32_t>* pinned = pool_->lookup(key);
  if (pinned == nullptr) {
    s.prefix_key = std::move(key);
    return;
  }
  const std::vector<int32_t> source = *pinned;
  const auto& table = pool_->grow(s.id, shared);
  copy_blocks(source, std::vector<int32_t>(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(source.size())));
  s.cached = shared;
  s.pending.erase(s.pending.begin(), s.pending.begin() + shared * hidden_);
}

void Runner::pin_prefix(Sequence& s) {
  const std::string key = std::move(s.prefix_key);
  s.prefix_key.clear();
  const int count = pool_->blocks_for(s.prefix_tokens);
  std::vector<int32_t> pinned = pool_->pin(key, count);
  if (pinned.empty()) return;
  const auto& table = pool_->tables().at(s.id);
  copy_blocks(std::vector<int32_t>(table.begin(), table.begin() + count), pinned);
}

void Runner::copy_blocks(const std::vector<int32_t>& source, const std::vector<int32_t>& target) {
  for (ov::Tensor& cache : caches_) {
    const size_t row = cache.get_byte_size() / cache.get_shape()[0];
    auto* bytes = static_cast<uint8_t*>(cache.data());
    for (size_t i = 0; i < source.size(); ++i)
      std::memcpy(bytes + static_cast<size_t>(target[i]) * row, bytes + static_cast<size_t>(source[i]) * row, row);
  }
}

int64_t Runner::feed_rows(const Sequence& s) const {
  const int64_t left = (s.cached < s.prefix_tokens ? s.prefix_tokens : s.cached + s.pending_rows()) - s.cached;
  const int64_t rows = std::min(left, config_.prefill_chunk);
  return left - rows == 1 && rows > 1 ? rows - 1 : rows;
}

bool Runner::extend(const std::shared_ptr<Sequence>& seq, const std::vector<float>& rows, bool closed,
                    int64_t max_frames, const std::vector<double>& uniforms) {
  Sequence& s = *seq;
  if (s.finished) return true;
  if (!s.text_open) throw std::invalid_argument("sequence " + std::to_string(s.id) + " has no open text");
  if (rows.size() % hidden_ != 0) throw std::invalid_argument("trailing rows must be [rows, hidden]");
  const int64_t frames = std::max(s.max_frames, max_frames);
  const size_t draws = static_cast<size_t>((frames - s.max_frames) * s.groups);
  if (uniforms.size() < draws) throw std::invalid_argument("need 16 uniforms per added frame");
  try {
    pool_->reserve(s.id, s.prompt_tokens + frames);
  } catch (const std::length_error&) {
    return false;
  }
  s.uniforms.insert(s.uniforms.end(), uniforms.begin(), uniforms.begin() + static_cast<std::ptrdiff_t>(draws));
  s.max_frames = frames;
  s.text_open = !closed;
  s.trailing.insert(s.trailing.end(), rows.begin(), rows.end());
  if (!s.held.empty()) {
    const std::vector<float> frame = std::move(s.held);
    s.held.clear();
    feed_frame(s, frame.data());
  }
  return true;
}

void Runner::feed_frame(Sequence& s, const float* frame) {
  const int64_t t = s.num_frames() - 1;
  const float* text = config_.tts_pad.data();
  if (t < s.trailing_rows()) {
    text = s.trailing.data() + t * hidden_;
  } else if (s.text_open) {
    s.held.assign(frame, frame + hidden_);
    s.pending.clear();
    return;
  }
  s.pending.resize(hidden_);
  for (int64_t d = 0; d < hidden_; ++d) s.pending[d] = frame[d] + text[d];
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
  times_.codec_s += seconds_since(begin);  // the reference's decoding counts as codec time, as in Python
  primed_.emplace_front(prefix, state);
  if (primed_.size() > static_cast<size_t>(config_.primed_states)) primed_.pop_back();
  return state;
}

void Runner::finish(Sequence& seq, const std::string& reason) {
  seq.finished = true;
  seq.reason = reason;
  seq.pending.clear();
  seq.held.clear();
  pool_->release(seq.id);
}

void Runner::abort(const std::shared_ptr<Sequence>& seq, const std::string& reason) {
  if (!seq->finished) finish(*seq, reason);
  active_.erase(std::remove(active_.begin(), active_.end(), seq), active_.end());
}

std::vector<std::shared_ptr<Sequence>> Runner::step() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) throw std::runtime_error("the runner is closed");
  auto start = Clock::now();
  double inference = times_.talker_s + times_.subcode_s + times_.codec_s;
  std::vector<Sequence*> batch;
  for (auto& s : active_)
    if (!s->finished && !s->pending.empty()) batch.push_back(s.get());  // an open text may hold a sequence back
  if (!batch.empty()) {
    std::vector<float> logits, hidden;
    auto sampled = run_talker(batch, logits, hidden);
    auto go = sample_code0(sampled, logits);
    if (!go.empty()) run_subcode(go, hidden, sampled);
  }
  if (!config_.offline) decode_ready();
  std::vector<std::shared_ptr<Sequence>> done, still;
  for (auto& s : active_) (s->finished ? done : still).push_back(s);
  active_ = std::move(still);
  times_.steps += 1;
  times_.host_s += seconds_since(start) - (times_.talker_s + times_.subcode_s + times_.codec_s - inference);
  return done;
}

std::vector<Sequence*> Runner::run_talker(const std::vector<Sequence*>& batch, std::vector<float>& logits,
                                          std::vector<float>& hidden) {
  const size_t n = batch.size();
  std::vector<int64_t> counts(n);
  std::vector<int32_t> begins{0}, past, table_begins{0}, tables;
  std::vector<int64_t> positions, rows;
  std::vector<bool> last(n);
  int32_t max_context = 0;
  for (size_t i = 0; i < n; ++i) {
    Sequence& s = *batch[i];
    counts[i] = feed_rows(s);
    begins.push_back(begins.back() + static_cast<int32_t>(counts[i]));
    past.push_back(static_cast<int32_t>(s.cached));
    const auto& table = pool_->grow(s.id, s.cached + counts[i]);
    tables.insert(tables.end(), table.begin(), table.end());
    table_begins.push_back(static_cast<int32_t>(tables.size()));
    for (int64_t p = s.cached; p < s.cached + counts[i]; ++p) positions.push_back(p);
    last[i] = s.pending_rows() == counts[i];
    if (last[i]) rows.push_back(begins.back() - 1);
    max_context = std::max(max_context, static_cast<int32_t>(s.cached + counts[i]));
  }
  if (rows.empty()) rows.push_back(0);  // the graph wants at least one row
  const size_t total = static_cast<size_t>(begins.back());
  ov::Tensor embeds(ov::element::f32, {total, static_cast<size_t>(hidden_)});
  float* e = embeds.data<float>();
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(e, batch[i]->pending.data(), counts[i] * hidden_ * sizeof(float));
    e += counts[i] * hidden_;
  }
  talker_req_.set_tensor("inputs_embeds", embeds);
  talker_req_.set_tensor("position_ids", tensor_of(positions, ov::element::i64, {positions.size()}));
  talker_req_.set_tensor("past_lens", tensor_of(past, ov::element::i32, {n}));
  talker_req_.set_tensor("subsequence_begins", tensor_of(begins, ov::element::i32, {n + 1}));
  talker_req_.set_tensor("block_indices", tensor_of(tables, ov::element::i32, {tables.size()}));
  talker_req_.set_tensor("block_indices_begins", tensor_of(table_begins, ov::element::i32, {n + 1}));
  talker_req_.set_tensor("max_context_len", tensor_of(std::vector<int32_t>{max_context}, ov::element::i32, {}));
  talker_req_.set_tensor("sample_rows", tensor_of(rows, ov::element::i64, {rows.size()}));
  auto begin = Clock::now();
  talker_req_.infer();
  times_.talker_s += seconds_since(begin);
  const ov::Tensor out_logits = talker_req_.get_tensor("logits"), out_hidden = talker_req_.get_tensor("hidden");
  logits.assign(out_logits.data<const float>(), out_logits.data<const float>() + out_logits.get_size());
  hidden.assign(out_hidden.data<const float>(), out_hidden.data<const float>() + out_hidden.get_size());
  std::vector<Sequence*> sampled;
  for (size_t i = 0; i < n; ++i) {
    Sequence& s = *batch[i];
    s.cached += counts[i];
    if (last[i]) {
      s.pending.clear();
      sampled.push_back(&s);
    } else {
      s.pending.erase(s.pending.begin(), s.pending.begin() + counts[i] * hidden_);
    }
    if (!s.prefix_key.empty() && s.cached == s.prefix_tokens) pin_prefix(s);
  }
  return sampled;
}

std::vector<size_t> Runner::sample_code0(const std::vector<Sequence*>& sampled, const std::vector<float>& logits) {
  const size_t vocab = sampled.empty() ? 0 : logits.size() / std::max<size_t>(1, sampled.size());
  std::vector<size_t> go;
  for (size_t row = 0; row < sampled.size(); ++row) {
    Sequence& s = *sampled[row];
    const SamplingParams& p = s.params;
    std::vector<int64_t> history;
    for (int64_t f = 0; f < s.num_frames(); ++f) history.push_back(s.frames[f * s.groups]);
    std::vector<float> z(logits.begin() + row * vocab, logits.begin() + (row + 1) * vocab);
    process_talker_logits(z, history, s.num_frames(), static_cast<float>(p.repetition_penalty), config_.eos,
                          config_.suppress_from, p.min_frames);
    double uniform = s.uniforms[s.num_frames() * s.groups];
    int64_t code = p.do_sample ? sample_row(z, p.temperature, p.top_k, p.top_p, uniform) : argmax(z);
    if (code == config_.eos) {
      finish(s, "eos");
    } else {
      s.frames.push_back(code);
      s.frames.insert(s.frames.end(), s.groups - 1, 0);
      go.push_back(row);
    }
  }
  return go;
}

void Runner::run_subcode(const std::vector<size_t>& rows, const std::vector<float>& hidden,
                         const std::vector<Sequence*>& sampled) {
  const size_t k = rows.size(), steps = static_cast<size_t>(config_.groups - 1);
  ov::Tensor h(ov::element::f32, {k, static_cast<size_t>(hidden_)});
  ov::Tensor code0(ov::element::i64, {k}), temperature(ov::element::f32, {k}), top_k(ov::element::i64, {k}),
      top_p(ov::element::f32, {k}), uniform(ov::element::f32, {k, steps});
  for (size_t i = 0; i < k; ++i) {
    const Sequence& s = *sampled[rows[i]];
    const SamplingParams& p = s.params;
    std::memcpy(h.data<float>() + i * hidden_, hidden.data() + rows[i] * hidden_, hidden_ * sizeof(float));
    int64_t frame = s.num_frames() - 1;
    code0.data<int64_t>()[i] = s.frames[frame * s.groups];
    temperature.data<float>()[i] = p.subtalker_do_sample ? static_cast<float>(p.subtalker_temperature) : 0.0f;
    top_k.data<int64_t>()[i] = p.subtalker_top_k;
    top_p.data<float>()[i] = static_cast<float>(p.subtalker_top_p);
    for (size_t j = 0; j < steps; ++j)
      uniform.data<float>()[i * steps + j] = static_cast<float>(s.uniforms[frame * s.groups + 1 + j]);
  }
  subcode_req_.set_tensor("hidden", h);
  subcode_req_.set_tensor("code0", code0);
  subcode_req_.set_tensor("temperature", temperature);
  subcode_req_.set_tensor("top_k", top_k);
  subcode_req_.set_tensor("top_p", top_p);
  subcode_req_.set_tensor("uniform", uniform);
  auto begin = Clock::now();
  subcode_req_.infer();
  times_.subcode_s += seconds_since(begin);
  const int64_t* codes = subcode_req_.get_tensor("codes").data<const int64_t>();
  const float* embedding = subcode_req_.get_tensor("frame_embedding").data<const float>();
  for (size_t i = 0; i < k; ++i) {
    Sequence& s = *sampled[rows[i]];
    int64_t frame = s.num_frames() - 1;
    std::copy(codes + i * steps, codes + (i + 1) * steps, s.frames.begin() + frame * s.groups + 1);
    feed_frame(s, embedding + i * hidden_);
    if (s.num_frames() >= s.max_frames) finish(s, "length");
  }
}

void Runner::decode_ready() {
  // Decode every due chunk, one call per chunk size; repeat while some sequence still has
  // one (at most one chunk per sequence per call, since its state moves on).
  for (size_t round = 0; round < active_.size() * 4 + 4; ++round) {
    struct Due {
      std::vector<Sequence*> seqs;
      std::vector<std::vector<int64_t>> codes;
      std::vector<int64_t> frames;
    };
    std::map<int, Due> due;
    for (auto& sp : active_) {
      Sequence& s = *sp;
      int64_t size = s.codec.frames == 0 ? config_.first_chunk : config_.steady_chunk;
      int64_t ready = s.num_frames() - s.codec.frames;
      if (ready >= size || (s.finished && ready > 0)) {
        int64_t take = std::min(size, ready);
        auto from = s.frames.begin() + s.codec.frames * s.groups;
        Due& d = due[static_cast<int>(size)];
        d.seqs.push_back(&s);
        d.codes.emplace_back(from, from + take * s.groups);
        d.frames.push_back(take);
      }
    }
    if (due.empty()) return;
    for (auto& [size, d] : due) {
      std::vector<CodecState*> states;
      for (Sequence* s : d.seqs) states.push_back(&s->codec);
      auto begin = Clock::now();
      auto pcms = codec_->decode(states, d.codes, d.frames, size);
      times_.codec_s += seconds_since(begin);
      for (size_t i = 0; i < d.seqs.size(); ++i) d.seqs[i]->audio.push_back(std::move(pcms[i]));
    }
  }
  throw std::logic_error("codec decoding did not converge");
}

}  // namespace qwen3tts
