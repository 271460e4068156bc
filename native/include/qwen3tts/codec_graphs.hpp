// The codec decoder's chunk graphs, compiled once for every runner that decodes with them.
//
// Every 12 Hz Qwen3-TTS model has the same speech tokenizer, so models opened in one process
// share one compiled decoder (docs/ARCHITECTURE.md, "Several models in one process";
// engine/decoders.py decides which may). The compiled models are shared; each runner makes
// its own StreamingCodec from them, with infer requests and stream states of its own: one
// CompiledModel serves any number of infer requests, from any threads, while one infer request
// is for one thread at a time (docs/OPENVINO.md §13).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <openvino/openvino.hpp>

#include "qwen3tts/codec_stream.hpp"
#include "qwen3tts/graph_io.hpp"
#include "qwen3tts/mapped_ir.hpp"
#include "qwen3tts/resident_memory.hpp"

namespace qwen3tts {

// What the codec graphs are compiled from (engine/native.py fills it from the loaded model
// and the chunk schedule).
struct CodecConfig {
  std::map<int, std::string> first_xml, steady_xml;  // chunk graphs to compile, by size
  std::string device = "CPU";
  Properties properties;                              // compile properties
  int64_t batch = 0;                                  // static batch (0: as stored)
  int64_t first_chunk = 1, steady_chunk = 8;          // the schedule the graphs must decode
};

class CodecGraphs {
 public:
  // Compiles the graphs, each read over its own mapped weights whose pages are released once
  // it is compiled. Throws std::invalid_argument unless they decode the schedule's chunks.
  explicit CodecGraphs(const CodecConfig& config);
  CodecGraphs(const CodecGraphs&) = delete;
  CodecGraphs& operator=(const CodecGraphs&) = delete;

  // A decoder of the caller's own over these graphs: its infer requests and states are its own.
  std::unique_ptr<StreamingCodec> open() const;
  const CodecConfig& config() const { return config_; }
  // Resident memory before and after compiling ("before", "codec").
  const std::vector<MemoryMark>& load_memory() const { return load_memory_; }

 private:
  CodecConfig config_;
  std::vector<MappedIr> irs_;  // the weights: declared before, so destroyed after, the compiled models
  std::map<int, ov::CompiledModel> first_, steady_;
  std::vector<MemoryMark> load_memory_;
};

}  // namespace qwen3tts
