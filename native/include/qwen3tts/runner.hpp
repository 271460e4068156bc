// The native runner: the step loop of engine/runner.py in C++ — one paged talker call for
// every active sequence (prefill chunks and decode rows mixed), sampling, one subcode call
// for the batch, next embeddings, codec chunks — with no Python between two inferences.
// The Python scheduler keeps admission, timeouts and aborts.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <openvino/openvino.hpp>

#include "qwen3tts/block_pool.hpp"
#include "qwen3tts/codec_stream.hpp"
#include "qwen3tts/mapped_ir.hpp"
#include "qwen3tts/resident_memory.hpp"
#include "qwen3tts/sequence.hpp"

namespace qwen3tts {

using Properties = std::map<std::string, std::string>;

struct RunnerConfig {
  std::string talker_xml, subcode_xml;
  std::map<int, std::string> first_xml, steady_xml;  // codec chunk graphs to compile, by size
  std::string talker_device = "CPU", subcode_device = "CPU", decoder_device = "CPU";
  Properties talker_properties, subcode_properties, decoder_properties;  // compile properties, per graph
  int64_t decoder_batch = 0;                          // static batch for the codec graphs (0: as stored)
  int64_t num_layers = 0;
  int64_t kv_blocks = 0;                              // pool size in blocks, or 0: from kv_cache_bytes
  int64_t kv_cache_bytes = 0;
  int64_t first_chunk = 1, steady_chunk = 8;
  bool offline = false;                               // decode nothing while generating
  int64_t prefill_chunk = 256;
  bool prefix_cache = false;                          // keep the KV of voice prefixes (engine/runner.py)
  int64_t eos = 0, suppress_from = 0, groups = 16;  // talker ids >= suppress_from are never drawn, but EOS
  int64_t prefix_entries = 0;                         // voice prefixes the pool keeps pinned
  int64_t primed_states = 0;                          // decoder states primed with reference codes kept
  std::vector<float> tts_pad;                         // [hidden] text embedding after the text runs out
};

struct StepTimes {
  int64_t steps = 0;
  double talker_s = 0, subcode_s = 0, codec_s = 0, host_s = 0;
};

class Runner {
 public:
  // Compiles the graphs, each read over its own mapped weights (mapped_ir.hpp) whose pages
  // are released before the next graph is read, so the weights are resident once.
  explicit Runner(const RunnerConfig& config);
  // Frees the graphs as close() does.
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  int64_t block_size() const { return pool_->block_size(); }
  int64_t groups() const { return config_.groups; }
  int64_t kv_block_bytes() const { return kv_block_bytes_; }
  int64_t capacity_tokens() const { return pool_->num_blocks() * pool_->block_size(); }
  const BlockPool& pool() const { return *pool_; }
  bool prefix_cache() const { return config_.prefix_cache; }
  const StepTimes& times() const { return times_; }
  const std::vector<std::shared_ptr<Sequence>>& active() const { return active_; }
  // Resident memory before loading and after each graph was compiled, run once and released.
  const std::vector<MemoryMark>& load_memory() const { return load_memory_; }

