// What the runner is built from (engine/native.py fills it from the loaded model and
// engine settings): the talker's and code predictor's files, devices and compile properties,
// and where the layer stacks run. The codec graphs come compiled (codec_graphs.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <openvino/core/model.hpp>

#include "qwen3tts/graph_io.hpp"

namespace qwen3tts {

struct RunnerConfig {
  std::string talker_xml, subcode_xml;
  std::string talker_device = "CPU", subcode_device = "CPU";
  Properties talker_properties, subcode_properties;  // compile properties, per graph
  int64_t num_layers = 0;
  int64_t eos = 0, suppress_from = 0, groups = 16;    // talker ids >= suppress_from are never drawn, but EOS
  int64_t primed_states = 0;                          // decoder states primed with reference codes kept
  // The runner's own layer stacks (talker_cpu.hpp, subcode_cpu.hpp) wherever the device, the
  // CPU and the conversion allow; else, and where they do not, OpenVINO's graphs (executors.hpp).
  bool own_stacks = false;
  bool talker_u8_cache = true;     // its own talker's KV cache in u8 (else f32)
  int64_t talker_block_size = 32;  // its KV block (the CPU plugin's paged attention uses 32)
  int64_t threads = 0;             // its team (0: talker_properties' INFERENCE_NUM_THREADS, else the physical cores)
  std::string kernels;             // its kernels' instruction set, kernels.hpp ("": the fastest this CPU runs)
};

// Test seams (native/src/testing/bindings.cpp), never set by the package: an OpenVINO graph
// changed before it is compiled (the INT4 product swapped in, so that a graph and the runner's
// own stack do the same arithmetic), and OpenVINO's graph for one stage where the runner's own
// stack would run, to compare the two through the same runner.
using GraphHook = std::function<void(const std::shared_ptr<ov::Model>&)>;
struct TestHooks {
  GraphHook before_compile;
  bool talker_graph = false, subcode_graph = false;
};

}  // namespace qwen3tts
