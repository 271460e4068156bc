// Drives the streaming codec graphs (convert/codec_stream.py) for many streams, exactly as
// wyoming_qwen3tts/engine/codec_stream.py does: per-stream state kept on the host between
// calls, one call per chunk size for every stream due, static-batch graphs filled with idle
// rows or called several times, a short last chunk padded with code 0 and cut.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <openvino/openvino.hpp>

namespace qwen3tts {

// One stream's decoder state between calls.
struct CodecState {
  std::vector<std::vector<uint8_t>> tensors;  // one buffer per state tensor (layout order); empty before the first chunk
  int64_t frames = 0;                          // frames decoded so far
  bool closed = false;                         // a partial last chunk was decoded
};

class StreamingCodec {
 public:
  // first/steady: chunk size -> compiled graph.
  StreamingCodec(std::map<int, ov::CompiledModel> first, std::map<int, ov::CompiledModel> steady);

  bool has_first(int size) const { return first_.count(size) > 0; }
  bool has_steady(int size) const { return steady_.count(size) > 0; }
  int64_t samples_per_frame() const { return samples_per_frame_; }

  // Decode one chunk per stream with the graphs of `size` frames. codes[i] holds
  // frames[i] × quantizers codes, frame-major; 1 ≤ frames[i] ≤ size (< size ends the stream).
  // Returns pcm [frames[i] · samples_per_frame] per stream.
  std::vector<std::vector<float>> decode(const std::vector<CodecState*>& streams,
                                         const std::vector<std::vector<int64_t>>& codes,
                                         const std::vector<int64_t>& frames, int size);

  // A stream that has decoded `codes` (frames × quantizers, frame-major) already, their
  // audio dropped: in-context cloning decodes the reference codes in front of the generated
  // ones. Runs the steady graphs, largest first; their sizes must add up to the frame count
  // (a 1-frame graph always does). The result counts 0 frames decoded.
  CodecState prime(const std::vector<int64_t>& codes);

 private:
  struct Graph {
    ov::CompiledModel compiled;
    ov::InferRequest request;
    int64_t batch = 0;  // static batch, or 0 for dynamic
  };
  struct StateSlot {
    std::string name;  // without the "state."/"next." prefix
    ov::element::Type type;
    ov::Shape row_shape;  // shape of one stream's slice
    size_t row_bytes = 0;
  };
  static Graph make_graph(ov::CompiledModel compiled);

  std::map<int, Graph> first_, steady_;
  std::vector<StateSlot> layout_;
  int64_t samples_per_frame_ = 0, quantizers_ = 0;
};

}  // namespace qwen3tts
