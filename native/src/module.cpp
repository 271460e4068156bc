// wyoming_qwen3tts._native: the C++ runner for Python (engine/native.py). Models cross as IR
// paths (an ov.Model cannot cross between pybind11 modules), arrays as numpy buffers copied
// whole, and the graphs run without the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "qwen3tts/int4_linear.hpp"
#include "qwen3tts/subcode_cpu.hpp"
#include "qwen3tts/talker_cpu.hpp"
#include "qwen3tts/runner.hpp"

namespace py = pybind11;
using namespace qwen3tts;

namespace {

template <typename T>
using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;

template <typename T>
std::vector<T> to_vector(const Array<T>& a) {
  std::vector<T> v(static_cast<size_t>(a.size()));
  if (!v.empty()) std::memcpy(v.data(), a.data(), v.size() * sizeof(T));
  return v;
}

template <typename T>
py::array_t<T> to_array(const std::vector<T>& v, std::vector<py::ssize_t> shape) {
  py::array_t<T> a(shape);
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(T));
  return a;
}

// The columns of forward()'s `sampling` matrix: one row of SamplingParams per sampled row.
const std::vector<std::string> kSamplingFields{
    "do_sample",           "top_k",           "top_p",           "temperature",           "repetition_penalty",
    "min_frames",          "subtalker_do_sample", "subtalker_top_k", "subtalker_top_p", "subtalker_temperature"};

