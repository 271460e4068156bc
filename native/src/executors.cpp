#include "qwen3tts/executors.hpp"

#include <stdexcept>
#include <utility>

#include "qwen3tts/mapped_ir.hpp"
#include "qwen3tts/subcode_cpu.hpp"
#include "qwen3tts/subcode_graph.hpp"
#include "qwen3tts/talker_cpu.hpp"
#include "qwen3tts/talker_graph.hpp"

namespace qwen3tts {

ExecutorLoader::ExecutorLoader(ov::Core& core, const RunnerConfig& config, TestHooks hooks)
    : core_(core), config_(config), hooks_(std::move(hooks)) {
  // the named copy (an error now if this CPU does not run it), else the fastest, if any
  if (!config_.kernels.empty() || !supported_isas().empty()) kernels_ = &kernels_named(config_.kernels);
}

std::string ExecutorLoader::refused(const std::string& device) const {
  if (!config_.own_stacks) return "";  // not asked for: nothing to explain
  if (device.rfind("CPU", 0) != 0) return "not on the CPU";
  if (kernels_ == nullptr) return "the runner's own kernels need a CPU with AVX2 and FMA";
  return "";
}

std::shared_ptr<ThreadTeam> ExecutorLoader::team() {
  if (team_) return team_;
  int64_t threads = config_.threads;
  if (threads <= 0) {
    const auto it = config_.talker_properties.find("INFERENCE_NUM_THREADS");
    threads = it != config_.talker_properties.end() ? std::stoll(it->second) : 0;
  }
  team_ = std::make_shared<ThreadTeam>(static_cast<int>(threads > 0 ? threads : available_cores()));
  return team_;
}

std::unique_ptr<TalkerExecutor> ExecutorLoader::talker() {
  MappedIr ir(core_, config_.talker_xml);
  std::string why = refused(config_.talker_device);
  if (own(why, hooks_.talker_graph)) {
    try {  // its weights are copied: the mapped IR goes when this returns
      return std::make_unique<TalkerCpu>(*ir.model(), team(), config_.talker_u8_cache, config_.talker_block_size,
                                         *kernels_);
    } catch (const std::invalid_argument& e) {  // not this graph's (older, fp16): the graph runs
      why = e.what();
    }
  }
  return std::make_unique<TalkerGraph>(core_, std::move(ir), config_.num_layers, config_.talker_device,
                                       config_.talker_properties, std::move(why), hooks_.before_compile);
}

std::unique_ptr<SubcodeExecutor> ExecutorLoader::subcode(int64_t talker_hidden) {
  MappedIr ir(core_, config_.subcode_xml);
  const int64_t steps = config_.groups - 1;
  std::string why = refused(config_.subcode_device);
  std::unique_ptr<SubcodeExecutor> executor;
  if (own(why, hooks_.subcode_graph)) {
    try {  // its codebook tables are read in place: the mapping stays with it, the model goes
      executor = std::make_unique<SubcodeCpu>(*ir.model(), team(), *kernels_, ir.mapping());
    } catch (const std::invalid_argument& e) {
      why = e.what();
    }
  }
  if (!executor)
    executor = std::make_unique<SubcodeGraph>(core_, std::move(ir), config_.subcode_device, config_.subcode_properties,
                                              std::move(why), hooks_.before_compile);
  if (executor->talker_hidden() != talker_hidden || executor->steps() != steps)
    throw std::runtime_error("the subcode graph does not fit the talker (hidden width or code groups)");
  return executor;
}

}  // namespace qwen3tts
