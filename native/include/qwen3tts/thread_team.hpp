// A fixed team of threads that runs one job on every member at once, with a spinning
// barrier between the job's dependent stages: GGML's way of keeping every core on a
// decode step's small matrix products. Handing each product to a pool (TBB, the CPU
// plugin's) costs ~40-50 µs of wake-up per product on a 2-core machine, most of a product
// at batch 1 (docs/BENCHMARKS.md); the team's members wake once per job and meet at
// barriers that take well under a microsecond while all of them run.
//
// As ggml's threadpool: the counters members spin on each sit on a cache line of their own
// (a write to one would otherwise take the line from every member spinning on another);
// between jobs a member spins a short, bounded while before it sleeps, so a job that follows
// soon (the code predictor's after the talker's) finds it awake; and a product's blocks are
// handed out in chunks from a shared counter (share()), so on a CPU with fast and slow cores
// (a Core Ultra's P- and E-cores) the fast ones take more instead of waiting for the slow ones
// at the next barrier.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qwen3tts {

// The cache line size of x86-64 (std::hardware_destructive_interference_size, which GCC
// warns about using in a header).
constexpr size_t kCacheLine = 64;

class ThreadTeam {
 public:
  // How long a member spins for the next job before it sleeps. A wake-up from sleep costs tens
  // of µs on a 2-core VM; the runner's talker and code-predictor jobs follow each other within
  // ~10-60 µs, while the next step comes only after the codec and the Python batch (ms), when
  // a spinning member would take a core from OpenVINO's threads. Measured: docs/OPENVINO.md §11.
  static constexpr std::chrono::microseconds kIdleSpin{100};

  // `size` members: the caller of run() and size - 1 threads of the team's own, which spin
  // for `idle_spin` after a job and then sleep until the next.
  explicit ThreadTeam(int size, std::chrono::microseconds idle_spin = kIdleSpin);
  ~ThreadTeam();  // stops and joins the threads
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return size_; }
  // Runs job(rank) on every member, rank 0 on the calling thread, and returns when all have
  // finished. The job must not throw (make it noexcept: an exception would leave the other
  // members waiting at a barrier) and must call barrier() and share() the same number of
  // times, in the same order, on every member. One run at a time.
  void run(const std::function<void(int)>& job);
  // Inside a job: returns once every member has reached it (spinning, yielding the core
  // only when a member is slow to come, e.g. preempted).
  void barrier();
  // Inside a job, on every member: work(begin, end) for chunks of [0, count) until none is
  // left, each chunk run by the member that claims it first, so every item is worked on
  // exactly once whichever member, and in whatever order, takes it. Chunks shrink as the
  // work runs out (a share of what is left, at least one item: guided scheduling), so the
  // members end within about one item of each other. No barrier is needed between two
  // share() calls; whatever reads the work's results needs one after it.
  template <typename Work>
  void share(int rank, int64_t count, Work&& work) {
    if (size_ == 1) {
      if (count > 0) work(int64_t{0}, count);
      return;
    }
    const uint32_t round = ++members_[static_cast<size_t>(rank)].round;
    for (Chunk c = claim(round, count); c.begin < c.end; c = claim(round, count)) work(c.begin, c.end);
  }

 private:
  struct Chunk {
    int64_t begin, end;
  };
  struct alignas(kCacheLine) Member {
    uint32_t round = 0;  // share() calls so far: the round of `chunks_` this member claims from
  };
  // The next chunk of round `round` over [0, count), empty once all are claimed.
  Chunk claim(uint32_t round, int64_t count);
  void serve(int rank);  // a team thread's loop
  // The epoch of the job after `seen`: spins for idle_spin_, then sleeps until there is one.
  uint64_t await_job(uint64_t seen);
  void stop();  // ends and joins the team's threads

  const int size_;
  const std::chrono::microseconds idle_spin_;
  std::vector<Member> members_;
  std::vector<std::thread> threads_;
  // Written once per job by run() (the job, then the epoch that publishes it), read by every
  // member spinning for the next job.
  alignas(kCacheLine) std::atomic<uint64_t> epoch_{0};  // one more per job, and at stop
  const std::function<void(int)>* job_ = nullptr;       // published by epoch_
  std::atomic<bool> stopping_{false};                   // published by epoch_
  alignas(kCacheLine) std::atomic<int> arrived_{0};      // members at the current barrier
  alignas(kCacheLine) std::atomic<uint64_t> barriers_{0};  // barriers passed: members spin on it
  alignas(kCacheLine) std::atomic<int> finished_{0};       // team threads done with the current job
  // share()'s counter: the round (high 32 bits) and the next item of it (low 32 bits). A round
  // tag instead of a reset: a member still in round r that sees round r + 1 knows r is done.
  alignas(kCacheLine) std::atomic<uint64_t> chunks_{0};
  alignas(kCacheLine) std::mutex mutex_;  // sleeping between jobs
  std::condition_variable wake_;
};

// The CPUs this process may run on (its affinity mask), at least 1.
int available_cpus();
// The physical cores among them (hyperthreads of one core count once), at least 1: the CPU
// plugin's default thread count for a latency-bound graph.
int available_cores();

}  // namespace qwen3tts