std::vector<SamplingParams> sampling_rows(const Array<double>& m) {
  if (m.ndim() != 2 || m.shape(1) != static_cast<py::ssize_t>(kSamplingFields.size()))
    throw std::invalid_argument("sampling must be [rows, len(SAMPLING_FIELDS)]");
  std::vector<SamplingParams> rows(static_cast<size_t>(m.shape(0)));
  for (size_t r = 0; r < rows.size(); ++r) {
    const double* f = m.data() + r * kSamplingFields.size();
    SamplingParams& p = rows[r];
    p.do_sample = f[0] != 0;
    p.top_k = static_cast<int64_t>(f[1]);
    p.top_p = f[2];
    p.temperature = f[3];
    p.repetition_penalty = f[4];
    p.min_frames = static_cast<int64_t>(f[5]);
    p.subtalker_do_sample = f[6] != 0;
    p.subtalker_top_k = static_cast<int64_t>(f[7]);
    p.subtalker_top_p = f[8];
    p.subtalker_temperature = f[9];
  }
  return rows;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "The native executor of wyoming-qwen3tts's engine line (see native/include/qwen3tts/runner.hpp).";
  m.attr("SAMPLING_FIELDS") = py::tuple(py::cast(kSamplingFields));
  m.def(
      "kernel_isas",
      [] {
        std::vector<std::string> names;
        for (Isa isa : supported_isas()) names.emplace_back(isa_name(isa));
        return names;
      },
      "The instruction sets of the runner's own kernels this CPU runs, fastest first (kernels.hpp).");
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
        py::array_t<float> y({x.shape(0), q.shape(0)});
        packed.multiply(x.data(), x.shape(0), y.mutable_data());
        return y;
      },
      py::arg("q"), py::arg("scale"), py::arg("x"), py::arg("isa") = "",
      "x · Wᵀ by the INT4 kernel of `isa` (for tests): W from i4 bytes q [N, K/2] and scales [N, groups]");
  m.def(
      "int8_linear",
      [](const Array<int8_t>& q, const Array<float>& scale, const Array<float>& x, const std::string& isa) {
        if (q.ndim() != 2 || scale.ndim() != 1 || x.ndim() != 2 || scale.shape(0) != q.shape(0) ||
            x.shape(1) != q.shape(1))
          throw std::invalid_argument("int8_linear: q [N, K], scale [N], x [M, K]");
        const Kernels& kernels = kernels_named(isa);
        const size_t n = static_cast<size_t>(q.shape(0)), k = static_cast<size_t>(q.shape(1));
        const Int8Weights packed(ov::op::v0::Constant(ov::element::i8, ov::Shape{n, k}, q.data()),
                                 ov::op::v0::Constant(ov::element::f32, ov::Shape{n, 1}, scale.data()), kernels);
        QuantizedRows rows;
        quantize_rows(kernels, x.data(), x.shape(0), packed.cols(), packed.group(), rows);
        py::array_t<float> y({x.shape(0), q.shape(0)});
        packed.multiply_part(rows, y.mutable_data(), 0, 1);
        std::vector<float> first(k);
        packed.row(0, first.data());  // the table lookup, checked against the same weights
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
      "(products swapped, f32 and i64 outputs) of one inference of an IR with the INT4 kernel in its products (for tests)");

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
      "subcode IR's weights (for tests)");

  py::class_<TalkerCpu>(m, "TalkerCpu", "The runner's own talker over a talker IR's weights (for tests)")
      .def(py::init([](const std::string& xml, int threads, bool u8_cache, int64_t block_size, const std::string& isa) {
             ov::Core core;
             return std::make_unique<TalkerCpu>(*core.read_model(xml), std::make_shared<ThreadTeam>(threads), u8_cache,
                                                block_size, kernels_named(isa));
           }),
           py::arg("xml"), py::arg("threads"), py::arg("u8_cache"), py::arg("block_size"), py::arg("isa") = "")
      .def_property_readonly("block_bytes", &TalkerCpu::block_bytes)
      .def("allocate", &TalkerCpu::allocate, py::arg("blocks"))
      .def("copy_block", &TalkerCpu::copy_block, py::arg("source"), py::arg("target"))
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
                   block_begins.data(), sample_rows.data(), logits.mutable_data(), hidden.mutable_data()});
            return std::make_tuple(logits, hidden);
          },
          py::arg("embeds"), py::arg("positions"), py::arg("past_lens"), py::arg("begins"), py::arg("block_indices"),
          py::arg("block_begins"), py::arg("sample_rows"),
          "One call, as the paged talker graph's inputs -> (logits [k, vocab], hidden [k, hidden])");

  py::class_<StepTimes>(m, "StepTimes")
      .def_readonly("talker_s", &StepTimes::talker_s)
      .def_readonly("subcode_s", &StepTimes::subcode_s)
      .def_readonly("codec_s", &StepTimes::codec_s);

  py::class_<RunnerConfig>(m, "RunnerConfig")
      .def(py::init<>())
      .def_readwrite("talker_xml", &RunnerConfig::talker_xml)
      .def_readwrite("subcode_xml", &RunnerConfig::subcode_xml)
      .def_readwrite("first_xml", &RunnerConfig::first_xml)
      .def_readwrite("steady_xml", &RunnerConfig::steady_xml)
      .def_readwrite("talker_device", &RunnerConfig::talker_device)
      .def_readwrite("subcode_device", &RunnerConfig::subcode_device)
      .def_readwrite("decoder_device", &RunnerConfig::decoder_device)
      .def_readwrite("talker_properties", &RunnerConfig::talker_properties)
      .def_readwrite("subcode_properties", &RunnerConfig::subcode_properties)
      .def_readwrite("decoder_properties", &RunnerConfig::decoder_properties)
      .def_readwrite("decoder_batch", &RunnerConfig::decoder_batch)
      .def_readwrite("num_layers", &RunnerConfig::num_layers)
      .def_readwrite("first_chunk", &RunnerConfig::first_chunk)
      .def_readwrite("steady_chunk", &RunnerConfig::steady_chunk)
      .def_readwrite("offline", &RunnerConfig::offline)
      .def_readwrite("int4_linear", &RunnerConfig::int4_linear)
      .def_readwrite("subcode_cpu", &RunnerConfig::subcode_cpu)
      .def_readwrite("talker_cpu", &RunnerConfig::talker_cpu)
      .def_readwrite("talker_u8_cache", &RunnerConfig::talker_u8_cache)
      .def_readwrite("talker_block_size", &RunnerConfig::talker_block_size)
      .def_readwrite("subcode_threads", &RunnerConfig::subcode_threads)
      .def_readwrite("eos", &RunnerConfig::eos)
      .def_readwrite("suppress_from", &RunnerConfig::suppress_from)
      .def_readwrite("groups", &RunnerConfig::groups)
      .def_readwrite("primed_states", &RunnerConfig::primed_states)
      .def_readwrite("kernels", &RunnerConfig::kernels);

  py::class_<Runner>(m, "Runner")
      .def(py::init<const RunnerConfig&>(), py::call_guard<py::gil_scoped_release>())  // compiles the graphs
      .def_property_readonly("block_size", &Runner::block_size)
      .def_property_readonly("kv_block_bytes", &Runner::kv_block_bytes)
      .def_property_readonly("int4_products", &Runner::int4_products)
      .def_property_readonly("subcode_runtime", &Runner::subcode_runtime)
      .def_property_readonly("talker_runtime", &Runner::talker_runtime)
      .def_property_readonly("rows_exact", &Runner::rows_exact)
      .def_property_readonly("hidden", &Runner::hidden)
      .def_property_readonly("times", &Runner::times)
      .def_property_readonly("load_memory", [](const Runner& r) {
        py::list marks;  // (stage, anon kB, file kB)
        for (const auto& mark : r.load_memory())
          marks.append(py::make_tuple(mark.stage, mark.resident.anon_kb, mark.resident.file_kb));
        return marks;
      })
      .def("allocate_kv", &Runner::allocate_kv, py::arg("num_blocks"), py::call_guard<py::gil_scoped_release>())
      .def(
          "forward",
          [](Runner& r, const Array<int32_t>& copies, const Array<float>& embeds, const Array<int64_t>& positions,
             const Array<int32_t>& past_lens, const Array<int32_t>& begins, const Array<int32_t>& block_indices,
             const Array<int32_t>& block_begins, int32_t max_context, const Array<int64_t>& sample_rows,
             const Array<double>& sampling, const Array<int64_t>& history, const Array<int64_t>& history_begins,
             const Array<double>& uniforms) {
            if (embeds.ndim() != 2 || embeds.shape(1) != r.hidden())
              throw std::invalid_argument("embeds must be [rows, hidden]");
            StepPlan plan{to_vector(copies),      to_vector(embeds),       to_vector(positions),
                          to_vector(past_lens),   to_vector(begins),       to_vector(block_indices),
                          to_vector(block_begins), max_context,            to_vector(sample_rows),
                          sampling_rows(sampling), to_vector(history),     to_vector(history_begins),
                          to_vector(uniforms)};
            StepOutput out;
            {
              py::gil_scoped_release release;
              out = r.forward(plan);
            }
            const auto k = static_cast<py::ssize_t>(plan.sample_rows.size());
            return py::make_tuple(to_array(out.codes, {k, static_cast<py::ssize_t>(r.groups())}),
                                  to_array(out.embeddings, {k, static_cast<py::ssize_t>(r.hidden())}));
          },
          py::arg("copies"), py::arg("embeds"), py::arg("positions"), py::arg("past_lens"), py::arg("begins"),
          py::arg("block_indices"), py::arg("block_begins"), py::arg("max_context"), py::arg("sample_rows"),
          py::arg("sampling"), py::arg("history"), py::arg("history_begins"), py::arg("uniforms"),
          "One step's plan (engine/step.py StepPlan) -> (codes [k, groups] int64, embeddings [k, hidden] float32); "
          "sampling: [k, len(SAMPLING_FIELDS)] float64, history: every sampled row's group-0 codes, one after "
          "another, history_begins: [k + 1] offsets, uniforms: [k, groups]")
      .def(
          "open_stream",
          [](Runner& r, int64_t stream, std::optional<Array<int64_t>> prefix) {
            std::vector<int64_t> codes;
            if (prefix && prefix->size() > 0) {
              if (prefix->ndim() != 2 || prefix->shape(1) != r.groups())
                throw std::invalid_argument("prefix must be [frames, groups]");
              codes = to_vector(*prefix);
            }
            py::gil_scoped_release release;  // priming a reference runs the codec
            r.open_stream(stream, codes);
          },
          py::arg("stream"), py::arg("prefix") = py::none())
      .def(
          "decode",
          [](Runner& r, const std::vector<std::tuple<int64_t, Array<int64_t>, int>>& chunks) {
            std::vector<CodecChunk> plain;
            plain.reserve(chunks.size());
            for (const auto& [stream, codes, size] : chunks) {
              if (codes.ndim() != 2 || codes.shape(1) != r.groups())
                throw std::invalid_argument("a chunk's codes must be [frames, groups]");
              plain.push_back({stream, to_vector(codes), size});
            }
            std::vector<std::vector<float>> pcm;
            {
              py::gil_scoped_release release;
              pcm = r.decode(plain);
            }
            py::list out;
            for (const auto& p : pcm) out.append(to_array(p, {static_cast<py::ssize_t>(p.size())}));
            return out;
          },
          py::arg("chunks"), "[(stream, codes [m, groups] int64, size)] -> PCM float32 per chunk, in order")
      .def("close_stream", &Runner::close_stream, py::arg("stream"), py::call_guard<py::gil_scoped_release>())
      .def("close", &Runner::close, py::call_guard<py::gil_scoped_release>(),
           "Free the graphs, the KV cache and the codec states now, not at the last reference's end (waits "
           "for a call in progress); the calls raise afterwards, times stay readable")
      .def_property_readonly("closed", &Runner::closed);
}
