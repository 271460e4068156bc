#include "qwen3tts/codec_graphs.hpp"

#include <algorithm>
#include <stdexcept>

#include <openvino/core/preprocess/pre_post_process.hpp>

#include "qwen3tts/shared_core.hpp"

namespace qwen3tts {

namespace {

// The element type the f32 state tensors are kept in between calls: bf16 where the CPU computes
// bf16 (every state tensor feeds a convolution or an attention product, which round it to bf16
// anyway), else f32. Kept in bf16, the plugin concatenates and slices the state in the layout
// and precision its convolutions use, instead of reordering every causal conv's input from
// f32 (docs/OPENVINO.md §14).
ov::element::Type state_type(ov::Core& core, const CodecConfig& config) {
  auto hint = config.properties.find(ov::hint::inference_precision.name());
  if (config.device.rfind("CPU", 0) != 0 || hint == config.properties.end() || hint->second != "bf16")
    return ov::element::f32;
  // a CPU without native BF16 computes f32 whatever the hint says: its state stays f32 too
  auto capabilities = core.get_property(config.device, ov::device::capabilities);
  bool native = std::find(capabilities.begin(), capabilities.end(), ov::device::capability::BF16) != capabilities.end();
  return native ? ov::element::bf16 : ov::element::f32;
}

// The model with its f32 state inputs ("state.*") and outputs ("next.*") in `type`.
void keep_state_in(const std::shared_ptr<ov::Model>& model, ov::element::Type type) {
  if (type == ov::element::f32) return;
  ov::preprocess::PrePostProcessor ppp(model);
  for (const auto& input : model->inputs())
    if (input.get_any_name().rfind("state.", 0) == 0 && input.get_element_type() == ov::element::f32)
      ppp.input(input.get_any_name()).tensor().set_element_type(type);
  for (const auto& output : model->outputs())
    if (output.get_any_name().rfind("next.", 0) == 0 && output.get_element_type() == ov::element::f32)
      ppp.output(output.get_any_name()).tensor().set_element_type(type);
  ppp.build();
}

}  // namespace

CodecGraphs::CodecGraphs(const CodecConfig& config) : config_(config) {
  if (config_.first_chunk < 1 || config_.steady_chunk < 1) throw std::invalid_argument("chunk sizes must be >= 1");
  load_memory_.push_back({"before", ResidentMemory::now()});
  ov::Core& core = shared_core();
  const ov::element::Type state = state_type(core, config_);
  auto compile = [&](const std::map<int, std::string>& paths) {
    std::map<int, ov::CompiledModel> graphs;
    for (const auto& [size, path] : paths) {
      MappedIr ir(core, path);
      if (config_.batch > 0) {  // static shapes: what an NPU needs, and faster on a CPU
        std::map<std::string, ov::PartialShape> shapes;
        for (const auto& input : ir.model()->inputs()) {
          auto shape = input.get_partial_shape();
          shape[0] = config_.batch;
          shapes[input.get_any_name()] = shape;
        }
        ir.model()->reshape(shapes);
      }
      keep_state_in(ir.model(), state);
      // static shapes: the plugin packs the weights while compiling
      graphs.emplace(size, core.compile_model(ir.model(), config_.device, to_any(config_.properties)));
      ir.release();
      irs_.push_back(std::move(ir));
    }
    return graphs;
  };
  first_ = compile(config_.first_xml);
  steady_ = compile(config_.steady_xml);
  auto probe = open();  // also checks that the graphs fit each other
  const int first = static_cast<int>(config_.first_chunk), steady = static_cast<int>(config_.steady_chunk);
  if (!(probe->has_first(first) || probe->has_steady(first)) || !probe->has_steady(steady))
    throw std::invalid_argument("no codec graphs for chunks first=" + std::to_string(first) +
                                " steady=" + std::to_string(steady));
  load_memory_.push_back({"codec", ResidentMemory::now()});
}

std::unique_ptr<StreamingCodec> CodecGraphs::open() const {
  const std::vector<int> sizes{static_cast<int>(config_.first_chunk), static_cast<int>(config_.steady_chunk)};
  return std::make_unique<StreamingCodec>(first_, steady_, sizes);
}

}  // namespace qwen3tts
