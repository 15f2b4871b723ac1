#include "luminal/profiling_worker.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>

#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "luminal/error.hpp"
#include "luminal/program_cache.hpp"

extern char** environ;

namespace luminal {
namespace {

// ---- messages: a u64 length, then the payload, built and read field by field ----
class Writer {
 public:
  template <class T>
  void pod(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void bytes(std::string_view s) {
    pod<uint64_t>(s.size());
    out_.append(s);
  }
  std::string framed() const {
    std::string f(sizeof(uint64_t), '\0');
    const uint64_t n = out_.size();
    std::memcpy(f.data(), &n, sizeof n);
    return f + out_;
  }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <class T>
  T pod() {
    LUMINAL_CHECK(in_.size() >= sizeof(T), "profiling worker: a truncated message");
    T v;
    std::memcpy(&v, in_.data(), sizeof v);
    in_.remove_prefix(sizeof v);
    return v;
  }
  std::string bytes() {
    const auto n = pod<uint64_t>();
    LUMINAL_CHECK(in_.size() >= n, "profiling worker: a truncated message");
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }

 private:
  std::string_view in_;
};

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads `n` bytes, waiting at most until `deadline` (none: forever). False on end of
// input, an error, or the deadline (`timed_out` says which).
bool read_exact(int fd, char* out, size_t n, std::optional<std::chrono::steady_clock::time_point> deadline,
                bool* timed_out = nullptr) {
  while (n > 0) {
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
      pollfd p{fd, POLLIN, 0};
      const int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left.count(), 1'000'000'000))));
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) {
        if (timed_out) *timed_out = true;
        return false;
      }
      if (r < 0) return false;
    }
    const ssize_t got = ::read(fd, out, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

std::optional<std::string> read_message(int fd, std::optional<std::chrono::steady_clock::time_point> deadline = {},
                                        bool* timed_out = nullptr) {
  uint64_t n = 0;
  if (!read_exact(fd, reinterpret_cast<char*>(&n), sizeof n, deadline, timed_out)) return std::nullopt;
  LUMINAL_CHECK(n < (uint64_t{1} << 40), "profiling worker: a message of ", n, " bytes");
  std::string s(n, '\0');
  if (!read_exact(fd, s.data(), n, deadline, timed_out)) return std::nullopt;
  return s;
}

enum Answer : uint8_t { kOk = 0, kError = 1, kDeviceLost = 2 };

std::string encode_request(const CandidateRequest& q, const std::string& program, const std::string& segment) {
  Writer w;
  w.pod<uint8_t>(q.new_segment);
  w.bytes(program);
  w.pod<uint64_t>(q.io_of.size());
  for (NodeId id : q.io_of) w.pod<uint64_t>(id);
  w.bytes(segment);
  w.pod<uint64_t>(q.dims.size());
  for (const auto& [name, value] : q.dims) {
    w.bytes(name);
    w.pod<int64_t>(value);
  }
  w.pod<uint64_t>(q.seed);
  w.pod<uint8_t>(static_cast<uint8_t>(q.values));
  w.pod<int32_t>(q.options.warmup);
  w.pod<int32_t>(q.options.trials);
  w.pod<double>(q.options.timeout.count());
  return w.framed();
}

std::string encode_failure(Answer kind, const std::string& message) {
  Writer w;
  w.pod<uint8_t>(kind);
  w.bytes(message);
  return w.framed();
}

}  // namespace

int serve_profiling(const std::function<std::unique_ptr<Runtime>()>& make_runtime, int in_fd, int out_fd) {
  // Answers go to the socket alone: whatever the runtime prints to standard output goes
  // to standard error instead.
  if (out_fd == STDOUT_FILENO) {
    out_fd = ::dup(STDOUT_FILENO);
    LUMINAL_CHECK(out_fd >= 0, "profiling worker: dup failed: ", std::strerror(errno));
    ::dup2(STDERR_FILENO, STDOUT_FILENO);
  }
  // One device runtime for the worker's life, made before the first request arrives (the
  // compile starts the worker before it saturates: context creation and library loading
  // overlap that), and a fresh() runtime on it per segment: a new CUDA runtime per segment
  // made a new context, reloaded every module and the cuBLASLt handle each time. A failure
  // here is reported with the first request that needs the runtime.
  std::unique_ptr<Runtime> base;
  try {
    base = make_runtime();
  } catch (const std::exception&) {
    base.reset();
  }
  std::unique_ptr<Runtime> rt;
  bool inputs_made = false;
  while (auto message = read_message(in_fd)) {
    try {
      Reader r(*message);
      const bool new_segment = r.pod<uint8_t>() != 0;
      const Graph program = parse_graph(r.bytes());
      std::vector<NodeId> io_of(r.pod<uint64_t>());
      for (NodeId& id : io_of) id = static_cast<NodeId>(r.pod<uint64_t>());
      const Graph segment = parse_graph(r.bytes());
      DimMap dims;
      for (auto n = r.pod<uint64_t>(); n > 0; --n) {
        std::string name = r.bytes();
        dims[name] = r.pod<int64_t>();
      }
      const auto seed = r.pod<uint64_t>();
      const auto values = static_cast<InputValues>(r.pod<uint8_t>());
      ProfileOptions options;
      options.warmup = r.pod<int32_t>();
      options.trials = r.pod<int32_t>();
      options.timeout = std::chrono::duration<double>(r.pod<double>());
      LUMINAL_CHECK(io_of.size() == program.size(), "profiling worker: ", io_of.size(), " external ids for ",
                    program.size(), " nodes");

      if (!rt || new_segment) {
        rt.reset();  // frees the last segment's buffers first
        if (!base) base = make_runtime();
        rt = base->fresh();
        inputs_made = false;
      }
      rt->load_program(0, program, io_of);
      if (!inputs_made) {
        for (NodeId i = 0; i < segment.size(); ++i)
          if (segment.node(i).op == OpKind::Input) rt->fill_profiling_input(i, segment.node(i), dims, seed + i, values);
        inputs_made = true;
      }
      const ProfileResult result = rt->profile(dims, options);
      Writer w;
      w.pod<uint8_t>(kOk);
      w.pod<double>(result.seconds);
      w.pod<uint8_t>(result.timed_out);
      w.pod<double>(result.warmup_seconds);
      std::vector<std::pair<NodeId, HostTensor>> outputs;
      if (!result.timed_out)
        for (NodeId i = 0; i < program.size(); ++i)
          if (program.node(i).op == OpKind::Output && io_of[i] != kNoNode)
            outputs.emplace_back(io_of[i], rt->get_tensor(io_of[i]));
      w.pod<uint64_t>(outputs.size());
      for (const auto& [id, t] : outputs) {
        w.pod<uint64_t>(id);
        w.pod<uint8_t>(static_cast<uint8_t>(t.dtype));
        w.pod<uint64_t>(t.shape.size());
        for (int64_t d : t.shape) w.pod<int64_t>(d);
        w.bytes(std::string_view(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size()));
      }
      if (!write_all(out_fd, w.framed())) return 2;
    } catch (const DeviceLost& e) {
      write_all(out_fd, encode_failure(kDeviceLost, e.what()));
      return 3;
    } catch (const std::exception& e) {
      if (!write_all(out_fd, encode_failure(kError, e.what()))) return 2;
    }
  }
  return 0;
}

ProfilingWorker::ProfilingWorker(std::vector<std::string> command) : command_(std::move(command)) {
  LUMINAL_CHECK(!command_.empty(), "ProfilingWorker: no command");
}

ProfilingWorker::~ProfilingWorker() { stop(false); }

void ProfilingWorker::prestart() {
  if (fd_ >= 0) return;
  try {
    start();
  } catch (const Error&) {
    // run() starts it again and reports the error where a candidate needs the worker.
  }
}

void ProfilingWorker::start() {
  int fds[2];
  LUMINAL_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0,
                "profiling worker: socketpair failed: ", std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  std::vector<std::string> env_strings;
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, "LUMINAL_PROFILING_WORKER=", 25) != 0) env_strings.emplace_back(*e);
  env_strings.emplace_back("LUMINAL_PROFILING_WORKER=1");
  std::vector<char*> env, argv;
  for (auto& s : env_strings) env.push_back(s.data());
  env.push_back(nullptr);
  for (auto& s : command_) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    fail("profiling worker: cannot start '", command_[0], "': ", std::strerror(rc));
  }
  pid_ = pid;
  fd_ = fds[0];
  ++started_;
}

