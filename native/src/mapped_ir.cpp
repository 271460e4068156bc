#include "qwen3tts/mapped_ir.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

namespace qwen3tts {

namespace {

std::runtime_error os_error(const std::string& what, const std::string& path) {
  return std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

std::string read_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw os_error("cannot read", path);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// The descriptor is closed as soon as the mapping exists (the mapping keeps the file).
struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// The live mappings (start, size), for release_mapped.
struct Mappings {
  std::mutex mutex;
  std::vector<std::pair<uintptr_t, size_t>> ranges;
};

Mappings& mappings() {
  static Mappings* m = new Mappings();  // never destroyed: MappedIrs may outlive static destruction
  return *m;
}

void add_mapping(const void* data, size_t size) {
  Mappings& m = mappings();
  std::lock_guard<std::mutex> lock(m.mutex);
  m.ranges.emplace_back(reinterpret_cast<uintptr_t>(data), size);
}

void remove_mapping(const void* data) {
  Mappings& m = mappings();
  std::lock_guard<std::mutex> lock(m.mutex);
  auto& r = m.ranges;
  r.erase(std::remove_if(r.begin(), r.end(), [&](const auto& x) { return x.first == reinterpret_cast<uintptr_t>(data); }),
          r.end());
}

}  // namespace

void release_mapped(const void* data, size_t bytes) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data), end = begin + bytes;
  Mappings& m = mappings();
  std::lock_guard<std::mutex> lock(m.mutex);  // held: the mapping cannot go meanwhile
  for (const auto& [start, size] : m.ranges) {
    if (begin < start || end > start + size) continue;
    // whole pages only; those shared with a neighbouring constant fault back in if read
    const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
    if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
    return;
  }
}

// One mapping of a weights file, unmapped when its last owner (the MappedIr, or a table read
// in place: MappedIr::mapping()) lets go.
struct MappedIr::Mapping {
  void* data = nullptr;
  size_t size = 0;
  Mapping(void* d, size_t n) : data(d), size(n) {
    try {
      add_mapping(data, size);
    } catch (...) {
      ::munmap(data, size);
      throw;
    }
  }
  ~Mapping() {
    remove_mapping(data);
    ::munmap(data, size);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
};

MappedIr::MappedIr(ov::Core& core, const std::string& xml_path) {
  const std::string bin_path = xml_path.substr(0, xml_path.rfind('.')) + ".bin";
  FileDescriptor file{::open(bin_path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) throw os_error("cannot open", bin_path);
  struct stat info {};
  if (::fstat(file.fd, &info) != 0) throw os_error("cannot stat", bin_path);
  size_ = static_cast<size_t>(info.st_size);
  ov::Tensor weights(ov::element::u8, {0});
  if (size_ > 0) {
    void* data = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd, 0);
    if (data == MAP_FAILED) throw os_error("cannot map", bin_path);
    mapping_ = std::make_shared<Mapping>(data, size_);
    weights = ov::Tensor(ov::element::u8, {size_}, data);  // a view: OpenVINO shares, never copies, it
  }
  model_ = core.read_model(read_text(xml_path), weights);
}

MappedIr::MappedIr(MappedIr&& other) noexcept
    : size_(other.size_), mapping_(std::move(other.mapping_)), model_(std::move(other.model_)) {
  other.size_ = 0;
}

MappedIr::~MappedIr() {
  model_.reset();  // before the mapping its constants point into
}

std::shared_ptr<const void> MappedIr::mapping() const { return mapping_; }

void MappedIr::release() {
  model_.reset();
  // A private read-only file mapping: MADV_DONTNEED only unmaps the pages; the next read
  // maps the file's page again. Failure costs memory, never correctness.
  if (mapping_) ::madvise(mapping_->data, size_, MADV_DONTNEED);
}

}  // namespace qwen3tts
