#include "luminal/cpu/thread_pool.hpp"

#include <chrono>
#include <cstdlib>
#include <string>

#include "luminal/error.hpp"

#if defined(__linux__)
#include <sched.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LUMINAL_CPU_RELAX() _mm_pause()
#else
#define LUMINAL_CPU_RELAX() std::this_thread::yield()
#endif

namespace luminal::cpu {
namespace {

thread_local bool t_in_task = false;

// How long a thread busy-waits before sleeping: long enough to catch the next job of a
// kernel sequence, short enough not to steal a shared machine's cores while idle.
constexpr auto kSpin = std::chrono::microseconds(50);

template <class Ready>
bool spin_until(Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (ready()) return true;
    LUMINAL_CPU_RELAX();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return ready();
  }
}

int threads_from_environment() {
  if (const char* env = std::getenv("LUMINAL_NUM_THREADS")) {
    char* end = nullptr;
    const long value = std::strtol(env, &end, 10);
    LUMINAL_CHECK(end != env && *end == '\0' && value >= 1 && value <= 4096,
                  "LUMINAL_NUM_THREADS must be a thread count >= 1, got '", env, "'");
    return static_cast<int>(value);
  }
#if defined(__linux__)
  // The CPUs this process may run on (taskset, cgroup cpusets), which
  // hardware_concurrency() ignores.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) > 0) return CPU_COUNT(&allowed);
#endif
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

}  // namespace

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(threads_from_environment());
  return pool;
}

bool ThreadPool::in_task() { return t_in_task; }

ThreadPool::ThreadPool(int num_threads) {
  LUMINAL_CHECK(num_threads >= 1, "ThreadPool: thread count must be >= 1, got ", num_threads);
#if defined(__linux__)
  // With more threads than CPUs, sharing a CPU is unavoidable: leave placement to the
  // scheduler.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (num_threads > 1 && sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) >= num_threads)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cpus_.push_back(c);
#endif
  workers_.reserve(static_cast<size_t>(num_threads - 1));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::work_on_job(uint64_t generation) {
  const bool was_in_task = t_in_task;
  t_in_task = true;
  uint64_t claim = claim_.load(std::memory_order_acquire);
  for (;;) {
    if ((claim >> 32) != (generation & 0xffffffffu)) break;  // a newer job (or none)
    const int64_t chunk = static_cast<int64_t>(claim & 0xffffffffu);
    if (chunk >= chunks_.load(std::memory_order_acquire)) break;
    if (!claim_.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      continue;  // `claim` now holds the current value
    }
    // The job cannot end while this claimed chunk is not done, so its fields are live.
    if (!failed_.load(std::memory_order_relaxed)) {
      const int64_t b = begin_ + chunk * grain_;
      const int64_t e = end_ - b < grain_ ? end_ : b + grain_;
      try {
        fn_(ctx_, b, e);
      } catch (...) {
        std::lock_guard lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
      }
    }
    if (chunks_done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks_.load(std::memory_order_relaxed)) {
      std::lock_guard lock(mutex_);
      done_cv_.notify_all();
    }
    claim = claim_.load(std::memory_order_acquire);
  }
  t_in_task = was_in_task;
}

void ThreadPool::step_off_caller_cpu() const {
#if defined(__linux__)
  const int caller = caller_cpu_.load(std::memory_order_relaxed);
  if (cpus_.empty() || caller < 0 || sched_getcpu() != caller) return;
  cpu_set_t others;
  CPU_ZERO(&others);
  for (int c : cpus_)
    if (c != caller) CPU_SET(c, &others);
  sched_setaffinity(0, sizeof others, &others);  // best effort: a refusal leaves it where it was
#endif
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
      std::unique_lock lock(mutex_);
      wake_cv_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
      if (stop_) return;
    }
    seen = generation_.load(std::memory_order_acquire);
    step_off_caller_cpu();
    work_on_job(seen);
  }
}

void ThreadPool::run(int64_t begin, int64_t end, int64_t grain, ChunkFn fn, void* ctx) {
  LUMINAL_CHECK(grain >= 1, "parallel_for: grain must be >= 1, got ", grain);
  if (end <= begin) return;
  // Nested calls, single chunks and single-thread pools run here: waking workers costs
  // more than it saves, and a nested call must not wait on the workers running it.
  if (t_in_task || workers_.empty() || end - begin <= grain) {
    const bool was_in_task = t_in_task;
    t_in_task = true;
    try {
      for (int64_t b = begin; b < end; b += grain) fn(ctx, b, end - b < grain ? end : b + grain);
    } catch (...) {
      t_in_task = was_in_task;
      throw;
    }
    t_in_task = was_in_task;
    return;
  }
  const int64_t chunks = (end - begin - 1) / grain + 1;
  LUMINAL_CHECK(chunks < (int64_t{1} << 32), "parallel_for: ", chunks, " chunks; use a larger grain");
  std::lock_guard submit(submit_mutex_);
  const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
  // Close the last job's claims before touching its fields: a worker still leaving it could
  // otherwise read the new chunk count with the old claim counter, claim a chunk of this job
  // under the old tag (run it twice) and count it here, past `chunks`, so that the wait
  // below never saw its count equal `chunks`. With the counter at its end under the new
  // tag, such a worker's claim fails and it leaves; no worker of this job starts before
  // generation_ is published below.
  claim_.store(((generation & 0xffffffffu) << 32) | 0xffffffffu, std::memory_order_seq_cst);
  fn_ = fn;
  ctx_ = ctx;
  begin_ = begin;
  end_ = end;
  grain_ = grain;
  chunks_.store(chunks, std::memory_order_release);  // after the claims closed (acquired in work_on_job)
  chunks_done_.store(0, std::memory_order_relaxed);
  failed_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
  claim_.store((generation & 0xffffffffu) << 32, std::memory_order_release);
#if defined(__linux__)
  if (!cpus_.empty()) caller_cpu_.store(sched_getcpu(), std::memory_order_relaxed);
#endif
  {
    std::lock_guard lock(mutex_);
    generation_.store(generation, std::memory_order_release);
  }
  wake_cv_.notify_all();
  work_on_job(generation);
  if (!spin_until([&] { return chunks_done_.load(std::memory_order_acquire) == chunks; })) {
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return chunks_done_.load(std::memory_order_acquire) == chunks; });
  }
  if (error_) std::rethrow_exception(error_);
}

}  // namespace luminal::cpu