void ProfilingWorker::stop(bool kill) {
  if (fd_ >= 0) ::close(fd_);  // the worker sees the end of its input and exits
  fd_ = -1;
  if (pid_ > 0) {
    if (kill) ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
}

CandidateOutcome ProfilingWorker::run(const CandidateRequest& q, std::chrono::duration<double> answer_limit) {
  LUMINAL_ASSERT(q.program && q.segment, "profiling worker: a request without its program or segment");
  auto program = serialize_graph(*q.program);
  auto segment = serialize_graph(*q.segment);
  LUMINAL_CHECK(program && segment, "profiling worker: a program with a CustomOp cannot be sent to a worker");
  if (pid_ < 0) start();
  CandidateOutcome out;
  auto lost = [&](std::string why) {
    // What the worker said last (a DeviceLost message) is worth more than how it ended.
    int status = 0;
    if (pid_ > 0 && ::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (WIFSIGNALED(status)) why += " (the worker ended by signal " + std::to_string(WTERMSIG(status)) + ")";
      else if (WIFEXITED(status)) why += " (the worker exited with status " + std::to_string(WEXITSTATUS(status)) + ")";
    }
    stop(true);
    out.status = CandidateOutcome::Status::WorkerLost;
    out.message = std::move(why);
    return out;
  };
  if (!write_all(fd_, encode_request(q, *program, *segment))) return lost("the profiling worker stopped reading");
  bool timed_out = false;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(answer_limit);
  auto answer = read_message(fd_, deadline, &timed_out);
  if (!answer)
    return lost(timed_out ? "the profiling worker did not answer within " + std::to_string(answer_limit.count()) + " s"
                          : "the profiling worker ended without answering");
  Reader r(*answer);
  const auto kind = static_cast<Answer>(r.pod<uint8_t>());
  if (kind != kOk) {
    out.message = r.bytes();
    if (kind == kDeviceLost) return lost(out.message);
    out.status = CandidateOutcome::Status::Error;
    return out;
  }
  out.result.seconds = r.pod<double>();
  out.result.timed_out = r.pod<uint8_t>() != 0;
  out.result.warmup_seconds = r.pod<double>();
  for (auto n = r.pod<uint64_t>(); n > 0; --n) {
    const auto id = static_cast<NodeId>(r.pod<uint64_t>());
    HostTensor t;
    t.dtype = static_cast<DType>(r.pod<uint8_t>());
    t.shape.resize(r.pod<uint64_t>());
    for (int64_t& d : t.shape) d = r.pod<int64_t>();
    const std::string bytes = r.bytes();
    t.bytes.resize(bytes.size());
    std::memcpy(t.bytes.data(), bytes.data(), bytes.size());
    out.outputs.emplace_back(id, std::move(t));
  }
  return out;
}

}  // namespace luminal
