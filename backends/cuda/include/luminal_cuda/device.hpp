// The device side of the CUDA backend: whether a GPU is usable, its context, streams,
// device memory, copies, events and CUDA graphs. Every failing call throws
// luminal::Error naming the driver call (see api.hpp).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "luminal_cuda/api.hpp"

namespace luminal::cuda {

using StreamHandle = api::CUstream;
using DevicePtr = api::CUdeviceptr;

// Whether this process can run CUDA work, and if not, why:
// "no CUDA driver (libcuda.so.1 not found (...))", "no GPU device", ...
struct Availability {
  bool ok = false;
  std::string message;  // "NVIDIA H200 (sm_90, 132 SMs)" when ok
};
// Checked once per process (cuInit plus a device count); never throws.
const Availability& available();

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int l2_bytes = 0;
  int max_shared_per_block_optin = 0;
  size_t total_memory = 0;
  std::string arch() const { return "sm_" + std::to_string(cc_major) + std::to_string(cc_minor); }
};

// The primary context of one device, made current on the constructing thread.
class Context {
 public:
  explicit Context(int ordinal = 0);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const DeviceInfo& info() const { return info_; }
  void make_current() const;
  void synchronize() const;

 private:
  api::CUdevice device_ = 0;
  api::CUcontext context_ = nullptr;
  DeviceInfo info_;
};

class Stream {
 public:
  Stream();  // a non-blocking stream on the current context
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  StreamHandle get() const { return stream_; }
  void synchronize() const;

 private:
  StreamHandle stream_ = nullptr;
};

// Plain device memory (cuMemAlloc; never managed memory). Move-only.
// Page-locked host memory (cuMemAllocHost): device-to-host copies into it run at the bus's
// speed, with no staging through the driver's own buffers as pageable memory needs.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  DevicePtr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const { return reinterpret_cast<T*>(static_cast<uintptr_t>(ptr_)); }

  // Copies on `stream`; the blocking forms synchronise it before returning.
  void upload(const void* host, size_t bytes, StreamHandle stream, size_t offset = 0);
  void download(void* host, size_t bytes, StreamHandle stream, size_t offset = 0) const;
  void zero(StreamHandle stream);
  template <class T>
  void upload(const std::vector<T>& host, StreamHandle stream) { upload(host.data(), host.size() * sizeof(T), stream); }
  template <class T>
  std::vector<T> download(StreamHandle stream) const {
    std::vector<T> host(bytes_ / sizeof(T));
    download(host.data(), host.size() * sizeof(T), stream);
    return host;
  }

 private:
  void release() noexcept;
  DevicePtr ptr_ = 0;
  size_t bytes_ = 0;
};

void copy_device_to_device(DevicePtr dst, DevicePtr src, size_t bytes, StreamHandle stream);

// Launch `fn` (grid_x x grid_y x grid_z blocks of `block` threads) on `stream`. Where the device is
// sm_90 or newer and the driver has cuLaunchKernelEx, as a programmatic dependent launch:
// its blocks may be scheduled while the previous kernel in the stream finishes, so that a
// decode step's hundreds of short kernels do not each wait out a launch gap. Every kernel
// this backend launches therefore starts with griddepcontrol.wait (LM_GRID_ENTER,
// LK_GRID_ENTER), which holds it until that kernel has completed and its writes are
// visible. LUMINAL_CUDA_PDL=0 launches them one after another instead.
void launch_kernel(api::CUfunction fn, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block,
                   unsigned shared_bytes, StreamHandle stream, void** params);
// Whether launch_kernel launches programmatically (set when a Context is created).
bool dependent_launches();

class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(StreamHandle stream);
  void synchronize() const;
  // Milliseconds between two recorded events (both must have completed).
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  api::CUevent event_ = nullptr;
};

// A stream capture not yet instantiated: the template an executable graph is made from
// (GraphExec) or updated with (GraphExec::update). Capturing records launches without
// running them, which costs far less than instantiating.
class CapturedGraph {
 public:
  CapturedGraph(StreamHandle stream, const std::function<void()>& enqueue);
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  api::CUgraph get() const { return graph_; }
  // What it launches, in order (note_launch): each kernel's function, each library call's plan.
  const std::vector<const void*>& launches() const { return launches_; }

 private:
  api::CUgraph graph_ = nullptr;
  std::vector<const void*> launches_;
};

// Called by every launch this backend makes (launch_kernel: the function; a cuBLASLt call:
// its plan): while a CapturedGraph records, appends `what` to its launches.
void note_launch(const void* what);

// An executable graph. update() re-points it at another capture of the same shape (same
// nodes in the same order, other grids, arguments, sizes), far cheaper than instantiating.
class GraphExec {
 public:
  explicit GraphExec(const CapturedGraph& graph);
  ~GraphExec();
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  void launch(StreamHandle stream) const;
  // cuGraphExecUpdate: true when this executable now runs `graph`'s parameters. False,
  // with `why` ("topology changed", "the driver has no cuGraphExecUpdate", the failing
  // status's name), when the update is refused (a node added, removed or of another type;
  // an unsupported change) or fails: the executable must then be instantiated again from
  // `graph` (which throws, naming the call, if the context itself is broken).
  bool update(const CapturedGraph& graph, std::string* why = nullptr);
  // Whether `graph` launches the same kernels and library plans, in the same order, as
  // this executable runs now: the only updates this backend asks for. The driver also
  // accepts an update that swaps a kernel's function, but on an H100 (CUDA 13) such
  // updates between cuBLASLt algorithms, or between cuBLASLt and our GEMV, ran wrong
  // results (docs/LESSONS.md); an update now only re-points arguments, grids and sizes.
  bool launches_same_as(const CapturedGraph& graph) const { return graph.launches() == launches_; }

 private:
  api::CUgraphExec exec_ = nullptr;
  std::vector<const void*> launches_;  // those of the capture it runs
};

// Work captured once from a stream (kernels and cuBLASLt calls alike) and replayed: a
// capture with its executable. Runs `enqueue` while `stream` is being captured;
// nothing executes until launch().
class Graph {
 public:
  Graph(StreamHandle stream, const std::function<void()>& enqueue);
  void launch(StreamHandle stream) const { exec_.launch(stream); }

 private:
  CapturedGraph captured_;
  GraphExec exec_;
};

// Whether the driver offers cuGraphExecUpdate (CUDA 12 drivers do).
bool graph_update_available();

// Time `enqueue` with events: `warmup` untimed runs, then `repetitions` timed runs of
// `enqueue` back to back (or of one graph holding them when `use_graph`); returns the
// median milliseconds per call over `samples` such timings.
double time_ms(StreamHandle stream, const std::function<void()>& enqueue, int repetitions,
               int samples = 5, bool use_graph = true, int warmup = 2);

// Device-to-device copy bandwidth in bytes per second (bytes read plus bytes written), of
// 1 GiB copies: the denominator of every benchmark's bandwidth floor.
double copy_bandwidth(StreamHandle stream);

}  // namespace luminal::cuda
