#include "qwen3tts/thread_team.hpp"

#include <immintrin.h>
#include <sched.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <stdexcept>

namespace qwen3tts {

namespace {

// Spins on `done` with pause instructions, then yields the core between looks: a member
// that is not running (preempted, or not yet woken) gets it back instead of waiting for a
// time slice to end.
template <typename Done>
void spin_until(Done done) {
  for (int i = 0; !done(); ++i) {
    if (i < 20000) _mm_pause();
    else std::this_thread::yield();
  }
}

}  // namespace

ThreadTeam::ThreadTeam(int size, std::chrono::microseconds idle_spin)
    : size_(size), idle_spin_(idle_spin), members_(static_cast<size_t>(std::max(size, 1))) {
  if (size < 1) throw std::invalid_argument("a thread team needs at least one member");
  try {
    for (int rank = 1; rank < size; ++rank) threads_.emplace_back([this, rank] { serve(rank); });
  } catch (...) {  // a thread the system would not start: stop those that did, then fail
    stop();
    throw;
  }
}

ThreadTeam::~ThreadTeam() { stop(); }

void ThreadTeam::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_.store(true, std::memory_order_relaxed);
    epoch_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

uint64_t ThreadTeam::await_job(uint64_t seen) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point until = Clock::now() + idle_spin_;
  for (int i = 1;; ++i) {
    const uint64_t epoch = epoch_.load(std::memory_order_acquire);
    if (epoch != seen) return epoch;
    _mm_pause();
    if (i % 64 == 0 && Clock::now() >= until) break;  // the clock costs ~20 ns, a pause up to ~40
  }
  // run() and stop() change the epoch under the mutex, so it cannot change between this
  // look and the wait: no wake-up is lost.
  std::unique_lock<std::mutex> lock(mutex_);
  wake_.wait(lock, [&] { return epoch_.load(std::memory_order_relaxed) != seen; });
  return epoch_.load(std::memory_order_relaxed);  // the mutex orders job_ before it
}

void ThreadTeam::serve(int rank) {
  for (uint64_t seen = 0;;) {
    seen = await_job(seen);
    if (stopping_.load(std::memory_order_relaxed)) return;
    (*job_)(rank);
    finished_.fetch_add(1, std::memory_order_release);
  }
}

void ThreadTeam::run(const std::function<void(int)>& job) {
  if (size_ == 1) {
    job(0);
    return;
  }
  finished_.store(0, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &job;
    epoch_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();  // no system call when every member is still spinning
  job(0);
  spin_until([&] { return finished_.load(std::memory_order_acquire) == size_ - 1; });
}

void ThreadTeam::barrier() {
  if (size_ == 1) return;
  const uint64_t passed = barriers_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == size_) {
    arrived_.store(0, std::memory_order_relaxed);
    barriers_.store(passed + 1, std::memory_order_release);
  } else {
    spin_until([&] { return barriers_.load(std::memory_order_acquire) != passed; });
  }
}

ThreadTeam::Chunk ThreadTeam::claim(uint32_t round, int64_t count) {
  uint64_t seen = chunks_.load(std::memory_order_relaxed);
  for (;;) {
    const auto ahead = static_cast<int32_t>(static_cast<uint32_t>(seen >> 32) - round);  // wraps safely
    if (ahead > 0) return {0, 0};  // a later round has begun: every item of this one is claimed
    const int64_t begin = ahead == 0 ? static_cast<int64_t>(seen & 0xFFFFFFFFu) : 0;  // else this round begins
    if (begin >= count) return {0, 0};
    // a share of what is left: large chunks first, single items at the end
    const int64_t end = std::min(count, begin + std::max<int64_t>(1, (count - begin) / (2 * size_)));
    // relaxed: the counter only splits the items; the barrier after the work publishes the results
    if (chunks_.compare_exchange_weak(seen, (uint64_t{round} << 32) | static_cast<uint64_t>(end),
                                      std::memory_order_relaxed))
      return {begin, end};
  }
}

int available_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  std::set<std::string> cores;  // each core's sibling list, as the kernel writes it
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    std::ifstream file("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list");
    std::string siblings;
    if (!std::getline(file, siblings)) siblings = "cpu" + std::to_string(cpu);  // unknown: a core of its own
    cores.insert(siblings);
  }
  return std::max(1, static_cast<int>(cores.size()));
}

}  // namespace qwen3tts
