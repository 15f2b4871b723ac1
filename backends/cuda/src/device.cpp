#include "luminal_cuda/device.hpp"

#include <atomic>
#include <cstdlib>
#include <string_view>

#include <algorithm>
#include <exception>
#include <iterator>
#include <string>
#include <utility>

#include "luminal/error.hpp"

namespace luminal::cuda {

namespace {
// launch_kernel's mode, set by the Context (one device per process).
std::atomic<bool> g_dependent_launches{false};
}  // namespace

namespace {
Availability probe() {
  const api::DriverTable& table = api::driver_table();
  if (!table.error.empty()) return {false, table.error};
  const api::CUresult init = table.cuInit(0);
  if (init == api::CUDA_ERROR_NO_DEVICE) return {false, "no GPU device (cuInit: CUDA_ERROR_NO_DEVICE)"};
  if (init != api::CUDA_SUCCESS) {
    try {
      api::check(init, "cuInit");
    } catch (const Error& e) {
      return {false, std::string("CUDA driver present but unusable: ") + e.what()};
    }
  }
  int count = 0;
  if (table.cuDeviceGetCount(&count) != api::CUDA_SUCCESS || count == 0) return {false, "no GPU device"};
  try {
    api::CUdevice dev = 0;
    LUMINAL_CU(cuDeviceGet, &dev, 0);
    char name[256] = {};
    LUMINAL_CU(cuDeviceGetName, name, static_cast<int>(sizeof(name) - 1), dev);
    int major = 0, minor = 0, sms = 0;
    LUMINAL_CU(cuDeviceGetAttribute, &major, api::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    LUMINAL_CU(cuDeviceGetAttribute, &minor, api::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    LUMINAL_CU(cuDeviceGetAttribute, &sms, api::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    return {true, detail::concat(name, " (sm_", major, minor, ", ", sms, " SMs, ", count, " device",
                                 count == 1 ? "" : "s", ")")};
  } catch (const Error& e) {
    return {false, e.what()};
  }
}
}  // namespace

const Availability& available() {
  static const Availability status = probe();
  return status;
}

Context::Context(int ordinal) {
  const Availability& status = available();
  LUMINAL_CHECK(status.ok, "CUDA backend unavailable: ", status.message);
  int count = 0;
  LUMINAL_CU(cuDeviceGetCount, &count);
  LUMINAL_CHECK(ordinal >= 0 && ordinal < count, "CUDA device ", ordinal, " does not exist (", count, " present)");
  LUMINAL_CU(cuDeviceGet, &device_, ordinal);
  LUMINAL_CU(cuDevicePrimaryCtxRetain, &context_, device_);
  LUMINAL_CU(cuCtxSetCurrent, context_);
  info_.ordinal = ordinal;
  char name[256] = {};
  LUMINAL_CU(cuDeviceGetName, name, static_cast<int>(sizeof(name) - 1), device_);
  info_.name = name;
  LUMINAL_CU(cuDeviceGetAttribute, &info_.cc_major, api::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_);
  LUMINAL_CU(cuDeviceGetAttribute, &info_.cc_minor, api::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_);
  LUMINAL_CU(cuDeviceGetAttribute, &info_.sm_count, api::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_);
  LUMINAL_CU(cuDeviceGetAttribute, &info_.l2_bytes, api::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device_);
  LUMINAL_CU(cuDeviceGetAttribute, &info_.max_shared_per_block_optin,
             api::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device_);
  LUMINAL_CU(cuDeviceTotalMem, &info_.total_memory, device_);
  const char* pdl = std::getenv("LUMINAL_CUDA_PDL");
  // Profiling times each launch with events; a dependent launch starts before its
  // predecessor ends, so its time would include the predecessor's tail.
  const char* profile = std::getenv("LUMINAL_CUDA_PROFILE");
  const bool pdl_off = (pdl && std::string_view(pdl) == "0") || (profile && *profile && std::string_view(profile) != "0");
  g_dependent_launches = info_.cc_major >= 9 && api::driver_table().cuLaunchKernelEx != nullptr && !pdl_off;
}

Context::~Context() {
  if (context_) api::driver_table().cuDevicePrimaryCtxRelease(device_);
}

void Context::make_current() const {
  api::throw_if_device_lost();  // the first fault, not a later symptom of it
  LUMINAL_CU(cuCtxSetCurrent, context_);
}
void Context::synchronize() const { LUMINAL_CU(cuCtxSynchronize); }

Stream::Stream() { LUMINAL_CU(cuStreamCreate, &stream_, api::CU_STREAM_NON_BLOCKING); }
Stream::~Stream() {
  if (stream_) api::driver_table().cuStreamDestroy(stream_);
}
void Stream::synchronize() const { LUMINAL_CU(cuStreamSynchronize, stream_); }

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) LUMINAL_CU(cuMemAllocHost, &data_, bytes);
}
PinnedBuffer::~PinnedBuffer() {
  if (data_) api::driver_table().cuMemFreeHost(data_);
}
PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) api::driver_table().cuMemFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  // A zero-byte buffer is legal and has a null pointer.
  if (bytes > 0) LUMINAL_CU(cuMemAlloc, &ptr_, bytes);
}
DeviceBuffer::~DeviceBuffer() { release(); }
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}
void DeviceBuffer::release() noexcept {
  if (ptr_) api::driver_table().cuMemFree(ptr_);
  ptr_ = 0;
  bytes_ = 0;
}

