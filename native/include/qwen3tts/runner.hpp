// The native runner: the executor of the engine line (wyoming_qwen3tts/engine/step.py).
// The Python batch (engine/batch.py) owns the KV block pool and the sequences and plans each
// step; this runs the plan — block copies, one paged talker call, group-0 sampling, one
// subcode call — and the codec chunks it asks for, with no Python between the inferences.
// Its only per-sequence state is each codec stream's decoder state.
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

#include "qwen3tts/codec_stream.hpp"
#include "qwen3tts/kernels.hpp"
#include "qwen3tts/mapped_ir.hpp"
#include "qwen3tts/resident_memory.hpp"
#include "qwen3tts/step_plan.hpp"
#include "qwen3tts/subcode_cpu.hpp"
#include "qwen3tts/talker_cpu.hpp"

namespace qwen3tts {

using Properties = std::map<std::string, std::string>;

struct RunnerConfig {
  std::string talker_xml, subcode_xml;
  std::map<int, std::string> first_xml, steady_xml;  // codec chunk graphs to compile, by size
  std::string talker_device = "CPU", subcode_device = "CPU", decoder_device = "CPU";
  Properties talker_properties, subcode_properties, decoder_properties;  // compile properties, per graph
  int64_t decoder_batch = 0;                          // static batch for the codec graphs (0: as stored)
  int64_t num_layers = 0;
  int64_t first_chunk = 1, steady_chunk = 8;
  bool offline = false;                               // no codec streams: decoded elsewhere at the end
  int64_t eos = 0, suppress_from = 0, groups = 16;    // talker ids >= suppress_from are never drawn, but EOS
  int64_t primed_states = 0;                          // decoder states primed with reference codes kept
  bool int4_linear = false;                           // INT4 products of CPU graphs by int4_linear.hpp's kernel
  bool subcode_cpu = false;     // a CPU subcode by subcode_cpu.hpp, where the CPU and the graph allow
  bool talker_cpu = false;      // a CPU talker by talker_cpu.hpp, where the CPU and the graph allow
  bool talker_u8_cache = true;  // its KV cache in u8 (else f32)
  int64_t talker_block_size = 32;  // its KV block (the CPU plugin's paged attention uses 32)
  int64_t subcode_threads = 0;  // their team (0: the CPU plugin's INFERENCE_NUM_THREADS, else the physical cores)
  std::string kernels;          // their kernels' instruction set, kernels.hpp ("": the fastest this CPU runs)
};

// Inference time of each graph, summed since the runner was made.
struct StepTimes {
  double talker_s = 0, subcode_s = 0, codec_s = 0;
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

  int64_t block_size() const { return block_size_; }
  int64_t groups() const { return config_.groups; }
  int64_t hidden() const { return hidden_; }
  // Bytes of one block of every layer's key and value cache.
  int64_t kv_block_bytes() const { return kv_block_bytes_; }
  StepTimes times() const;
  // Resident memory before loading and after each graph was compiled, run once and released.
  const std::vector<MemoryMark>& load_memory() const { return load_memory_; }
  // Matrix products of the talker and subcode run by int4_linear.hpp's kernel (0: OpenVINO's).
  int64_t int4_products() const { return int4_products_; }
  // Who runs the code predictor: "subcode_cpu, N threads", or "openvino" (with the reason
  // when subcode_cpu was asked for and could not be used).
  const std::string& subcode_runtime() const { return subcode_runtime_; }
  // Who runs the talker: "talker_cpu, <kernels>, <cache>, N threads", or "openvino" (with the
  // reason when talker_cpu was asked for and could not be used).
  const std::string& talker_runtime() const { return talker_runtime_; }
  // True when talker_cpu runs the talker: it computes a row alike however a step splits rows,
  // so a cached prefix can end anywhere (docs/OPENVINO.md §12); OpenVINO's paged graph does not.
  bool rows_exact() const { return rows_exact_; }

  // Makes the KV cache num_blocks blocks (allocated, not touched: a block becomes resident
  // when a sequence first writes it). Once, before the first forward().
  void allocate_kv(int64_t num_blocks);
  // Copies the plan's blocks, runs the talker over its rows, samples group 0 of the sampled
  // rows and runs one subcode call for those that did not draw EOS.
  StepOutput forward(const StepPlan& plan);
  // A codec stream for sequence `id`: fresh, or (prefix: [R × groups] reference codes, in-context
  // cloning) primed with the reference. Nothing when offline. Throws if `id` is open.
  void open_stream(int64_t id, const std::vector<int64_t>& prefix);
  // PCM of each chunk, in order; one codec call per chunk size. At most one chunk per stream.
  std::vector<std::vector<float>> decode(const std::vector<CodecChunk>& chunks);
  void close_stream(int64_t id);  // idempotent

  // Free the graphs now — infer requests, compiled models, the KV cache, the codec states,
  // then the weights they were read from — rather than whenever the last reference goes
  // (from Python: at a collector's pass, in whatever thread and call it interrupts). Waits
  // for a call in progress; afterwards the calls above throw std::runtime_error. Idempotent.
  void close();
  bool closed() const { return closed_; }

