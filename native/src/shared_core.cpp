#include "qwen3tts/shared_core.hpp"

namespace qwen3tts {

ov::Core& shared_core() {
  static ov::Core* core = new ov::Core();  // never deleted (see the header), nor at exit
  return *core;
}

}  // namespace qwen3tts
