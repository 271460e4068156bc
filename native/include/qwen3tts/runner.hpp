// The native runner: the executor of the engine line (wyoming_qwen3tts/engine/step.py).
// The Python batch (engine/batch.py) owns the KV block pool and the sequences and plans each
// step; this checks the plan and runs it — block copies, one talker call, group-0 sampling,
// one code-predictor call — and the codec chunks it asks for, with no Python between the
// inferences. Who runs the talker and the code predictor is decided at load (executors.hpp);
// the codec graphs come compiled, shared with other runners (codec_graphs.hpp); its only
// per-sequence state is each codec stream's decoder state.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <openvino/openvino.hpp>

#include "qwen3tts/codec_graphs.hpp"
#include "qwen3tts/codec_stream.hpp"
#include "qwen3tts/resident_memory.hpp"
#include "qwen3tts/runner_config.hpp"
#include "qwen3tts/step_plan.hpp"
#include "qwen3tts/subcode_executor.hpp"
#include "qwen3tts/talker_executor.hpp"

namespace qwen3tts {

// Inference time of each graph, summed since the runner was made.
struct StepTimes {
  double talker_s = 0, subcode_s = 0, codec_s = 0;
};

class Runner {
 public:
  // Loads the talker's and code predictor's executors, each read over its own mapped weights
  // (mapped_ir.hpp) whose pages are released before the next graph is read, so the weights are
  // resident once; decodes with `codec` (requests and states of its own), or, without one, is
  // offline: no codec streams, the codes are decoded elsewhere at the end.
  Runner(const RunnerConfig& config, std::shared_ptr<const CodecGraphs> codec, TestHooks hooks = {});
  // Frees the graphs as close() does.
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  int64_t block_size() const { return block_size_; }
  int64_t groups() const { return config_.groups; }
  int64_t hidden() const { return hidden_; }
  // Bytes of one block of every layer's key and value cache.
  int64_t kv_block_bytes() const { return kv_block_bytes_; }
  StepTimes times() const;
  // Resident memory before loading and after each graph was compiled, run once and released
  // ("before", "talker", "subcode"; the codec's are its own, CodecGraphs::load_memory).
  const std::vector<MemoryMark>& load_memory() const { return load_memory_; }
  // Who runs the talker and the code predictor (the executors' describe(), with the reason
  // where the runner's own stack was asked for and could not run).
  const std::string& talker_runtime() const { return talker_runtime_; }
  const std::string& subcode_runtime() const { return subcode_runtime_; }
  // The talker's executor computes a row alike however a step splits rows (talker_executor.hpp).
  bool rows_exact() const { return rows_exact_; }
  // The codec graphs it decodes with (null when offline or closed).
  std::shared_ptr<const CodecGraphs> codec_graphs() const;

  // Makes the KV cache num_blocks blocks. Once, before the first forward().
  void allocate_kv(int64_t num_blocks);
  // Copies the plan's blocks, runs the talker over its rows, samples group 0 of the sampled
  // rows and runs one code-predictor call for those that did not draw EOS.
  StepOutput forward(const StepPlan& plan);
  // A codec stream for sequence `id`: fresh, or (prefix: [R × groups] reference codes, in-context
  // cloning) primed with the reference. Nothing when offline. Throws if `id` is open.
  void open_stream(int64_t id, const std::vector<int64_t>& prefix);
  // PCM of each chunk, in order; one codec call per chunk size. At most one chunk per stream.
  std::vector<std::vector<float>> decode(const std::vector<CodecChunk>& chunks);
  void close_stream(int64_t id);  // idempotent

  // Free the graphs now — executors, its codec requests and states, its share of the codec
  // graphs, then the weights they were read from — rather than whenever the last reference goes (from Python: at a collector's
  // pass, in whatever thread and call it interrupts). Waits for a call in progress;
  // afterwards the calls above throw std::runtime_error. Idempotent.
  void close();
  bool closed() const { return closed_; }

 private:
  void check_ids() const;   // eos and suppress_from are talker ids
  void check_open() const;  // under mutex_
  // Throws std::invalid_argument unless the plan's arrays fit each other, the KV cache and
  // the graphs (a wrong index would read or write outside a tensor).
  void check(const StepPlan& plan) const;
  // The sampled rows' group-0 codes (eos where drawn) from the talker's logits [k × vocab].
  std::vector<int64_t> sample_code0(const StepPlan& plan);
  // Codes 1..15 and the frame embedding of the rows that did not draw EOS.
  void run_subcode(const StepPlan& plan, const std::vector<int64_t>& code0, StepOutput& out);
  // The codec state after `prefix`, from the last few primed (a cloned voice primes the same
  // reference for every sentence).
  CodecState primed(const std::vector<int64_t>& prefix);
  void add_time(double StepTimes::*field, double seconds);
  void release_graphs();  // under mutex_

  // A step's arrays between the talker and the code predictor, kept to reuse their memory.
  struct Scratch {
    std::vector<float> logits, hidden;                  // the talker's sampled rows
    std::vector<float> subcode_hidden, temperature, top_p, uniform, embedding;  // the subcode's rows
    std::vector<int64_t> code0, top_k, codes;
  };

  RunnerConfig config_;
  ov::Core& core_;  // shared_core.hpp
  std::shared_ptr<const CodecGraphs> codec_graphs_;  // declared before, so destroyed after, the codec
  std::unique_ptr<StreamingCodec> codec_;  // this runner's requests over codec_graphs_ (null: offline)
  std::unique_ptr<TalkerExecutor> talker_;
  std::unique_ptr<SubcodeExecutor> subcode_;
  std::string talker_runtime_, subcode_runtime_;  // set once at load, kept after close()
  bool rows_exact_ = false;
  Scratch scratch_;
  int64_t num_blocks_ = 0;  // of the KV cache allocate_kv made (0: not yet)
  int64_t kv_block_bytes_ = 0, block_size_ = 0, hidden_ = 0, vocab_ = 0;
  std::map<int64_t, CodecState> streams_;                          // by sequence id
  std::list<std::pair<std::vector<int64_t>, CodecState>> primed_;  // most recent first
  std::vector<MemoryMark> load_memory_;
  StepTimes times_;
  mutable std::mutex times_mutex_;  // times_ is read from any thread
  mutable std::mutex mutex_;        // every call: the graphs never go while in use
  std::atomic<bool> closed_{false};
};

}  // namespace qwen3tts
