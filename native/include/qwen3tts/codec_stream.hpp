// Drives the streaming codec graphs (convert/codec_stream.py) for many streams, exactly as
// wyoming_qwen3tts/engine/codec_stream.py does: per-stream state kept on the host between
// calls, one call per chunk size for every stream due, static-batch graphs filled with idle
// rows or called several times, a short chunk padded with code 0 and cut — and decoded by a
// steady graph that takes the real frame count, one graph serving every size up to its own.
#pragma once

#include <cstdint>
#include <deque>
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
  bool closed = false;                         // a partial chunk was decoded by a graph that cannot carry the state on
};

class StreamingCodec {
 public:
  // first/steady: compiled graphs by the chunk length they are built for. sizes: further
  // chunk sizes to decode (a schedule's), each with the shortest steady graph that takes the
  // real frame count ("frames") and is at least as long.
  StreamingCodec(std::map<int, ov::CompiledModel> first, std::map<int, ov::CompiledModel> steady,
                 const std::vector<int>& sizes = {});

  bool has_first(int size) const { return first_.count(size) > 0; }
  bool has_steady(int size) const { return steady_.count(size) > 0; }
  int64_t samples_per_frame() const { return samples_per_frame_; }

  // Decode one chunk per stream with the graph for `size` frames. codes[i] holds
  // frames[i] × quantizers codes, frame-major; 1 ≤ frames[i] ≤ size.
  // Returns pcm [frames[i] · samples_per_frame] per stream.
  std::vector<std::vector<float>> decode(const std::vector<CodecState*>& streams,
                                         const std::vector<std::vector<int64_t>>& codes,
                                         const std::vector<int64_t>& frames, int size);

  // A stream that has decoded `codes` (frames × quantizers, frame-major) already, their
  // audio dropped: in-context cloning decodes the reference codes in front of the generated
  // ones. Runs the steady graphs, the longest that fits first; the rest takes a graph that
  // decodes shorter chunks, or there must be graphs whose lengths add up to the frame count
  // (a 1-frame graph does). The result counts 0 frames decoded.
  CodecState prime(const std::vector<int64_t>& codes);

 private:
  struct Graph {
    ov::CompiledModel compiled;
    ov::InferRequest request;
    int64_t batch = 0;        // static batch, or 0 for dynamic
    int64_t frames = 0;       // the chunk length it is built for
    bool any_length = false;  // takes the real frame count: decodes any chunk up to `frames`
    bool stateful = false;    // takes the state (a steady graph; a first graph starts from zeros)
  };
  struct StateSlot {
    std::string name;  // without the "state."/"next." prefix
    ov::element::Type type;
    ov::Shape row_shape;  // shape of one stream's slice
    size_t row_bytes = 0;
  };
  static Graph make_graph(ov::CompiledModel compiled);
  std::vector<std::vector<float>> run(Graph& graph, const std::vector<CodecState*>& streams,
                                      const std::vector<std::vector<int64_t>>& codes,
                                      const std::vector<int64_t>& frames);

  std::deque<Graph> graphs_;              // stable addresses for the pointers below
  std::map<int, Graph*> first_, steady_;  // chunk size -> the graph that decodes it
  std::vector<Graph*> by_length_;         // each steady graph once, longest first
  std::vector<StateSlot> layout_;
  int64_t samples_per_frame_ = 0, quantizers_ = 0;
};

}  // namespace qwen3tts
