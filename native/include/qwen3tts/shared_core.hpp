// The one OpenVINO Core of the process's native objects (runners, codec graphs).
#pragma once

#include <openvino/openvino.hpp>

namespace qwen3tts {

// Never destroyed, so that an object's end frees only its own compiled models: a Core of its
// own takes its CPU plugin down with it, and the plugin's destructor clears the CPU executors
// of OpenVINO's process-wide executor manager, the one every compiled model in the process
// (the Python graphs, other runners) draws from.
ov::Core& shared_core();

}  // namespace qwen3tts
