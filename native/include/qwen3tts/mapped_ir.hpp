// An IR whose weights file the runner maps itself, so that it can hand the pages back.
//
// OpenVINO's CPU plugin packs its own copy of the weights it multiplies with (the compiled
// model's memory), yet the compiled model keeps the ov::Model it was built from, and with it
// the mapped .bin, for its whole life: once the pages have been read to pack them, every
// weight is resident twice (1.5 GB of 3.6 GB for the 0.6B INT8 model). OpenVINO has no
// public call to drop those pages, nor a way to compile without keeping them (ENABLE_MMAP=NO
// copies the file into memory instead; a compiled-model cache maps its blob the same way).
// So the runner maps the file read-only and private, and reads the model over that memory
// (ov::Core::read_model from a string and a tensor, which shares the memory); once a graph
// has been compiled and run, release() drops the mapped pages from this process. The mapping
// stays: a constant the plugin still reads (a gathered table, a bias) faults back in from
// the page cache, so releasing never changes a number.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include <openvino/openvino.hpp>

namespace qwen3tts {

class MappedIr {
 public:
  // Reads `xml_path` and maps the weights file next to it (same name, .bin).
  MappedIr(ov::Core& core, const std::string& xml_path);
  ~MappedIr();
  MappedIr(MappedIr&& other) noexcept;
  MappedIr& operator=(MappedIr&&) = delete;
  MappedIr(const MappedIr&) = delete;
  MappedIr& operator=(const MappedIr&) = delete;

  // The model as read (null after release()). Its constants point into the mapping: every
  // model and compiled model made from it must be gone before this object is.
  const std::shared_ptr<ov::Model>& model() const { return model_; }
  // Once the graph is compiled (and run, where the plugin packs weights at the first
  // inference): drop the model and the weights' resident pages (the mapping stays valid).
  void release();
  // Bytes of the weights file.
  size_t size() const { return size_; }
  // Keeps the mapping alive past this object (null for an empty weights file): for weights
  // read in place after the model is gone (embedding_table.hpp).
  std::shared_ptr<const void> mapping() const;

 private:
  struct Mapping;
  size_t size_ = 0;
  std::shared_ptr<Mapping> mapping_;
  std::shared_ptr<ov::Model> model_;
};

// Drops the resident pages of [data, data + bytes) where they lie in a live MappedIr's
// mapping (a weight the runner has copied: its pages are read once, so reading a graph's
// weights matrix by matrix keeps only one matrix of the file resident, not the whole file
// next to the copies); anywhere else (a model built in memory) nothing. Never changes a
// number: a private, read-only file mapping faults a dropped page back in from the file.
void release_mapped(const void* data, size_t bytes);

}  // namespace qwen3tts