 private:
  void compile_codec();
  void compile_talker();
  void compile_subcode();
  // Why the runner's own layer stacks cannot run a graph on `device` ("" if they can).
  std::string cpu_stack_refused(const std::string& device) const;
  // The team the runner's own talker and subcode share (made at the first call).
  std::shared_ptr<ThreadTeam> team();
  // talker_cpu_ from the graph's weights, if the config asks and the CPU and the graph allow
  bool use_talker_cpu(const ov::Model& model);
  // subcode_cpu_ from the graph's weights, if the config asks and the CPU and the graph allow
  bool use_subcode_cpu(const ov::Model& model);
  // int4_linear.hpp's kernel into a CPU graph, if the config asks and the CPU runs it
  void use_int4_kernel(const std::shared_ptr<ov::Model>& model, const std::string& device);
  void check_ids() const;           // eos and suppress_from are talker ids
  void set_caches(int64_t blocks);  // key_cache.N and value_cache.N of `blocks` blocks, set on the talker
  void check_open() const;          // under mutex_
  // Throws std::invalid_argument unless the plan's arrays fit each other, the KV cache and
  // the graphs (a wrong index would read or write outside a tensor).
  void check(const StepPlan& plan) const;
  // Every layer's keys and values of block pairs (source, target), in order (whole rows of
  // each cache tensor, quantization scales included).
  void copy_blocks(const std::vector<int32_t>& pairs);
  // The sampled rows' group-0 codes (eos where drawn) from the talker's logits [k × vocab].
  std::vector<int64_t> sample_code0(const StepPlan& plan, const float* logits);
  // Codes 1..15 and the frame embedding of the rows that did not draw EOS.
  void run_subcode(const StepPlan& plan, const std::vector<int64_t>& code0, const float* hidden, StepOutput& out);
  // The codec state after `prefix`, from the last few primed (a cloned voice primes the same
  // reference for every sentence).
  CodecState primed(const std::vector<int64_t>& prefix);
  void add_time(double StepTimes::*field, double seconds);
  void release_graphs();  // under mutex_

  // The talker's and subcode's own input and output tensors a step uses, taken once: a
  // request's tensor stays the same object (set_shape and inference change its shape and
  // data, which are read anew each step) unless set_tensor replaces it, which nothing does to
  // these. Asked for each step, by name, a tensor costs ~8 µs (a search of every port's names,
  // ~60 on the paged talker), by port still ~1.5 µs: 18 a step, ~0.15 ms once an inference
  // has emptied the caches.
  struct TalkerIo {
    ov::Tensor embeds, positions, past_lens, begins, block_indices, block_begins, max_context, sample_rows, logits,
        hidden;
  };
  struct SubcodeIo {
    ov::Tensor hidden, code0, temperature, top_k, top_p, uniform, codes, embedding;
  };

  RunnerConfig config_;
  // One process-wide Core, never destroyed, so that a runner's end frees only its own
  // objects: a Core of its own takes its CPU plugin down with it, and the plugin's
  // destructor clears the CPU executors of OpenVINO's process-wide executor manager, the one
  // every compiled model in the process (the Python graphs, other runners) draws from.
  ov::Core& core_;
  std::vector<MappedIr> irs_;  // the graphs' weights: declared before, so destroyed after, what uses them
  ov::CompiledModel talker_, subcode_;
  ov::InferRequest talker_req_, subcode_req_;
  TalkerIo talker_io_;
  SubcodeIo subcode_io_;
  std::unique_ptr<StreamingCodec> codec_;
  const Kernels* kernels_ = nullptr;          // the copy of kernels.hpp they use (none: the CPU runs none)
  std::shared_ptr<ThreadTeam> team_;          // talker_cpu_'s and subcode_cpu_'s
  std::unique_ptr<TalkerCpu> talker_cpu_;      // instead of talker_ (then talker_io_ holds logits, hidden)
  std::unique_ptr<SubcodeCpu> subcode_cpu_;  // instead of subcode_ (then subcode_io_ are plain host tensors)
  std::string subcode_runtime_ = "openvino", talker_runtime_ = "openvino";
  bool rows_exact_ = false;  // talker_cpu_ runs the talker (set once at load, as talker_runtime_)
  std::vector<ov::Tensor> caches_;  // key_cache.N and value_cache.N: [blocks, ...] each
  int64_t num_blocks_ = 0;          // of the KV cache allocate_kv made (0: not yet)
  int64_t kv_block_bytes_ = 0, block_size_ = 0, hidden_ = 0, vocab_ = 0, int4_products_ = 0;
  std::map<int64_t, CodecState> streams_;                          // by sequence id
  std::list<std::pair<std::vector<int64_t>, CodecState>> primed_;  // most recent first
  std::vector<MemoryMark> load_memory_;
  StepTimes times_;
  mutable std::mutex times_mutex_;  // times_ is read from any thread
  std::mutex mutex_;                // every call: the graphs never go while in use
  std::atomic<bool> closed_{false};
};

}  // namespace qwen3tts
