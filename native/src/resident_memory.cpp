#include "qwen3tts/resident_memory.hpp"

#include <fstream>
#include <string>

namespace qwen3tts {

ResidentMemory ResidentMemory::now() {
  ResidentMemory memory;
  std::ifstream status("/proc/self/status");
  std::string key;
  int64_t kb = 0;
  while (status >> key) {
    if (key == "RssAnon:" && status >> kb) memory.anon_kb = kb;
    else if (key == "RssFile:" && status >> kb) memory.file_kb = kb;
  }
  return memory;
}

}  // namespace qwen3tts
