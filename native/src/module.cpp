// wyoming_qwen3tts._native: the C++ runner for Python. Models cross as IR paths (an
// ov.Model cannot cross between pybind11 modules), tensors as numpy buffers, and the whole
// step runs without the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <stdexcept>

#include "qwen3tts/runner.hpp"

namespace py = pybind11;
using namespace qwen3tts;

namespace {

template <typename T>
std::vector<T> to_vector(const py::array_t<T, py::array::c_style | py::array::forcecast>& a) {
  return std::vector<T>(a.data(), a.data() + a.size());
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "The native step loop of wyoming-qwen3tts (see native/include/qwen3tts/runner.hpp).";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const std::length_error& e) {  // the KV pool cannot hold a request now
      PyErr_SetString(PyExc_MemoryError, e.what());
    }
  });

  py::class_<SamplingParams>(m, "SamplingParams")
      .def(py::init<>())
      .def_readwrite("do_sample", &SamplingParams::do_sample)
      .def_readwrite("top_k", &SamplingParams::top_k)
      .def_readwrite("top_p", &SamplingParams::top_p)
      .def_readwrite("temperature", &SamplingParams::temperature)
      .def_readwrite("repetition_penalty", &SamplingParams::repetition_penalty)
      .def_readwrite("subtalker_do_sample", &SamplingParams::subtalker_do_sample)
      .def_readwrite("subtalker_top_k", &SamplingParams::subtalker_top_k)
      .def_readwrite("subtalker_top_p", &SamplingParams::subtalker_top_p)
      .def_readwrite("subtalker_temperature", &SamplingParams::subtalker_temperature)
      .def_readwrite("min_frames", &SamplingParams::min_frames);

  py::class_<StepTimes>(m, "StepTimes")
      .def_readonly("steps", &StepTimes::steps)
      .def_readonly("talker_s", &StepTimes::talker_s)
      .def_readonly("subcode_s", &StepTimes::subcode_s)
      .def_readonly("codec_s", &StepTimes::codec_s)
      .def_readonly("host_s", &StepTimes::host_s);

  py::class_<BlockPool>(m, "BlockPool")
      .def_property_readonly("num_blocks", &BlockPool::num_blocks)
      .def_property_readonly("block_size", &BlockPool::block_size)
      .def_property_readonly("free", &BlockPool::free)
      .def_property_readonly("used", &BlockPool::used)
      .def_property_readonly("available", &BlockPool::available)
      .def_property_readonly("pinned", &BlockPool::pinned)
      .def_property_readonly("prefixes", &BlockPool::prefixes)
      .def_property_readonly("tables", &BlockPool::tables)
      .def("blocks_for", &BlockPool::blocks_for)
      .def("can_reserve", &BlockPool::can_reserve);

  py::class_<Sequence, std::shared_ptr<Sequence>>(m, "Sequence")
      .def_readonly("id", &Sequence::id)
      .def_readonly("max_frames", &Sequence::max_frames)
      .def_readonly("cached", &Sequence::cached)
      .def_readonly("prefix_tokens", &Sequence::prefix_tokens)
      .def_readonly("finished", &Sequence::finished)
      .def_readonly("reason", &Sequence::reason)
      .def_readonly("prompt_tokens", &Sequence::prompt_tokens)
      .def_readonly("text_open", &Sequence::text_open)
      .def_property_readonly("num_frames", &Sequence::num_frames)
      .def_property_readonly("pending", [](const Sequence& s) -> py::object {
        return s.pending.empty() ? py::object(py::none()) : py::object(py::int_(s.pending_rows()));
      })
      .def_property_readonly("codes", [](const Sequence& s) {
        py::array_t<int64_t> codes({s.num_frames(), s.groups});
        std::copy(s.frames.begin(), s.frames.end(), codes.mutable_data());
        return codes;
      })
      .def("take_audio", [](Sequence& s) {
        py::list chunks;
        for (auto& pcm : s.audio) {
          py::array_t<float> a(static_cast<py::ssize_t>(pcm.size()));
          std::copy(pcm.begin(), pcm.end(), a.mutable_data());
          chunks.append(a);
        }
        s.audio.clear();
        return chunks;
      }, "PCM chunks decoded since the last call, in order");

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
      .def_readwrite("kv_blocks", &RunnerConfig::kv_blocks)
      .def_readwrite("kv_cache_bytes", &RunnerConfig::kv_cache_bytes)
      .def_readwrite("first_chunk", &RunnerConfig::first_chunk)
      .def_readwrite("steady_chunk", &RunnerConfig::steady_chunk)
      .def_readwrite("offline", &RunnerConfig::offline)
      .def_readwrite("prefill_chunk", &RunnerConfig::prefill_chunk)
      .def_readwrite("prefix_cache", &RunnerConfig::prefix_cache)
      .def_readwrite("eos", &RunnerConfig::eos)
      .def_readwrite("suppress_from", &RunnerConfig::suppress_from)
      .def_readwrite("prefix_entries", &RunnerConfig::prefix_entries)
      .def_readwrite("primed_states", &RunnerConfig::primed_states)
      .def_readwrite("groups", &RunnerConfig::groups)
      .def_readwrite("tts_pad", &RunnerConfig::tts_pad);

  py::class_<Runner>(m, "Runner")
      .def(py::init<const RunnerConfig&>(), py::call_guard<py::gil_scoped_release>())  // compiles the graphs
      .def_property_readonly("block_size", &Runner::block_size)
      .def_property_readonly("kv_block_bytes", &Runner::kv_block_bytes)
      .def_property_readonly("capacity_tokens", &Runner::capacity_tokens)
      .def_property_readonly("pool", &Runner::pool, py::return_value_policy::reference_internal)
      .def_property_readonly("prefix_cache", &Runner::prefix_cache)
      .def_property_readonly("times", &Runner::times, py::return_value_policy::copy)
      .def_property_readonly("active", &Runner::active)
      .def_property_readonly("load_memory", [](const Runner& r) {
        py::list marks;  // (stage, anon kB, file kB)
        for (const auto& mark : r.load_memory())
          marks.append(py::make_tuple(mark.stage, mark.resident.anon_kb, mark.resident.file_kb));
        return marks;
      })
      .def(
          "add",
          [](Runner& r, py::array_t<float, py::array::c_style | py::array::forcecast> prefill,
             py::array_t<float, py::array::c_style | py::array::forcecast> trailing, const SamplingParams& params,
             py::array_t<double, py::array::c_style | py::array::forcecast> uniforms, int64_t max_frames,
             std::optional<py::array_t<int64_t, py::array::c_style | py::array::forcecast>> codec_prefix,
             bool text_open, int64_t prefix_len) {
            if (prefill.ndim() != 2 || trailing.ndim() != 2 || prefill.shape(1) != trailing.shape(1))
              throw std::invalid_argument("prefill and trailing must be [rows, hidden] of one width");
            std::vector<int64_t> prefix;
            if (codec_prefix) {
              if (codec_prefix->ndim() != 2 || codec_prefix->shape(1) != r.groups())
                throw std::invalid_argument("codec_prefix must be [frames, groups]");
              prefix = to_vector(*codec_prefix);
            }
            const int64_t hidden = prefill.shape(1);
            auto p = to_vector(prefill), t = to_vector(trailing);
            auto u = to_vector(uniforms);
            py::gil_scoped_release release;  // priming a reference runs the codec
            return r.add(std::move(p), std::move(t), hidden, params, std::move(u), max_frames, prefix, text_open,
                         prefix_len);
          },
          py::arg("prefill"), py::arg("trailing"), py::arg("params"), py::arg("uniforms"), py::arg("max_frames"),
          py::arg("codec_prefix") = py::none(), py::arg("text_open") = false, py::arg("prefix_len") = 0)
      .def(
          "extend",
          [](Runner& r, const std::shared_ptr<Sequence>& seq,
             py::array_t<float, py::array::c_style | py::array::forcecast> rows, bool closed, int64_t max_frames,
             py::array_t<double, py::array::c_style | py::array::forcecast> uniforms) {
            return r.extend(seq, to_vector(rows), closed, max_frames, to_vector(uniforms));
          },
          py::arg("seq"), py::arg("rows"), py::arg("closed"), py::arg("max_frames"), py::arg("uniforms"))
      .def("abort", &Runner::abort)
      .def("step", &Runner::step, py::call_guard<py::gil_scoped_release>())
      .def("close", &Runner::close, py::call_guard<py::gil_scoped_release>(),
           "Free the graphs now, not at the last reference's end (waits for a step in progress); "
           "add() and step() raise afterwards, the pool and times stay readable")
      .def_property_readonly("closed", &Runner::closed);
}
