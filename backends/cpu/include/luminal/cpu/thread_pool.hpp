// One thread pool per process, over all cores.
//
// parallel_for splits [begin, end) into chunks of `grain` indices; the pool's workers
// and the calling thread take chunks until none are left, so a pool of T threads runs
// T - 1 workers. Workers spin briefly after a job (the next one usually follows within
// microseconds), then sleep on a condition variable so an idle process costs nothing.
//
// Oversubscription policy: this pool is the only source of parallelism. A parallel_for
// called from inside a pool task runs serially on that thread, and OpenBLAS (see
// blas_gemm.hpp) is told the pool's thread count and never called from a pool task, so
// at most num_threads() threads compute at any time.
//
// Placement: a worker that starts a job on the caller's CPU moves itself off it (Linux,
// when the pool has no more threads than the process has CPUs). Without that, the
// scheduler's wake-up placement put a woken worker on the waking caller's CPU for the
// first ~100-500 ms of a process, and the two threads shared one core: a 2-thread
// softmax ran at 1-thread speed in about half the benchmark processes (docs/LESSONS.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace luminal::cpu {

class ThreadPool {
 public:
  // The process-wide pool: one thread per CPU this process may run on (its affinity
  // mask on Linux, else hardware_concurrency()), or LUMINAL_NUM_THREADS when set (>= 1).
  static ThreadPool& global();

  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads that compute in a parallel_for, the caller included.
  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }
  // True on a thread that is running a chunk of some pool's parallel_for.
  static bool in_task();

  // fn(chunk_begin, chunk_end) for consecutive chunks of at most `grain` indices that
  // cover [begin, end). Returns when all chunks have run. The first exception thrown by
  // fn is rethrown here (remaining chunks are skipped).
  template <class Fn>
  void parallel_for(int64_t begin, int64_t end, int64_t grain, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run(begin, end, grain, [](void* ctx, int64_t b, int64_t e) { (*static_cast<F*>(ctx))(b, e); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using ChunkFn = void (*)(void*, int64_t, int64_t);
  void run(int64_t begin, int64_t end, int64_t grain, ChunkFn fn, void* ctx);
  void worker_loop();
  // Claims and runs chunks of job `generation` until none are left or a newer job
  // replaced it.
  void work_on_job(uint64_t generation);
  // On a worker: if it runs on the CPU the current job's caller ran on, restrict it to
  // the process's other CPUs (which moves it at once).
  void step_off_caller_cpu() const;

  std::vector<std::thread> workers_;
  std::mutex submit_mutex_;  // one job at a time; other callers wait their turn
  std::mutex mutex_;
  std::condition_variable wake_cv_, done_cv_;
  std::atomic<uint64_t> generation_{0};
  bool stop_ = false;
  std::vector<int> cpus_;  // the CPUs this process may run on, when workers may be placed
  std::atomic<int> caller_cpu_{-1};  // where the current job's caller ran when it posted it

  // The current job. A worker claims chunk c of job g by a compare-and-swap of
  // claim_ from (g << 32 | c) to (g << 32 | c + 1), so a worker that wakes after its
  // job ended finds another generation there and touches nothing; the caller waits
  // for every chunk to be done, never for every worker to show up (a descheduled
  // worker on a busy machine would stall it).
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> chunks_done_{0};
  ChunkFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t begin_ = 0, end_ = 0, grain_ = 1;
  std::atomic<int64_t> chunks_{0};  // read before a claim, so possibly while the next job is set up
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
  std::mutex error_mutex_;
};

}  // namespace luminal::cpu
