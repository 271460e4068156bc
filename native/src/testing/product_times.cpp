// _native.testing.product_times: the layer stacks' weight products alone, timed as the runner
// runs them (the same packed matrices, quantization, team and barriers, nothing between them),
// so a step's time can be split into its products and the rest (docs/BENCHMARKS.md, "Why the
// fast preset's four streams stop near 2.1×").
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <openvino/openvino.hpp>

#include "qwen3tts/kernels.hpp"
#include "qwen3tts/layer_stack.hpp"
#include "qwen3tts/thread_team.hpp"
#include "testing/bindings.hpp"

namespace qwen3tts::testing {

namespace py = pybind11;

namespace {

// Milliseconds of each of `repeats` passes over every layer's four products with `rows` rows.
std::vector<double> time_products(const std::string& xml, const std::string& graph, int64_t rows,
                                  const std::string& isa, int threads, int repeats) {
  if (rows < 1 || threads < 1 || repeats < 1) throw std::invalid_argument("product_times: rows, threads, repeats >= 1");
  ov::Core core;
  const std::shared_ptr<ov::Model> model = core.read_model(xml);
  const LayerStack stack(NamedWeights(*model, graph), kernels_named(isa));
  ThreadTeam team(threads);
  StackWork work;
  work.prepare(stack, rows, threads, stack.hidden);
  std::mt19937 random(0);
  std::normal_distribution<float> normal;
  for (auto* input : {&work.normed, &work.attention, &work.act})
    std::generate(input->begin(), input->end(), [&] { return normal(random); });
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto begin = std::chrono::steady_clock::now();
    team.run([&](int rank) noexcept {
      for (const Layer& l : stack.layers) {
        product(team, rank, work, *l.qkv, work.normed.data(), rows, work.qkv.data());
        product(team, rank, work, *l.o, work.attention.data(), rows, work.out.data());
        product(team, rank, work, *l.gate_up, work.normed.data(), rows, work.gate_up.data());
        product(team, rank, work, *l.down, work.act.data(), rows, work.out.data());
      }
    });
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count());
  }
  return times;
}

}  // namespace

void bind_product_times(py::module_& m) {
  m.def(
      "product_times",
      [](const std::string& xml, const std::string& graph, int64_t rows, const std::string& isa, int threads,
         int repeats) {
        py::gil_scoped_release release;
        return time_products(xml, graph, rows, isa, threads, repeats);
      },
      py::arg("xml"), py::arg("graph"), py::arg("rows"), py::arg("isa") = "", py::arg("threads") = 2,
      py::arg("repeats") = 10,
      "ms of each pass over the layers' products of a converted talker or subcode graph ('talker', 'subcode'), "
      "`rows` activation rows, as the runner multiplies them");
}

}  // namespace qwen3tts::testing
