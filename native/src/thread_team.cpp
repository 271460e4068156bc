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

ThreadTeam::ThreadTeam(int size) : size_(size) {
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
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

void ThreadTeam::serve(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || epoch_ != seen; });
      if (stop_) return;
      seen = epoch_;
      job = job_;
    }
    (*job)(rank);
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
    ++epoch_;
  }
  wake_.notify_all();
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
