// Which executor runs the talker and which the code predictor (talker_executor.hpp,
// subcode_executor.hpp): decided once, at load, from the config, the device, the CPU and the
// conversion, with the reason in each executor's describe(). The runner's own stacks run where
// they can and were asked for (RunnerConfig::own_stacks); OpenVINO's graphs everywhere else.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <openvino/openvino.hpp>

#include "qwen3tts/kernels.hpp"
#include "qwen3tts/runner_config.hpp"
#include "qwen3tts/subcode_executor.hpp"
#include "qwen3tts/talker_executor.hpp"
#include "qwen3tts/thread_team.hpp"

namespace qwen3tts {

class ExecutorLoader {
 public:
  // Throws std::runtime_error if config.kernels names a copy this CPU does not run.
  ExecutorLoader(ov::Core& core, const RunnerConfig& config, TestHooks hooks = {});

  // Each reads its graph's IR over mapped weights (mapped_ir.hpp) and returns its executor:
  // the runner's own stack, or the compiled graph, whose weights' pages are dropped once packed.
  std::unique_ptr<TalkerExecutor> talker();
  std::unique_ptr<SubcodeExecutor> subcode(int64_t talker_hidden);
  // The copy of kernels.hpp the runner's own stacks use (null: this CPU runs none).
  const Kernels* kernels() const { return kernels_; }

 private:
  // Why the runner's own stacks do not run a graph on `device` ("" if they can).
  std::string refused(const std::string& device) const;
  // Whether they should be tried for a stage (`graph`: the test seam asks for the graph).
  bool own(const std::string& why, bool graph) const { return config_.own_stacks && why.empty() && !graph; }
  std::shared_ptr<ThreadTeam> team();  // shared by both stacks, made when the first needs it

  ov::Core& core_;
  const RunnerConfig& config_;
  TestHooks hooks_;
  const Kernels* kernels_ = nullptr;
  std::shared_ptr<ThreadTeam> team_;
};

}  // namespace qwen3tts
