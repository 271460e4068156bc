#include "qwen3tts/huge_pages.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace qwen3tts {

namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kSlab = std::size_t{32} << 20;  // 16 huge pages: a few matrices each
constexpr std::size_t kAlign = 64;

struct Slab {
  char* base;
  std::size_t size, used, live;  // live: allocations not yet freed
};

class Slabs {
 public:
  void* allocate(std::size_t bytes) {
    bytes = (std::max<std::size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
    std::lock_guard<std::mutex> lock(mutex_);
    if (slabs_.empty() || slabs_.back().size - slabs_.back().used < bytes) open(bytes);
    Slab& slab = slabs_.back();
    void* p = slab.base + slab.used;
    slab.used += bytes;
    ++slab.live;
    return p;
  }

  void free(void* p) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = std::find_if(slabs_.begin(), slabs_.end(), [&](const Slab& s) {
      return static_cast<char*>(p) >= s.base && static_cast<char*>(p) < s.base + s.size;
    });
    if (it == slabs_.end() || --it->live > 0) return;
    std::free(it->base);
    slabs_.erase(it);
  }

 private:
  void open(std::size_t bytes) {
    const std::size_t size = std::max(kSlab, (bytes + kHugePage - 1) / kHugePage * kHugePage);
    void* base = nullptr;
    if (posix_memalign(&base, kHugePage, size) != 0) throw std::bad_alloc();
    madvise(base, size, MADV_HUGEPAGE);  // advice: where the kernel has no huge pages, small ones
    slabs_.push_back({static_cast<char*>(base), size, 0, 0});
  }

  std::mutex mutex_;
  std::vector<Slab> slabs_;  // the last one is filled next
};

Slabs& slabs() {
  static Slabs* s = new Slabs();  // never destroyed: weights may be freed during the process's exit
  return *s;
}

}  // namespace

void* weight_allocate(std::size_t bytes) { return slabs().allocate(bytes); }
void weight_free(void* p) noexcept {
  if (p) slabs().free(p);
}

}  // namespace qwen3tts
