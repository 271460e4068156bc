// wyoming_qwen3tts._native.testing: the runner's parts one by one, for the tests that check
// them against OpenVINO and the official code (the kernels, the own stacks, the graphs with
// the INT4 product swapped in). Nothing in the package calls these.
#include "testing/bindings.hpp"

#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>

#include <openvino/openvino.hpp>

#include "numpy_arrays.hpp"
#include "qwen3tts/embedding_table.hpp"
#include "qwen3tts/int4_weights.hpp"
#include "qwen3tts/runner.hpp"
#include "qwen3tts/subcode_cpu.hpp"
#include "qwen3tts/talker_cpu.hpp"
#include "testing/int4_linear_op.hpp"

namespace qwen3tts::testing {

void bind(py::module_& m) {
  bind_product_times(m);
  m.def(
      "int4_linear",
      [](const Array<uint8_t>& q, const Array<float>& scale, const Array<float>& x, const std::string& isa) {
        // q [N, K/2]: OpenVINO's i4 bytes (two's complement, low nibble first); scale [N, K/group]
        if (q.ndim() != 2 || scale.ndim() != 2 || x.ndim() != 2 || scale.shape(0) != q.shape(0) || scale.shape(1) < 1 ||
            (2 * q.shape(1)) % scale.shape(1) != 0 || x.shape(1) != 2 * q.shape(1))
          throw std::invalid_argument("int4_linear: q [N, K/2], scale [N, groups], x [M, K]");
        const Kernels& kernels = kernels_named(isa);
        const size_t n = static_cast<size_t>(q.shape(0)), groups = static_cast<size_t>(scale.shape(1));
        const size_t k = static_cast<size_t>(x.shape(1));
        ov::op::v0::Constant weights(ov::element::i4, ov::Shape{n, groups, k / groups}, q.data());
        ov::op::v0::Constant scales(ov::element::f32, ov::Shape{n, groups, 1}, scale.data());
        const Int4Weights packed(weights, scales, kernels);
        QuantizedRows rows;
        quantize_rows(kernels, x.data(), x.shape(0), packed.cols(), packed.group(), rows);
        py::array_t<float> y({x.shape(0), q.shape(0)});
        packed.multiply_part(rows, y.mutable_data(), 0, 1);
        return y;
      },
      py::arg("q"), py::arg("scale"), py::arg("x"), py::arg("isa") = "",
      "x · Wᵀ by the INT4 kernel of `isa`: W from i4 bytes q [N, K/2] and scales [N, groups]");
  m.def(
      "int8_linear",
      [](const Array<int8_t>& q, const Array<float>& scale, const Array<float>& x, const std::string& isa) {
        if (q.ndim() != 2 || scale.ndim() != 1 || x.ndim() != 2 || scale.shape(0) != q.shape(0) ||
            x.shape(1) != q.shape(1))
          throw std::invalid_argument("int8_linear: q [N, K], scale [N], x [M, K]");
        const Kernels& kernels = kernels_named(isa);
        const size_t n = static_cast<size_t>(q.shape(0)), k = static_cast<size_t>(q.shape(1));
        const auto weights = std::make_shared<ov::op::v0::Constant>(ov::element::i8, ov::Shape{n, k}, q.data());
        const ov::op::v0::Constant scales(ov::element::f32, ov::Shape{n, 1}, scale.data());
        const Int8Weights packed(*weights, scales, kernels);
        QuantizedRows rows;
        quantize_rows(kernels, x.data(), x.shape(0), packed.cols(), packed.group(), rows);
        py::array_t<float> y({x.shape(0), q.shape(0)});
        packed.multiply_part(rows, y.mutable_data(), 0, 1);
        std::vector<float> first(k);
        EmbeddingTable(weights, scales, nullptr).row(0, first.data());  // the table lookup, of the same weights
        return std::make_tuple(y, to_array(first, {static_cast<py::ssize_t>(k)}), packed.group());
      },
      py::arg("q"), py::arg("scale"), py::arg("x"), py::arg("isa") = "",
      "(x · Wᵀ by the INT8 kernel of `isa`, row 0 of W dequantized, the activations' group) for tests: W from q [N, K] "
      "int8 and one scale per row");
  m.def(
      "infer_with_int4_kernel",
      [](const std::string& xml, const std::map<std::string, py::array>& inputs, const std::string& isa) {
        // The graph as the runner runs it (every INT4 product swapped), f32 and OpenVINO's
        // dynamic quantization off, so that against OpenVINO's exact products of the same
        // weights only the kernel differs.
        const Kernels& kernels = kernels_named(isa);
        ov::Core core;
        const std::shared_ptr<ov::Model> model = core.read_model(xml);
        const int swapped = use_int4_linear(model, kernels);
        ov::InferRequest request = core.compile_model(model, "CPU", ov::AnyMap{{"INFERENCE_PRECISION_HINT", "f32"},
                                                                         {"DYNAMIC_QUANTIZATION_GROUP_SIZE", 0}})
                                       .create_infer_request();
        for (const auto& [name, array] : inputs) {
          const py::array a = py::array::ensure(array, py::array::c_style);
          const ov::element::Type type = a.dtype().is(py::dtype::of<float>())     ? ov::element::f32
                                         : a.dtype().is(py::dtype::of<int64_t>()) ? ov::element::i64
                                         : a.dtype().is(py::dtype::of<int32_t>()) ? ov::element::i32
                                                                                  : ov::element::dynamic;
          if (type == ov::element::dynamic) throw std::invalid_argument("infer_with_int4_kernel: " + name + ": f32, i64 or i32");
          ov::Shape shape;
          for (py::ssize_t i = 0; i < a.ndim(); ++i) shape.push_back(static_cast<size_t>(a.shape(i)));
          ov::Tensor tensor(type, shape);
          std::memcpy(tensor.data(), a.data(), tensor.get_byte_size());
          request.set_tensor(name, tensor);
        }
        request.infer();
        std::map<std::string, py::array> outputs;
        for (const ov::Output<const ov::Node>& port : request.get_compiled_model().outputs()) {
          const ov::Tensor t = request.get_tensor(port);
          std::vector<py::ssize_t> shape;
          for (const size_t d : t.get_shape()) shape.push_back(static_cast<py::ssize_t>(d));
          py::array out;
          if (t.get_element_type() == ov::element::f32)
            out = py::array_t<float>(shape);
          else if (t.get_element_type() == ov::element::i64)
            out = py::array_t<int64_t>(shape);
          else
            continue;  // another type: not needed by tests
          std::memcpy(out.mutable_data(), t.data(), t.get_byte_size());
          outputs[port.get_any_name()] = out;
        }
        return std::make_tuple(swapped, outputs);
      },
      py::arg("xml"), py::arg("inputs"), py::arg("isa") = "",
      "(products swapped, f32 and i64 outputs) of one inference of an IR with the INT4 kernel in its products");

  m.def(
      "run_subcode_cpu",
      [](const std::string& xml, int threads, const Array<float>& hidden, const Array<int64_t>& code0,
         const Array<float>& temperature, const Array<int64_t>& top_k, const Array<float>& top_p,
         const Array<float>& uniform, const std::string& isa) {
        const Kernels& kernels = kernels_named(isa);
        ov::Core core;
        SubcodeCpu subcode(*core.read_model(xml), std::make_shared<ThreadTeam>(threads), kernels);
        const py::ssize_t k = code0.size(), steps = subcode.steps(), width = subcode.talker_hidden();
        if (hidden.ndim() != 2 || hidden.shape(0) != k || hidden.shape(1) != width || temperature.size() != k ||
            top_k.size() != k || top_p.size() != k || uniform.size() != k * steps)
          throw std::invalid_argument("run_subcode_cpu: the subcode graph's inputs for k rows");
        py::array_t<int64_t> codes({k, steps});
        py::array_t<float> embedding({k, width});
        std::vector<float> logits;
        {
          py::gil_scoped_release release;
          subcode.run({k, hidden.data(), code0.data(), temperature.data(), top_k.data(), top_p.data(), uniform.data(),
                       codes.mutable_data(), embedding.mutable_data()},
                      &logits);
        }
        return std::make_tuple(codes, embedding, to_array(logits, {k, static_cast<py::ssize_t>(subcode.vocab())}));
      },
      py::arg("xml"), py::arg("threads"), py::arg("hidden"), py::arg("code0"), py::arg("temperature"),
      py::arg("top_k"), py::arg("top_p"), py::arg("uniform"), py::arg("isa") = "",
      "(codes, frame_embedding, first step's logits) of one call of the runner's own code predictor over a "
      "subcode IR's weights");

  py::class_<TalkerCpu>(m, "TalkerCpu", "The runner's own talker over a talker IR's weights")
      .def(py::init([](const std::string& xml, int threads, bool u8_cache, int64_t block_size, const std::string& isa) {
             ov::Core core;
             return std::make_unique<TalkerCpu>(*core.read_model(xml), std::make_shared<ThreadTeam>(threads), u8_cache,
                                                block_size, kernels_named(isa));
           }),
           py::arg("xml"), py::arg("threads"), py::arg("u8_cache"), py::arg("block_size"), py::arg("isa") = "")
      .def_property_readonly("block_bytes", &TalkerCpu::block_bytes)
      .def("allocate", &TalkerCpu::allocate, py::arg("blocks"))
      .def(
          "copy_block", [](TalkerCpu& t, int32_t source, int32_t target) { t.copy_blocks({source, target}); },
          py::arg("source"), py::arg("target"))
      .def(
          "run",
          [](TalkerCpu& t, const Array<float>& embeds, const Array<int64_t>& positions, const Array<int32_t>& past_lens,
             const Array<int32_t>& begins, const Array<int32_t>& block_indices, const Array<int32_t>& block_begins,
             const Array<int64_t>& sample_rows) {
            const py::ssize_t rows = positions.size(), n = past_lens.size(), k = sample_rows.size();
            bool ok = embeds.ndim() == 2 && embeds.shape(0) == rows && embeds.shape(1) == t.hidden() &&
                      begins.size() == n + 1 && block_begins.size() == n + 1 && begins.data()[n] == rows &&
                      block_begins.data()[n] == block_indices.size();
            for (py::ssize_t s = 0; ok && s < n; ++s)
              ok = past_lens.data()[s] + begins.data()[s + 1] - begins.data()[s] <=
                   (block_begins.data()[s + 1] - block_begins.data()[s]) * t.block_size();
            for (py::ssize_t i = 0; ok && i < block_indices.size(); ++i)
              ok = block_indices.data()[i] >= 0 && block_indices.data()[i] < t.blocks();
            for (py::ssize_t i = 0; ok && i < k; ++i) ok = sample_rows.data()[i] >= 0 && sample_rows.data()[i] < rows;
            if (!ok) throw std::invalid_argument("TalkerCpu.run: the arrays do not fit each other or the cache");
            py::array_t<float> logits({k, static_cast<py::ssize_t>(t.vocab())});
            py::array_t<float> hidden({k, static_cast<py::ssize_t>(t.hidden())});
            py::gil_scoped_release release;
            t.run({rows, n, k, embeds.data(), positions.data(), past_lens.data(), begins.data(), block_indices.data(),
                   block_begins.data(), 0, sample_rows.data(), logits.mutable_data(), hidden.mutable_data()});
            return std::make_tuple(logits, hidden);
          },
          py::arg("embeds"), py::arg("positions"), py::arg("past_lens"), py::arg("begins"), py::arg("block_indices"),
          py::arg("block_begins"), py::arg("sample_rows"),
          "One call, as the paged talker graph's inputs -> (logits [k, vocab], hidden [k, hidden])");


  m.def(
      "runner",
      [](const RunnerConfig& config, std::shared_ptr<CodecGraphs> codec, bool int4_op, bool talker_graph,
         bool subcode_graph) {
        TestHooks hooks;
        hooks.talker_graph = talker_graph;
        hooks.subcode_graph = subcode_graph;
        if (int4_op) {
          const Kernels& kernels = kernels_named(config.kernels);
          hooks.before_compile = [&kernels](const std::shared_ptr<ov::Model>& model) { use_int4_linear(model, kernels); };
        }
        py::gil_scoped_release release;
        return std::make_unique<Runner>(config, std::move(codec), std::move(hooks));
      },
      py::arg("config"), py::arg("codec") = nullptr, py::arg("int4_op") = false, py::arg("talker_graph") = false, py::arg("subcode_graph") = false,
      "A Runner whose OpenVINO graphs multiply INT4 weights by the runner's own product (int4_op) and which runs "
      "OpenVINO's graph for the talker or the code predictor where its own stack would run");
}

}  // namespace qwen3tts::testing
