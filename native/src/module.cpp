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

#include "numpy_arrays.hpp"
#include "qwen3tts/codec_graphs.hpp"
#include "qwen3tts/kernels.hpp"
#include "qwen3tts/runner.hpp"
#include "testing/bindings.hpp"

namespace py = pybind11;
using namespace qwen3tts;

namespace {

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

py::list marks(const std::vector<MemoryMark>& memory) {
  py::list out;  // (stage, anon kB, file kB)
  for (const auto& mark : memory) out.append(py::make_tuple(mark.stage, mark.resident.anon_kb, mark.resident.file_kb));
  return out;
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
  auto testing = m.def_submodule("testing", "The runner's parts one by one, for tests (testing/bindings.cpp).");
  testing::bind(testing);

  py::class_<StepTimes>(m, "StepTimes")
      .def_readonly("talker_s", &StepTimes::talker_s)
      .def_readonly("subcode_s", &StepTimes::subcode_s)
      .def_readonly("codec_s", &StepTimes::codec_s);

  py::class_<RunnerConfig>(m, "RunnerConfig")
      .def(py::init<>())
      .def_readwrite("talker_xml", &RunnerConfig::talker_xml)
      .def_readwrite("subcode_xml", &RunnerConfig::subcode_xml)
      .def_readwrite("talker_device", &RunnerConfig::talker_device)
      .def_readwrite("subcode_device", &RunnerConfig::subcode_device)
      .def_readwrite("talker_properties", &RunnerConfig::talker_properties)
      .def_readwrite("subcode_properties", &RunnerConfig::subcode_properties)
      .def_readwrite("num_layers", &RunnerConfig::num_layers)
      .def_readwrite("own_stacks", &RunnerConfig::own_stacks)
      .def_readwrite("talker_u8_cache", &RunnerConfig::talker_u8_cache)
      .def_readwrite("talker_block_size", &RunnerConfig::talker_block_size)
      .def_readwrite("threads", &RunnerConfig::threads)
      .def_readwrite("eos", &RunnerConfig::eos)
      .def_readwrite("suppress_from", &RunnerConfig::suppress_from)
      .def_readwrite("groups", &RunnerConfig::groups)
      .def_readwrite("primed_states", &RunnerConfig::primed_states)
      .def_readwrite("kernels", &RunnerConfig::kernels);

  py::class_<CodecConfig>(m, "CodecConfig")
      .def(py::init<>())
      .def_readwrite("first_xml", &CodecConfig::first_xml)
      .def_readwrite("steady_xml", &CodecConfig::steady_xml)
      .def_readwrite("device", &CodecConfig::device)
      .def_readwrite("properties", &CodecConfig::properties)
      .def_readwrite("batch", &CodecConfig::batch)
      .def_readwrite("first_chunk", &CodecConfig::first_chunk)
      .def_readwrite("steady_chunk", &CodecConfig::steady_chunk);

  // Held by shared_ptr: every runner decoding with it holds it too (codec_graphs.hpp).
  py::class_<CodecGraphs, std::shared_ptr<CodecGraphs>>(m, "CodecGraphs")
      .def(py::init<const CodecConfig&>(), py::arg("config"), py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("load_memory", [](const CodecGraphs& c) { return marks(c.load_memory()); });

  py::class_<Runner>(m, "Runner")
      // loads the talker and code predictor; codec None: offline
      .def(py::init([](const RunnerConfig& config, std::shared_ptr<CodecGraphs> codec) {
             return std::make_unique<Runner>(config, std::move(codec));
           }),
           py::arg("config"), py::arg("codec") = nullptr, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("codec",
                             [](const Runner& r) { return std::const_pointer_cast<CodecGraphs>(r.codec_graphs()); })
      .def_property_readonly("block_size", &Runner::block_size)
      .def_property_readonly("kv_block_bytes", &Runner::kv_block_bytes)
      .def_property_readonly("subcode_runtime", &Runner::subcode_runtime)
      .def_property_readonly("talker_runtime", &Runner::talker_runtime)
      .def_property_readonly("rows_exact", &Runner::rows_exact)
      .def_property_readonly("hidden", &Runner::hidden)
      .def_property_readonly("times", &Runner::times)
      .def_property_readonly("load_memory", [](const Runner& r) { return marks(r.load_memory()); })
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