  // A new sequence that may make max_frames frames (the caller's budget, engine/runner.py
  // frame_budget; its prompt plus those frames are reserved in the pool).
  // prefill [rows × hidden], trailing [rows × hidden], uniforms [≥ frames × 16];
  // codec_prefix: reference codes [R × 16] the stream's decoder hears first (in-context
  // cloning), or empty. text_open: the trailing text grows through extend() until closed.
  // prefix_len: the prompt's leading positions that depend only on the voice (the prefix
  // cache's unit; 0: none).
  std::shared_ptr<Sequence> add(std::vector<float> prefill, std::vector<float> trailing, int64_t hidden,
                                const SamplingParams& params, std::vector<double> uniforms, int64_t max_frames,
                                const std::vector<int64_t>& codec_prefix = {}, bool text_open = false,
                                int64_t prefix_len = 0);
  // More text for an open sequence: trailing rows [n × hidden], whether the text is now
  // complete, its frame cap for the longer text and the uniforms of the frames that cap adds
  // (the request's draws continued). Returns false, changing nothing, while the pool cannot
  // reserve that cap.
  bool extend(const std::shared_ptr<Sequence>& seq, const std::vector<float>& rows, bool closed, int64_t max_frames,
              const std::vector<double>& uniforms);
  void abort(const std::shared_ptr<Sequence>& seq, const std::string& reason);
  // Advance every active sequence by one frame; returns those that finished.
  std::vector<std::shared_ptr<Sequence>> step();
  // Free the graphs now — infer requests, compiled models, then the weights they were read
  // from — rather than whenever the last reference goes (from Python: at a collector's pass,
  // in whatever thread and call it interrupts). Waits for an add() or step() in progress;
  // afterwards both throw std::runtime_error. The pool, the sequences and the times stay
  // readable. Idempotent.
  void close();
  bool closed() const { return closed_; }

 private:
  void finish(Sequence& seq, const std::string& reason);
  // The prefix cache (engine/runner.py's module docstring): a cached prefix is copied into
  // the sequence's first blocks and only the rest is fed; an uncached one is fed alone, then
  // pinned. The last prefix position stays with the rest.
  void start_prefix(Sequence& seq, int64_t prefix_len);
  void pin_prefix(Sequence& seq);
  // Every layer's keys and values of blocks `source` into blocks `target` (whole rows of each
  // cache tensor, quantization scales included).
  void copy_blocks(const std::vector<int32_t>& source, const std::vector<int32_t>& target);
  // Rows of the pending input the next talker call feeds: a prefill chunk, which stops at the
  // end of a prefix to be cached and leaves no single prompt row for a call of its own.
  int64_t feed_rows(const Sequence& seq) const;
  // The talker's next input after a frame: its embedding plus trailing-text row t (t = the
  // frame's index) or the pad once the text has run out; held while an open text has no row t.
  void feed_frame(Sequence& seq, const float* frame);
  std::vector<Sequence*> run_talker(const std::vector<Sequence*>& batch, std::vector<float>& logits,
                                    std::vector<float>& hidden);
  std::vector<size_t> sample_code0(const std::vector<Sequence*>& sampled, const std::vector<float>& logits);
  void run_subcode(const std::vector<size_t>& rows, const std::vector<float>& hidden,
                   const std::vector<Sequence*>& sampled);
  void decode_ready();
  void compile_codec();
  void compile_talker();
  void compile_subcode();
  // The codec state after `prefix`, from the last few primed (a cloned voice primes the same
  // reference for every sentence).
  CodecState primed(const std::vector<int64_t>& prefix);
  void release_graphs();  // under mutex_

  RunnerConfig config_;
  // One process-wide Core, never destroyed, so that a runner's end frees only its own
  // objects: a Core of its own takes its CPU plugin down with it, and the plugin's
  // destructor clears the CPU executors of OpenVINO's process-wide executor manager, the one
  // every compiled model in the process (the Python graphs, other runners) draws from.
  ov::Core& core_;
  std::vector<MappedIr> irs_;  // the graphs' weights: declared before, so destroyed after, what uses them
  ov::CompiledModel talker_, subcode_;
  ov::InferRequest talker_req_, subcode_req_;
  std::unique_ptr<StreamingCodec> codec_;
  std::unique_ptr<BlockPool> pool_;
  std::vector<ov::Tensor> caches_;  // key_cache.N and value_cache.N: [blocks, ...] each
  int64_t kv_block_bytes_ = 0, hidden_ = 0;
  std::vector<std::shared_ptr<Sequence>> active_;
  int64_t next_id_ = 0;
  StepTimes times_;
  std::vector<MemoryMark> load_memory_;
  std::list<std::pair<std::vector<int64_t>, CodecState>> primed_;  // most recent first
  std::mutex mutex_;  // add(), step() and close(): the graphs never go while in use
  std::atomic<bool> closed_{false};
};

}  // namespace qwen3tts
