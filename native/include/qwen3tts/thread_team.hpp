// A fixed team of threads that runs one job on every member at once, with a spinning
// barrier between the job's dependent stages: GGML's way of keeping every core on a
// decode step's small matrix products. Handing each product to a pool (TBB, the CPU
// plugin's) costs ~40-50 µs of wake-up per product on a 2-core machine, most of a product
// at batch 1 (docs/BENCHMARKS.md); the team's members wake once per job and meet at
// barriers that take well under a microsecond while all of them run.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qwen3tts {

class ThreadTeam {
 public:
  // `size` members: the caller of run() and size - 1 threads of the team's own, which sleep
  // between jobs.
  explicit ThreadTeam(int size);
  ~ThreadTeam();  // stops and joins the threads
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return size_; }
  // Runs job(rank) on every member, rank 0 on the calling thread, and returns when all have
  // finished. The job must not throw (make it noexcept: an exception would leave the other
  // members waiting at a barrier) and must call barrier() the same number of times on every
  // member. One run at a time.
  void run(const std::function<void(int)>& job);
  // Inside a job: returns once every member has reached it (spinning, yielding the core
  // only when a member is slow to come, e.g. preempted).
  void barrier();

 private:
  void serve(int rank);  // a team thread's loop
  void stop();           // ends and joins the team's threads

  const int size_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_;
  const std::function<void(int)>* job_ = nullptr;  // under mutex_
  uint64_t epoch_ = 0;                              // under mutex_: one more per job
  bool stop_ = false;                               // under mutex_
  std::atomic<int> finished_{0};                    // team threads done with the current job
  std::atomic<int> arrived_{0};                     // members at the current barrier
  std::atomic<uint64_t> barriers_{0};               // barriers passed
};

// The CPUs this process may run on (its affinity mask), at least 1.
int available_cpus();
// The physical cores among them (hyperthreads of one core count once), at least 1: the CPU
// plugin's default thread count for a latency-bound graph.
int available_cores();

}  // namespace qwen3tts
