// Memory for the runner's repacked weights, in 2 MB pages where the kernel gives them.
//
// A decode step reads every weight once (the 0.6B talker ~230 MB; the code predictor ~40 MB 15
// times per frame): in 4 KB pages that is a TLB miss and a page walk per 4 KB read, in 2 MB pages
// one per 2 MB (measured on the 0.6B INT4 talker: decode steps ~12 → ~10 ms). Most distributions
// leave transparent huge pages to `madvise`, so the memory is marked before its first touch. The
// matrices are 1–3 MB each, so they are carved one after another out of shared 2 MB-aligned slabs
// (a matrix of its own 2 MB page would hold up to 2 MB it does not use); a slab goes back to the
// system when its last matrix does.
#pragma once

#include <cstddef>
#include <new>

namespace qwen3tts {

// `bytes` from a slab, 64-byte aligned; throws std::bad_alloc.
void* weight_allocate(std::size_t bytes);
void weight_free(void* p) noexcept;

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding, as allocators do
  T* allocate(std::size_t n) { return static_cast<T*>(weight_allocate(n * sizeof(T))); }
  void deallocate(T* p, std::size_t) noexcept { weight_free(p); }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const { return true; }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>&) const { return false; }
};

}  // namespace qwen3tts
