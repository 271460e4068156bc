// _native.testing.ProductStacks: the layer stacks' weight products alone, timed as the runner
// runs them (the same packed matrices, quantization, team and barriers, nothing between them)
// and in its order (a talker pass, then the code predictor's passes of the frame), so a step's
// time can be split into its products and the rest, the caches as a step leaves them
// (docs/BENCHMARKS.md, "Why the fast preset's four streams stop near 2.1×").
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <openvino/openvino.hpp>

#include "qwen3tts/kernels.hpp"
#include "qwen3tts/layer_stack.hpp"
#include "qwen3tts/thread_team.hpp"
#include "testing/bindings.hpp"

namespace qwen3tts::testing {

namespace py = pybind11;

namespace {

std::unique_ptr<LayerStack> read_stack(ov::Core& core, const std::string& xml, const std::string& graph,
                                       const Kernels& kernels) {
  const std::shared_ptr<ov::Model> model = core.read_model(xml);
  return std::make_unique<LayerStack>(NamedWeights(*model, graph), kernels);
}

class ProductStacks {
 public:
  ProductStacks(const std::string& talker_xml, const std::string& subcode_xml, const std::string& isa, int threads)
      : team_(std::max(threads, 1)) {
    if (threads < 1) throw std::invalid_argument("ProductStacks: threads >= 1");
    ov::Core core;
    const Kernels& kernels = kernels_named(isa);
    talker_ = read_stack(core, talker_xml, "talker", kernels);
    subcode_ = read_stack(core, subcode_xml, "subcode", kernels);
  }

  // (talker ms, code predictor ms) of each of `frames` frames: one talker pass over its layers'
  // products, then `steps` code-predictor passes, `rows` activation rows each.
  std::pair<std::vector<double>, std::vector<double>> time(int64_t rows, int steps, int frames) {
    if (rows < 1 || steps < 0 || frames < 1) throw std::invalid_argument("ProductStacks: rows, frames >= 1, steps >= 0");
    StackWork talker_work, subcode_work;
    prepare(*talker_, rows, talker_work);
    prepare(*subcode_, rows, subcode_work);
    std::vector<double> talker_ms, subcode_ms;
    for (int f = 0; f < frames; ++f) {
      talker_ms.push_back(pass(*talker_, talker_work, rows, 1));
      subcode_ms.push_back(pass(*subcode_, subcode_work, rows, steps));
    }
    return {talker_ms, subcode_ms};
  }

 private:
  void prepare(const LayerStack& stack, int64_t rows, StackWork& work) {
    work.prepare(stack, rows, team_.size(), stack.hidden);
    std::mt19937 random(0);
    std::normal_distribution<float> normal;
    for (auto* input : {&work.normed, &work.attention, &work.act})
      std::generate(input->begin(), input->end(), [&] { return normal(random); });
  }

  // ms of `count` passes over the stack's products
  double pass(const LayerStack& stack, StackWork& work, int64_t rows, int count) {
    const auto begin = std::chrono::steady_clock::now();
    team_.run([&](int rank) noexcept {
      for (int i = 0; i < count; ++i)
        for (const Layer& l : stack.layers) {
          product(team_, rank, work, *l.qkv, work.normed.data(), rows, work.qkv.data());
          product(team_, rank, work, *l.o, work.attention.data(), rows, work.out.data());
          product(team_, rank, work, *l.gate_up, work.normed.data(), rows, work.gate_up.data());
          product(team_, rank, work, *l.down, work.act.data(), rows, work.out.data());
        }
    });
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  }

  ThreadTeam team_;
  std::unique_ptr<LayerStack> talker_, subcode_;
};

}  // namespace

void bind_product_times(py::module_& m) {
  py::class_<ProductStacks>(m, "ProductStacks",
                            "A converted model's talker and code-predictor layer stacks, packed as the runner packs "
                            "them, to time their weight products alone")
      .def(py::init<const std::string&, const std::string&, const std::string&, int>(), py::arg("talker_xml"),
           py::arg("subcode_xml"), py::arg("isa") = "", py::arg("threads") = 2,
           py::call_guard<py::gil_scoped_release>())
      .def("time", &ProductStacks::time, py::arg("rows"), py::arg("steps"), py::arg("frames"),
           py::call_guard<py::gil_scoped_release>(),
           "(talker ms, code predictor ms) of each frame: a talker pass, then `steps` code-predictor passes");
}

}  // namespace qwen3tts::testing
