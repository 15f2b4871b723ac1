// Profiling candidates in a child process.
//
// A candidate program that faults a GPU (an illegal address) leaves the process's CUDA
// context unusable, and CUDA offers no way back short of ending the process. A runtime for
// such a device names a worker program (Runtime::profiling_worker); the compile then runs
// each candidate there: the worker loads it, makes the segment's profiling inputs, times it
// and sends back the time and the outputs. When a candidate takes the worker down, the
// candidate is rejected and the next one starts a fresh worker, with a fresh context.
//
// The protocol is private to this pair: length-prefixed binary messages over a Unix socket
// (the worker's standard input and output), programs in serialize_graph's exact form. A
// backend's worker is a three-line main around serve_profiling.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "luminal/runtime.hpp"

namespace luminal {

// One candidate to run: `program` (its inputs persisted, as profiling needs) with its
// external ids, the segment whose Input nodes the profiling inputs are made for, and how.
struct CandidateRequest {
  const Graph* program = nullptr;
  std::vector<NodeId> io_of;
  const Graph* segment = nullptr;
  DimMap dims;
  uint64_t seed = 0;
  InputValues values = InputValues::Uniform;
  ProfileOptions options;
  // The first candidate of a segment search: the worker starts a fresh runtime and makes
  // the profiling inputs (a worker serves one compile, segment after segment).
  bool new_segment = false;
};

struct CandidateOutcome {
  enum class Status { Ok, Error, WorkerLost } status = Status::Ok;
  ProfileResult result;                                  // Ok
  std::vector<std::pair<NodeId, HostTensor>> outputs;    // Ok, unless the profile timed out
  std::string message;                                   // Error, WorkerLost: what happened
};

// The worker's side: serves requests from `in_fd`, answering on `out_fd`, on one runtime
// from one runtime made by `make_runtime` when the worker starts: a fresh() runtime on it
// for each new segment (whose first request makes the profiling inputs). Returns the
// process's exit status: 0 at the end of input, 3 after a DeviceLost (the context is gone:
// the worker must end).
int serve_profiling(const std::function<std::unique_ptr<Runtime>()>& make_runtime, int in_fd = 0, int out_fd = 1);

// The compile's side: one worker process, started on first use and again after it is lost.
class ProfilingWorker {
 public:
  // `command`: the worker program and its arguments. The worker's environment is this
  // process's, plus LUMINAL_PROFILING_WORKER=1.
  explicit ProfilingWorker(std::vector<std::string> command);
  ~ProfilingWorker();
  ProfilingWorker(const ProfilingWorker&) = delete;
  ProfilingWorker& operator=(const ProfilingWorker&) = delete;

  // Runs one candidate. A worker that dies, or does not answer within `answer_limit`, is
  // killed and reported as WorkerLost; the next call starts a new one. Errors starting the
  // worker (no such program) throw luminal::Error.
  CandidateOutcome run(const CandidateRequest& request, std::chrono::duration<double> answer_limit);
  // Starts the worker now, if none is running, so that it sets up its device while the
  // compile does other work; an error starting it is left for run() to report.
  void prestart();
  // How many worker processes this object has started (one more after each loss).
  int workers_started() const { return started_; }

 private:
  void start();
  void stop(bool kill);
  std::vector<std::string> command_;
  int pid_ = -1;
  int fd_ = -1;
  int started_ = 0;
};

}  // namespace luminal
