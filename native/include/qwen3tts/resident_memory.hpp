// Resident memory of this process, split as the kernel counts it: anonymous pages (what the
// plugins allocate: packed weights, caches, buffers) and file pages (mapped weights files).
// The runner records it after compiling each graph, so a benchmark can say what each costs.
#pragma once

#include <cstdint>
#include <string>

namespace qwen3tts {

struct ResidentMemory {
  int64_t anon_kb = 0, file_kb = 0;
  // From /proc/self/status (RssAnon, RssFile); zeros where that file does not exist.
  static ResidentMemory now();
};

struct MemoryMark {
  std::string stage;  // what had been loaded when it was taken
  ResidentMemory resident;
};

}  // namespace qwen3tts