void DeviceBuffer::upload(const void* host, size_t bytes, StreamHandle stream, size_t offset) {
  LUMINAL_CHECK(offset + bytes <= bytes_, "upload of ", bytes, " bytes at offset ", offset,
                " overflows a device buffer of ", bytes_, " bytes");
  if (bytes == 0) return;
  LUMINAL_CU(cuMemcpyHtoDAsync, ptr_ + offset, host, bytes, stream);
  LUMINAL_CU(cuStreamSynchronize, stream);
}
void DeviceBuffer::download(void* host, size_t bytes, StreamHandle stream, size_t offset) const {
  LUMINAL_CHECK(offset + bytes <= bytes_, "download of ", bytes, " bytes at offset ", offset,
                " overflows a device buffer of ", bytes_, " bytes");
  if (bytes == 0) return;
  LUMINAL_CU(cuMemcpyDtoHAsync, host, ptr_ + offset, bytes, stream);
  LUMINAL_CU(cuStreamSynchronize, stream);
}
void DeviceBuffer::zero(StreamHandle stream) {
  if (bytes_ > 0) LUMINAL_CU(cuMemsetD8Async, ptr_, 0, bytes_, stream);
}

void copy_device_to_device(DevicePtr dst, DevicePtr src, size_t bytes, StreamHandle stream) {
  if (bytes > 0) LUMINAL_CU(cuMemcpyDtoDAsync, dst, src, bytes, stream);
}

bool dependent_launches() { return g_dependent_launches.load(std::memory_order_relaxed); }

void launch_kernel(api::CUfunction fn, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block,
                   unsigned shared_bytes, StreamHandle stream, void** params) {
  note_launch(fn);
  if (dependent_launches()) {
    api::CUlaunchAttribute attr;
    attr.id = api::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    api::CUlaunchConfig config;
    config.gridDimX = grid_x;
    config.gridDimY = grid_y;
    config.gridDimZ = grid_z;
    config.blockDimX = block;
    config.sharedMemBytes = shared_bytes;
    config.hStream = stream;
    config.attrs = &attr;
    config.numAttrs = 1;
    LUMINAL_CU(cuLaunchKernelEx, &config, fn, params, nullptr);
    return;
  }
  LUMINAL_CU(cuLaunchKernel, fn, grid_x, grid_y, grid_z, block, 1u, 1u, shared_bytes, stream, params, nullptr);
}

Event::Event() { LUMINAL_CU(cuEventCreate, &event_, api::CU_EVENT_DEFAULT); }
Event::~Event() {
  if (event_) api::driver_table().cuEventDestroy(event_);
}
void Event::record(StreamHandle stream) { LUMINAL_CU(cuEventRecord, event_, stream); }
void Event::synchronize() const { LUMINAL_CU(cuEventSynchronize, event_); }
float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0;
  LUMINAL_CU(cuEventElapsedTime, &ms, start.event_, end.event_);
  return ms;
}

namespace {
thread_local std::vector<const void*>* recording_launches = nullptr;  // the capture under way
}  // namespace

void note_launch(const void* what) {
  if (recording_launches) recording_launches->push_back(what);
}

