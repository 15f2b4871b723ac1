#include "luminal/cpu/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "luminal/error.hpp"

using luminal::cpu::ThreadPool;

namespace {

// Every index of [begin, end) is visited exactly once, in chunks of at most `grain`.
void expect_exact_cover(ThreadPool& pool, int64_t begin, int64_t end, int64_t grain) {
  const int64_t size = end > begin ? end - begin : 0;
  std::vector<std::atomic<int>> hits(static_cast<size_t>(size));
  std::atomic<bool> chunk_too_big{false};
  pool.parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    if (e - b > grain || e <= b) chunk_too_big = true;
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i - begin)].fetch_add(1);
  });
  EXPECT_FALSE(chunk_too_big);
  for (int64_t i = 0; i < size; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << begin + i;
}

}  // namespace

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (auto [begin, end, grain] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {0, 0, 1}, {5, 3, 1}, {0, 1, 1}, {0, 17, 1}, {-7, 100, 3}, {0, 1000, 64}, {3, 10007, 1000}, {0, 64, 64}}) {
      SCOPED_TRACE(testing::Message() << threads << " threads, [" << begin << ", " << end << ") grain " << grain);
      expect_exact_cover(pool, begin, end, grain);
    }
  }
}

TEST(ThreadPool, ManySmallJobsInARow) {
  ThreadPool pool(4);
  int64_t total = 0;
  for (int job = 0; job < 2000; ++job) {
    std::atomic<int64_t> sum{0};
    pool.parallel_for(0, 8, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i + job;
    });
    total += sum.load();
  }
  int64_t expected = 0;
  for (int job = 0; job < 2000; ++job) expected += 28 + 8 * job;
  EXPECT_EQ(total, expected);
}

// A worker still leaving one job must not claim a chunk of the next: a job with few
// chunks followed by one with many let a late worker read the new chunk count with the old
// job's claim counter, run a chunk twice and count it into the new job, whose caller then
// waited forever for the count to equal its chunks (seen hanging under ASan). Alternating
// job sizes back to back, with more threads than cores, every index exactly once.
TEST(ThreadPool, AlternatingJobSizesNeverRunAChunkTwice) {
  ThreadPool pool(4);
  for (int job = 0; job < 20000; ++job) {
    const int64_t size = job % 2 == 0 ? 2 : 37 + job % 5;
    std::vector<std::atomic<int>> hits(static_cast<size_t>(size));
    pool.parallel_for(0, size, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
    });
    for (int64_t i = 0; i < size; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "job " << job << " index " << i;
  }
}

TEST(ThreadPool, RethrowsTheFirstExceptionAndStaysUsable) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(0, 100, 1,
                                 [&](int64_t b, int64_t) {
                                   if (b == 37) throw std::runtime_error("chunk 37");
                                 }),
               std::runtime_error);
  expect_exact_cover(pool, 0, 500, 7);
}

TEST(ThreadPool, NestedCallsRunSeriallyInsideATask) {
  ThreadPool pool(3);
  EXPECT_FALSE(ThreadPool::in_task());
  std::atomic<int> inner_hits{0};
  std::atomic<bool> saw_outside_task{false};
  pool.parallel_for(0, 6, 1, [&](int64_t, int64_t) {
    if (!ThreadPool::in_task()) saw_outside_task = true;
    pool.parallel_for(0, 10, 2, [&](int64_t b, int64_t e) { inner_hits += static_cast<int>(e - b); });
  });
  EXPECT_FALSE(saw_outside_task);
  EXPECT_EQ(inner_hits.load(), 60);
  EXPECT_FALSE(ThreadPool::in_task());
}

TEST(ThreadPool, CallersFromSeveralThreadsTakeTurns) {
  ThreadPool pool(2);
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&] {
      for (int job = 0; job < 200; ++job) {
        std::atomic<int> count{0};
        pool.parallel_for(0, 33, 4, [&](int64_t b, int64_t e) { count += static_cast<int>(e - b); });
        if (count != 33) ++failures;
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadPool, RejectsBadArguments) {
  EXPECT_THROW(ThreadPool(0), luminal::Error);
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(0, 10, 0, [](int64_t, int64_t) {}), luminal::Error);
  EXPECT_GE(ThreadPool::global().num_threads(), 1);
}
