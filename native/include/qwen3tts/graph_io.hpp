// Small helpers shared by the executors that run OpenVINO graphs (talker_graph.hpp,
// subcode_graph.hpp, codec_stream.hpp): compile properties as strings, and an infer request's
// own input tensors refilled in place.
#pragma once

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <openvino/openvino.hpp>

namespace qwen3tts {

// Compile properties by name, as the Python side writes them (engine/devices.py).
using Properties = std::map<std::string, std::string>;

inline ov::AnyMap to_any(const Properties& properties) {
  ov::AnyMap map;
  for (const auto& [key, value] : properties) map[key] = value;
  return map;
}

// One of a request's own tensors, reshaped (it grows as needed): filling it costs less than a
// fresh tensor and set_tensor per input and call.
template <typename T>
T* reshaped(ov::Tensor& tensor, const ov::Shape& shape) {
  tensor.set_shape(shape);
  return tensor.data<T>();
}

template <typename T>
void fill(ov::Tensor& tensor, const T* values, const ov::Shape& shape) {
  std::memcpy(reshaped<T>(tensor, shape), values, ov::shape_size(shape) * sizeof(T));
}

template <typename T>
void fill(ov::Tensor& tensor, const std::vector<T>& values, const ov::Shape& shape) {
  fill(tensor, values.data(), shape);
}

}  // namespace qwen3tts
