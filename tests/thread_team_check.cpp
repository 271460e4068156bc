// Checks of qwen3tts::ThreadTeam (native/include/qwen3tts/thread_team.hpp), built and run by
// tests/test_thread_team.py: `thread_team_check CHECK MEMBERS [IDLE_SPIN_US]` runs one check on
// a team of MEMBERS and prints "ok" or what went wrong (exit status 1). No timing is checked:
// the Python side only bounds the whole run, so that a hang fails instead of stalling.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "qwen3tts/thread_team.hpp"

namespace {

using qwen3tts::ThreadTeam;

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok && failures++ < 10) std::printf("FAIL: %s\n", what.c_str());
}

// Every job runs once on every member, rank 0 on the caller's thread; jobs follow at once, after
// the idle spin (members asleep) and in between.
void check_runs(ThreadTeam& team) {
  const auto caller = std::this_thread::get_id();
  for (int job = 0; job < 60; ++job) {
    std::vector<std::atomic<int>> ran(static_cast<size_t>(team.size()));
    std::atomic<bool> rank0_on_caller{false};
    team.run([&](int rank) noexcept {
      ran[static_cast<size_t>(rank)].fetch_add(1);
      if (rank == 0) rank0_on_caller = std::this_thread::get_id() == caller;
    });
    for (int rank = 0; rank < team.size(); ++rank)
      expect(ran[static_cast<size_t>(rank)].load() == 1, "job " + std::to_string(job) + " ran " +
                                                             std::to_string(ran[static_cast<size_t>(rank)].load()) +
                                                             " times on rank " + std::to_string(rank));
    expect(rank0_on_caller, "rank 0 ran on another thread than the caller");
    if (job % 3 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // past any idle spin
    if (job % 3 == 2) std::this_thread::sleep_for(std::chrono::microseconds(30));
  }
}

// A barrier orders the stages: what every member wrote before it, every member reads after it.
void check_barriers(ThreadTeam& team) {
  const int members = team.size(), stages = 2000;
  std::vector<int> slots(static_cast<size_t>(members), -1);  // plain ints: the barrier must order them
  std::atomic<int> wrong{0};
  team.run([&](int rank) noexcept {
    for (int stage = 0; stage < stages; ++stage) {
      slots[static_cast<size_t>(rank)] = stage;
      team.barrier();
      for (int other = 0; other < members; ++other)
        if (slots[static_cast<size_t>(other)] != stage) wrong.fetch_add(1);
      team.barrier();  // nobody writes the next stage before everyone has read this one
    }
  });
  expect(wrong.load() == 0, std::to_string(wrong.load()) + " reads saw another stage");
}

// share() gives every item of [0, count) to exactly one member, in chunks inside the range,
// however the members race for them, with shares back to back (no barrier between them) and
// counts from none to more items than the chunks' counter would split evenly.
void check_shares(ThreadTeam& team) {
  const std::vector<int64_t> counts{0, 1, 2, 3, 7, 64, 65, 1000, 4097};
  std::vector<std::vector<std::atomic<int>>> seen;
  for (int64_t count : counts) seen.emplace_back(static_cast<size_t>(count));
  std::atomic<int> bad_chunks{0};
  std::vector<std::atomic<int64_t>> taken(static_cast<size_t>(team.size()));
  for (int repeat = 0; repeat < 20; ++repeat) {
    team.run([&](int rank) noexcept {
      for (size_t i = 0; i < counts.size(); ++i)
        team.share(rank, counts[i], [&](int64_t begin, int64_t end) {
          if (begin < 0 || begin >= end || end > counts[i]) bad_chunks.fetch_add(1);
          for (int64_t item = begin; item < end; ++item) seen[i][static_cast<size_t>(item)].fetch_add(1);
          taken[static_cast<size_t>(rank)].fetch_add(end - begin);
        });
    });
  }
  expect(bad_chunks.load() == 0, std::to_string(bad_chunks.load()) + " chunks outside their range or empty");
  for (size_t i = 0; i < counts.size(); ++i)
    for (int64_t item = 0; item < counts[i]; ++item) {
      const int n = seen[i][static_cast<size_t>(item)].load();
      expect(n == 20, "item " + std::to_string(item) + " of " + std::to_string(counts[i]) + " was worked on " +
                          std::to_string(n) + " times in 20 rounds");
    }
  int64_t total = 0;
  for (auto& t : taken) total += t.load();
  int64_t expected = 0;
  for (int64_t count : counts) expected += 20 * count;
  expect(total == expected, "members took " + std::to_string(total) + " items, not " + std::to_string(expected));
}

// Barriers and shares mixed in one job, as a layer stack does, many times over: run on a team of
// more members than the machine has cores, it must still finish (members yield the core).
void check_stack_like(ThreadTeam& team) {
  const int64_t items = 257;
  std::vector<int> out(static_cast<size_t>(items));  // plain: share's chunks are disjoint
  std::atomic<int> wrong{0};
  for (int job = 0; job < 30; ++job) {
    team.run([&](int rank) noexcept {
      for (int stage = 0; stage < 40; ++stage) {
        team.share(rank, items, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) out[static_cast<size_t>(i)] = stage;
        });
        team.barrier();
        for (int64_t i = rank; i < items; i += team.size())
          if (out[static_cast<size_t>(i)] != stage) wrong.fetch_add(1);
        team.barrier();
      }
    });
  }
  expect(wrong.load() == 0, std::to_string(wrong.load()) + " items not written by the share before the barrier");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::printf("usage: %s runs|barriers|shares|stack MEMBERS [IDLE_SPIN_US]\n", argv[0]);
    return 2;
  }
  const std::string check = argv[1];
  const int members = std::atoi(argv[2]);
  const std::chrono::microseconds idle_spin(argc > 3 ? std::atoi(argv[3]) : ThreadTeam::kIdleSpin.count());
  ThreadTeam team(members, idle_spin);
  if (check == "runs") check_runs(team);
  else if (check == "barriers") check_barriers(team);
  else if (check == "shares") check_shares(team);
  else if (check == "stack") check_stack_like(team);
  else return 2;
  if (failures == 0) std::printf("ok\n");
  return failures == 0 ? 0 : 1;
}