CapturedGraph::CapturedGraph(StreamHandle stream, const std::function<void()>& enqueue) {
  LUMINAL_CU(cuStreamBeginCapture, stream, api::CU_STREAM_CAPTURE_MODE_RELAXED);
  struct Record {
    std::vector<const void*>* before;
    explicit Record(std::vector<const void*>* into) : before(recording_launches) { recording_launches = into; }
    ~Record() { recording_launches = before; }
  };
  try {
    Record record(&launches_);
    enqueue();
  } catch (...) {
    api::CUgraph broken = nullptr;
    api::driver_table().cuStreamEndCapture(stream, &broken);
    if (broken) api::driver_table().cuGraphDestroy(broken);
    throw;
  }
  LUMINAL_CU(cuStreamEndCapture, stream, &graph_);
  LUMINAL_CHECK(graph_ != nullptr, "cuStreamEndCapture returned no graph");
}
CapturedGraph::~CapturedGraph() {
  if (graph_) api::driver_table().cuGraphDestroy(graph_);
}

GraphExec::GraphExec(const CapturedGraph& graph) : launches_(graph.launches()) {
  LUMINAL_CU(cuGraphInstantiateWithFlags, &exec_, graph.get(), 0ull);
}
GraphExec::~GraphExec() {
  if (exec_) api::driver_table().cuGraphExecDestroy(exec_);
}
void GraphExec::launch(StreamHandle stream) const { LUMINAL_CU(cuGraphLaunch, exec_, stream); }

Graph::Graph(StreamHandle stream, const std::function<void()>& enqueue) : captured_(stream, enqueue), exec_(captured_) {}

bool graph_update_available() { return api::driver().cuGraphExecUpdate != nullptr; }

bool GraphExec::update(const CapturedGraph& graph, std::string* why) {
  const auto& driver = api::driver();
  if (!driver.cuGraphExecUpdate) {
    if (why) *why = "the driver has no cuGraphExecUpdate";
    return false;
  }
  api::CUgraphExecUpdateResultInfo info;
  const api::CUresult r = driver.cuGraphExecUpdate(exec_, graph.get(), &info);
  if (r == api::CUDA_SUCCESS && info.result == api::CU_GRAPH_EXEC_UPDATE_SUCCESS) {
    launches_ = graph.launches();
    return true;
  }
  if (!why) return false;
  static const char* const reasons[] = {"success",          "error",           "topology changed",
                                        "node type changed", "function changed", "parameters changed",
                                        "not supported",     "unsupported function change",
                                        "attributes changed"};
  const bool known = info.result >= 0 && info.result < static_cast<int>(std::size(reasons));
  const std::string reason = known ? reasons[info.result] : "update result " + std::to_string(info.result);
  if (r == api::CUDA_SUCCESS || r == api::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) {
    *why = reason;
  } else {
    // Any other status (CUDA_ERROR_NOT_SUPPORTED, ...) is answered by instantiating, which
    // throws in turn if the context itself is broken; the message names the status.
    try {
      api::check(r, "cuGraphExecUpdate");
    } catch (const Error& e) {
      *why = std::string(e.what()) + " (" + reason + ")";
    }
  }
  return false;
}

double time_ms(StreamHandle stream, const std::function<void()>& enqueue, int repetitions, int samples,
               bool use_graph, int warmup) {
  LUMINAL_CHECK(repetitions > 0 && samples > 0, "time_ms: repetitions and samples must be positive");
  auto run_all = [&] {
    for (int i = 0; i < repetitions; ++i) enqueue();
  };
  std::vector<double> times;
  Event start, end;
  if (use_graph) {
    Graph graph(stream, run_all);
    for (int i = 0; i < warmup; ++i) graph.launch(stream);
    for (int s = 0; s < samples; ++s) {
      start.record(stream);
      graph.launch(stream);
      end.record(stream);
      end.synchronize();
      times.push_back(Event::elapsed_ms(start, end) / repetitions);
    }
  } else {
    for (int i = 0; i < warmup; ++i) run_all();
    for (int s = 0; s < samples; ++s) {
      start.record(stream);
      run_all();
      end.record(stream);
      end.synchronize();
      times.push_back(Event::elapsed_ms(start, end) / repetitions);
    }
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

double copy_bandwidth(StreamHandle stream) {
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer src(bytes), dst(bytes);
  src.zero(stream);  // touched first, so no timed copy pays for mapping pages
  const double ms =
      time_ms(stream, [&] { copy_device_to_device(dst.ptr(), src.ptr(), bytes, stream); }, 10, 5, /*use_graph=*/false);
  return 2.0 * double(bytes) / (ms * 1e-3);
}

}  // namespace luminal::cuda
