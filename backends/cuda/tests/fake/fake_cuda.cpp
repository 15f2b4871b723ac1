// A stand-in for libcuda.so.1, libnvrtc.so.13 and libcublasLt.so.13 that runs everything
// on the host, so the CUDA runtime's own logic (arena, pointers, dims buffers, operand
// packing, cuBLASLt layouts, graph capture and replay, state updates, errors) is tested on
// machines without a GPU. Test-only: `cuda_runtime_emulated` runs cuda_runtime_test with
// this directory first in LD_LIBRARY_PATH (backends/cuda/CMakeLists.txt).
//
// - Memory is host memory; every call runs synchronously on the calling thread, or is
//   recorded while its stream is being captured and run when the graph is launched.
//   cuGraphExecUpdate takes a capture with the same nodes (count and types) and refuses
//   any other, as CUDA does for a topology change.
// - NVRTC "compiles" to an image holding the source. Loading a module compiles the
//   kernel IR's emitted CUDA as C++ with the system compiler under an emulation of the
//   execution model (a thread per CUDA thread, a barrier per warp for shuffles and one per
//   block for __syncthreads), as tests/kernel/cuda_emulated_test.cpp does. The GEMV and
//   fill families (hand-written CUDA) run as host implementations of their contracts.
// - cuBLASLt computes D = alpha op(A) op(B) + beta C in column-major order from its
//   descriptors, in double, rounding to the dtype once.
// The NVRTC version it reports (99.0) keeps its images out of real caches' keys.
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <algorithm>
#include <cctype>
#include <sstream>
#include <string>
#include <vector>

#include "luminal_cuda/api.hpp"

using namespace luminal::cuda::api;

namespace {

std::recursive_mutex& big_lock() {
  static std::recursive_mutex m;
  return m;
}

// ---- streams, capture, graphs ----
// A captured node's type: cuGraphExecUpdate refuses a graph whose nodes differ in number
// or type from the executable's, as CUDA does (a kernel's function, grid and arguments,
// a copy's or memset's pointers and size may change).
enum class NodeType { Kernel, Memcpy, Memset, Event };
struct Node {
  NodeType type = NodeType::Kernel;
  std::function<void()> run;
};
struct Stream {
  bool capturing = false;
  std::vector<Node> recorded;
};
struct FakeGraph {
  std::vector<Node> nodes;
};

// Fault injection, for the runtime's handling of a faulting kernel:
// LUMINAL_FAKE_CUDA_FAULT_AT_KERNEL=N makes the N-th kernel execution of the process fault
// as an illegal address does on a GPU: that kernel does not run, and from then on every
// call that touches the context returns CUDA_ERROR_ILLEGAL_ADDRESS (the error is sticky).
constexpr CUresult kIllegalAddress = 700;
std::atomic<bool> g_faulted{false};
std::atomic<long> g_kernel_runs{0};
long fault_at_kernel() {
  static const long n = [] {
    const char* v = std::getenv("LUMINAL_FAKE_CUDA_FAULT_AT_KERNEL");
    return v ? std::atol(v) : 0L;
  }();
  return n;
}
// Two refinements, for the compile's profiling worker (luminal/profiling_worker.hpp):
// LUMINAL_FAKE_CUDA_FAULT_IN_WORKER=1 counts only in a profiling worker process
// (LUMINAL_PROFILING_WORKER set), and LUMINAL_FAKE_CUDA_FAULT_ONCE=PATH faults only while
// PATH exists: the process that faults removes it, so one process of many faults, once.
bool fault_applies_here() {
  static const bool here = [] {
    const char* worker_only = std::getenv("LUMINAL_FAKE_CUDA_FAULT_IN_WORKER");
    return !(worker_only && *worker_only == '1') || std::getenv("LUMINAL_PROFILING_WORKER") != nullptr;
  }();
  return here;
}
// Whether this kernel execution is the injected fault (it then must not run).
bool kernel_faults() {
  if (g_faulted.load()) return true;
  const long n = fault_at_kernel();
  if (n > 0 && fault_applies_here() && g_kernel_runs.fetch_add(1) + 1 == n) {
    const char* once = std::getenv("LUMINAL_FAKE_CUDA_FAULT_ONCE");
    if (once && *once && ::unlink(once) != 0) return false;  // another process faulted already
    g_faulted.store(true);
    return true;
  }
  return false;
}
#define FAKE_STICKY() \
  do {                \
    if (g_faulted.load()) return kIllegalAddress; \
  } while (0)

void submit(CUstream s, NodeType type, std::function<void()> op) {
  auto* stream = reinterpret_cast<Stream*>(s);
  if (type == NodeType::Kernel)
    op = [inner = std::move(op)] {
      if (!kernel_faults()) inner();
    };
  if (stream && stream->capturing) stream->recorded.push_back({type, std::move(op)});
  else op();
}

// What the emulation did, for its own log (LUMINAL_FAKE_CUDA_STATS=1 prints it at exit).
struct FakeStats {
  long captures = 0, instantiations = 0, updates = 0;
  ~FakeStats() {
    if (const char* v = std::getenv("LUMINAL_FAKE_CUDA_STATS"); v && std::strcmp(v, "1") == 0)
      std::fprintf(stderr, "fake cuda: %ld captures, %ld instantiations, %ld updates\n", captures, instantiations, updates);
  }
};
FakeStats& fake_stats() {
  static FakeStats stats;
  return stats;
}

void* host(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); }

// ---- dtype helpers ----
enum class Kind { F32, F16, BF16 };
double load(const void* base, int64_t i, Kind k) {
  if (k == Kind::F32) return static_cast<const float*>(base)[i];
  uint16_t bits = static_cast<const uint16_t*>(base)[i];
  if (k == Kind::F16) {
    _Float16 h;
    std::memcpy(&h, &bits, 2);
    return static_cast<double>(h);
  }
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
void store(void* base, int64_t i, double v, Kind k) {
  const float f = static_cast<float>(v);
  if (k == Kind::F32) {
    static_cast<float*>(base)[i] = f;
    return;
  }
  uint16_t bits;
  if (k == Kind::F16) {
    const _Float16 h = static_cast<_Float16>(f);
    std::memcpy(&bits, &h, 2);
  } else {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (std::isnan(f)) bits = 0x7fc0;
    else bits = static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  }
  static_cast<uint16_t*>(base)[i] = bits;
}
Kind kind_of_type_name(const std::string& t) {
  if (t.find("bfloat16") != std::string::npos) return Kind::BF16;
  if (t.find("half") != std::string::npos) return Kind::F16;
  return Kind::F32;
}
Kind kind_of_cuda_type(int t) { return t == CUDA_R_16BF ? Kind::BF16 : t == CUDA_R_16F ? Kind::F16 : Kind::F32; }

// ---- modules and kernels ----
constexpr const char* kImageTag = "LUMINAL-FAKE-CUBIN\n";

// The emulation of the CUDA execution model, prepended to emitted kernels.
constexpr const char* kShim = R"(#include <math.h>
#include <barrier>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static /* blocks run one after another: one copy serves each in turn */
struct lm_dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local lm_dim3 threadIdx, blockIdx;
static lm_dim3 blockDim, gridDim;
static std::barrier<>* lm_block_barrier;
static std::barrier<>** lm_warp_barriers;
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
static inline long long __double_as_longlong(double d) { long long i; std::memcpy(&i, &d, 8); return i; }
static inline int atomicCAS(int* p, int compare, int value) {
  __atomic_compare_exchange_n(p, &compare, value, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;
}
static inline void __syncthreads() { lm_block_barrier->arrive_and_wait(); }
template <class T>
static T __shfl_xor_sync(unsigned, T v, int mask) {
  static T slots[32][32];
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  slots[warp][lane] = v;
  lm_warp_barriers[warp]->arrive_and_wait();
  T r = slots[warp][lane ^ (unsigned)mask];
  lm_warp_barriers[warp]->arrive_and_wait();
  return r;
}
template <class... P, size_t... I>
static void lm_call(void (*f)(P...), void** a, std::index_sequence<I...>) { f(static_cast<P>(a[I])...); }
// mode 0: no barriers (one host thread runs every CUDA thread in turn); 1: warp shuffles
// (a warp's 32 lanes run as threads, warps one after another); 2: __syncthreads (a block's
// threads all run at once).
template <class F>
static void lm_run(F body, unsigned grid, unsigned block, int mode) {
  blockDim.x = block;
  gridDim.x = grid;
  if (mode == 0) {
    for (unsigned b = 0; b < grid; ++b)
      for (unsigned t = 0; t < block; ++t) {
        blockIdx.x = b;
        threadIdx.x = t;
        body();
      }
    return;
  }
  if (mode == 1) {
    std::barrier<> warp_barrier(32);
    std::vector<std::barrier<>*> warp_ptrs(32, &warp_barrier);
    lm_warp_barriers = warp_ptrs.data();
    for (unsigned b = 0; b < grid; ++b)
      for (unsigned w = 0; w * 32 < block; ++w) {
        std::vector<std::thread> lanes;
        for (unsigned l = 0; l < 32; ++l)
          lanes.emplace_back([&, l] {
            blockIdx.x = b;
            threadIdx.x = w * 32 + l;
            body();
          });
        for (auto& th : lanes) th.join();
      }
    return;
  }
  std::barrier<> block_barrier(block);
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<std::barrier<>*> warp_ptrs;
  for (unsigned w = 0; w * 32 < block; ++w) {
    warps.push_back(std::make_unique<std::barrier<>>(block - w * 32 < 32 ? block - w * 32 : 32));
    warp_ptrs.push_back(warps.back().get());
  }
  lm_block_barrier = &block_barrier;
  lm_warp_barriers = warp_ptrs.data();
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < block; ++t)
    threads.emplace_back([&, t] {
      threadIdx.x = t;
      for (unsigned b = 0; b < grid; ++b) {
        blockIdx.x = b;
        body();
        block_barrier.arrive_and_wait();
      }
    });
  for (auto& th : threads) th.join();
}
)";

struct Function {
  enum Kind_ { Emitted, Gemv, GemvGroup, Fill, SmallMatmul, AttentionRows, AttentionFlash, Hold } kind = Emitted;
  void (*launch)(void**, unsigned, unsigned) = nullptr;  // Emitted
  int nargs = 0;                                        // Emitted: every argument is a pointer
  Kind dtype = Kind::F32;                               // Gemv / Fill
  Kind weight_dtype = Kind::F32;                        // Gemv: w's type
  int activation = 0;                                   // Gemv: the epilogue (Activation's values)
};
struct Module {
  void* handle = nullptr;
  std::map<std::string, Function> functions;
};

std::string temp_dir() {
  static const std::string dir = [] {
    std::string d = "/tmp/luminal_fake_cuda_" + std::to_string(getuid());
    std::string cmd = "mkdir -p " + d;
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "fake cuda: cannot make %s\n", d.c_str());
    return d;
  }();
  return dir;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.erase(s.begin());
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

// The comma-separated arguments of every use of `macro(` that is not its #define.
std::vector<std::vector<std::string>> macro_uses(const std::string& source, const std::string& macro) {
  std::vector<std::vector<std::string>> uses;
  for (size_t at = source.find(macro + "("); at != std::string::npos; at = source.find(macro + "(", at + 1)) {
    if (at >= 8 && source.compare(at - 8, 8, "#define ") == 0) continue;
    const size_t close = source.find(')', at);
    std::vector<std::string> args;
    std::string arg;
    for (size_t i = at + macro.size() + 1; i < close; ++i) {
      if (source[i] == ',') args.push_back(trim(arg)), arg.clear();
      else arg += source[i];
    }
    args.push_back(trim(arg));
    uses.push_back(std::move(args));
  }
  return uses;
}

CUresult load_module(Module& m, const std::string& source) {
  // Hand-written families: host implementations of their launch contracts.
  bool hand_written = false;
  for (const char* family :
       {"LUMINAL_GEMV_ENTRY", "LUMINAL_GEMV_GROUP_ENTRY", "LUMINAL_FILL_ENTRY", "LUMINAL_SMALL_MATMUL_ENTRY",
        "LUMINAL_ATTENTION_ROWS_ENTRY", "LUMINAL_ATTENTION_ROWS_CLUSTER_ENTRY", "LUMINAL_ATTENTION_FLASH_ENTRY"})
    for (const auto& args : macro_uses(source, family)) {
      if (args.size() < 2) continue;
      Function f;
      const std::string fam = family;
      f.kind = fam == "LUMINAL_GEMV_ENTRY"         ? Function::Gemv
               : fam == "LUMINAL_GEMV_GROUP_ENTRY" ? Function::GemvGroup
               : fam == "LUMINAL_FILL_ENTRY"       ? Function::Fill
               : fam == "LUMINAL_SMALL_MATMUL_ENTRY" ? Function::SmallMatmul
               : fam == "LUMINAL_ATTENTION_FLASH_ENTRY" ? Function::AttentionFlash
                                                   : Function::AttentionRows;
      f.dtype = kind_of_type_name(args[1]);
      // LUMINAL_GEMV_ENTRY(NAME, T, TW, MMAX, RPW, ACT, UNROLL)
      if (f.kind == Function::Gemv && args.size() > 5) {
        f.weight_dtype = kind_of_type_name(args[2]);
        f.activation = std::atoi(args[5].c_str());
      }
      // LUMINAL_GEMV_GROUP_ENTRY(NAME, T, TW, MMAX, RPW, UNROLL)
      if (f.kind == Function::GemvGroup && args.size() > 2) f.weight_dtype = kind_of_type_name(args[2]);
      m.functions[args[0]] = f;
      hand_written = true;
    }
  for (const auto& args : macro_uses(source, "LUMINAL_HOLD_ENTRY")) {
    Function f;
    f.kind = Function::Hold;  // holding a stream: nothing to emulate
    m.functions[args[0]] = f;
    hand_written = true;
  }
  if (hand_written) return CUDA_SUCCESS;
  if (source.find("#define LUMINAL_") != std::string::npos && source.find("_ENTRY(") != std::string::npos)
    return 500;  // other hand-written kernels: not emulated
  // Emitted kernels: C++ under the shim, one launcher per entry point.
  const std::string marker = "extern \"C\" __global__ void ";
  std::string launchers;
  std::vector<std::pair<std::string, int>> names;
  for (size_t from = source.find(marker); from != std::string::npos; from = source.find(marker, from + 1)) {
    const size_t open = source.find('(', from), close = source.find(')', open);
    const std::string name = trim(source.substr(from + marker.size(), open - from - marker.size()));
    const std::string params = source.substr(open + 1, close - open - 1);
    const int nargs = static_cast<int>(std::count(params.begin(), params.end(), ',')) + 1;
    names.emplace_back(name, nargs);
    // The kernel's body: up to the next entry point. Its barriers decide how it is run.
    const size_t to = source.find(marker, from + 1);
    const std::string body = source.substr(from, to == std::string::npos ? std::string::npos : to - from);
    const int mode = body.find("__syncthreads") != std::string::npos || body.find("lm_block_") != std::string::npos ? 2
                     : body.find("lm_lane") != std::string::npos                                                   ? 1
                                                                                                                   : 0;
    launchers += "extern \"C\" void " + name + "__lm_launch(void** a, unsigned grid, unsigned block) {\n" +
                 "  lm_run([&] { lm_call(" + name + ", a, std::make_index_sequence<" +
                 std::to_string(nargs) + ">{}); }, grid, block, " + std::to_string(mode) + ");\n}\n";
  }
  const std::string unit = std::string(kShim) + source + "\n" + launchers;
  const std::string base = temp_dir() + "/k" + std::to_string(std::hash<std::string>{}(unit));
  if (access((base + ".so").c_str(), R_OK) != 0) {
    std::ofstream(base + ".cpp") << unit;
    const std::string cmd = "c++ -O0 -fPIC -shared -std=c++20 -pthread -ffp-contract=off -w -o " + base + ".tmp.so " +
                            base + ".cpp 2>" + base + ".log && mv " + base + ".tmp.so " + base + ".so";
    if (std::system(cmd.c_str()) != 0) {
      std::fprintf(stderr, "fake cuda: compiling %s.cpp failed (see %s.log)\n", base.c_str(), base.c_str());
      return 218;  // CUDA_ERROR_INVALID_PTX
    }
  }
  m.handle = dlopen((base + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!m.handle) return 218;
  for (auto& [name, nargs] : names) {
    Function f;
    f.launch = reinterpret_cast<void (*)(void**, unsigned, unsigned)>(dlsym(m.handle, (name + "__lm_launch").c_str()));
    f.nargs = nargs;
    if (!f.launch) return 500;
    m.functions[name] = f;
  }
  return CUDA_SUCCESS;
}

// y[m, n] = act(sum_k x[m, k] w[n, k] (+ bias[n])) (+ residual[m, n]), the GEMV contract; w
// is of type `kw`, everything else of `k`; `act` as in gemv.cu (fp32 after the sum).
float host_activate(float v, int act) {
  switch (act) {
    case 1: return std::fmax(v, 0.0f);
    case 2: return v / (1.0f + std::exp(-v));
    case 3: return 0.5f * v * (1.0f + std::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    default: return v;
  }
}
// kernels/small_matmul.cu's contract: sizes and strides read from device memory when it
// runs (not when it is launched); only the blocks launched write; float products, each
// rounded, added in float (an overflowing product is +-inf, as in the kernel).
void host_small_matmul(Kind k, const CUdeviceptr* p, unsigned grid) {
  std::lock_guard lock(big_lock());
  const auto* prm = static_cast<const long long*>(host(p[3]));
  const long long m = prm[0], n = prm[1], depth = prm[2], batch = prm[3];
  const long long tiles = (n + 31) / 32;
  const long long blocks = std::min<long long>(grid, batch * m * tiles);
  for (long long block = 0; block < blocks; ++block) {
    const long long row = block / tiles, j0 = block % tiles * 32, bi = row / m, i = row % m;
    for (long long j = j0; j < std::min(n, j0 + 32); ++j) {
      float acc = 0;
      for (long long t = 0; t < depth; ++t) {
        const float product = static_cast<float>(load(host(p[0]), prm[4] + bi * prm[7] + i * prm[5] + t * prm[6], k)) *
                              static_cast<float>(load(host(p[1]), prm[8] + bi * prm[11] + t * prm[9] + j * prm[10], k));
        acc += product;
      }
      store(host(p[2]), row * n + j, acc, k);
    }
  }
}

// kernels/attention_rows.cu's contract (q, k, v, mask, scale, out, params): per (batch,
// row), the rounded scores times the scale plus the mask, softmax over the keys in F32 (its
// maximum NaN-propagating, exp2 of (s - max) * log2 e), the probabilities rounded to the
// dtype, their product with v rounded; every product rounded before it is added.
// The CudaAttention contract (kernels/attention_rows.cu); a block takes `rows_per_block`
// consecutive rows of one batch: 1 for attention_rows.cu, 64 (kAttentionFlashRows) for attention_flash.cu,
// whose layout limits are checked here (the runtime must never launch it on others).
void host_attention_rows(Kind k, const CUdeviceptr* p, unsigned grid, long long rows_per_block) {
  std::lock_guard lock(big_lock());
  const auto* a = static_cast<const long long*>(host(p[6]));
  const long long batch = a[0], rows = a[1], seq = a[3], keys = a[4], depth = a[5], width = a[6];
  if (rows_per_block > 1 && (depth != width || (depth != 64 && depth != 128) || a[10] != 1 || a[13] != 1 ||
                             a[18] != 1 || k == Kind::F32 || (p[0] | p[1] | p[2]) % 16 != 0)) {
    std::fprintf(stderr, "fake_cuda: flash attention launched on a layout it does not take\n");
    std::abort();
  }
  const auto* mask = static_cast<const float*>(host(p[3]));
  const auto* scale = static_cast<const float*>(host(p[4]));
  auto rounded = [k](float v) {
    uint32_t bits = 0;  // room for one element of any dtype
    store(&bits, 0, v, k);
    return static_cast<float>(load(&bits, 0, k));
  };
  const long long tiles = (rows + rows_per_block - 1) / rows_per_block;
  const long long blocks = std::min<long long>(grid, batch * tiles);
  for (long long row = 0; row < blocks * rows_per_block; ++row) {
    const long long b = row / rows_per_block / tiles, r = row / rows_per_block % tiles * rows_per_block + row % rows_per_block;
    if (r >= rows) continue;
    const long long g = r / seq, i = r % seq;
    std::vector<float> f(static_cast<size_t>(keys));
    float mx = -INFINITY;
    for (long long j = 0; j < keys; ++j) {
      float acc = 0;
      for (long long d = 0; d < depth; ++d)
        acc += static_cast<float>(load(host(p[0]), a[7] + b * a[8] + r * a[9] + d * a[10], k)) *
               static_cast<float>(load(host(p[1]), a[11] + b * a[12] + d * a[13] + j * a[14], k));
      const float sc = scale[a[24] + b * a[25] + g * a[26] + i * a[27] + j * a[28]];
      const float mk = mask[a[19] + b * a[20] + g * a[21] + i * a[22] + j * a[23]];
      f[j] = rounded(acc) * sc + mk;
      mx = (std::isnan(f[j]) || f[j] > mx) ? f[j] : mx;
    }
    const float neg_max = mx * -1.0f, log2e = 1.4426950408889634f;
    float sum = 0;
    std::vector<float> e(static_cast<size_t>(keys));
    for (long long j = 0; j < keys; ++j) sum += e[j] = std::exp2((f[j] + neg_max) * log2e);
    const float inv = 1.0f / sum;
    for (long long d = 0; d < width; ++d) {
      float acc = 0;
      for (long long j = 0; j < keys; ++j)
        acc += rounded(e[j] * inv) * static_cast<float>(load(host(p[2]), a[15] + b * a[16] + j * a[17] + d * a[18], k));
      store(host(p[5]), (b * rows + r) * width + d, acc, k);
    }
  }
}

void host_gemv(Kind k, Kind kw, int act, const CUdeviceptr* p, const int* sizes) {
  const int M = sizes[0], N = sizes[1], K = sizes[2];
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int i = 0; i < K; ++i)
        acc += load(host(p[0]), int64_t(m) * K + i, k) * load(host(p[1]), int64_t(n) * K + i, kw);
      if (p[2]) acc += load(host(p[2]), n, k);
      acc = host_activate(static_cast<float>(acc), act);
      if (p[3]) acc += load(host(p[3]), int64_t(m) * N + n, k);
      store(host(p[4]), int64_t(m) * N + n, acc, k);
    }
}

// ---- cuBLASLt descriptors ----
struct Layout {
  int type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};
struct MatmulDesc {
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
};

}  // namespace

extern "C" {

// ---- driver ----
CUresult cuInit(unsigned) { return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int* v) { *v = 13000; return CUDA_SUCCESS; }
CUresult cuGetErrorName(CUresult r, const char** s) {
  *s = r == kIllegalAddress ? "CUDA_ERROR_ILLEGAL_ADDRESS" : "CUDA_ERROR_FAKE";
  return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult r, const char** s) {
  *s = r == kIllegalAddress ? "an illegal memory access was encountered (injected by the host emulation)"
                            : "an error of the host emulation (fake_cuda)";
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetCount(int* n) { *n = 1; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice* d, int) { *d = 0; return CUDA_SUCCESS; }
CUresult cuDeviceGetName(char* name, int len, CUdevice) {
  std::snprintf(name, static_cast<size_t>(len), "Fake GPU (host emulation)");
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int* v, int attr, CUdevice) {
  *v = attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR   ? 9
       : attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? 0
       : attr == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT     ? 132
       : attr == CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE            ? 60 << 20
                                                              : 232448;
  return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem_v2(size_t* b, CUdevice) { *b = size_t(16) << 30; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice) {
  static int context;
  *c = reinterpret_cast<CUcontext>(&context);
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext) {
  FAKE_STICKY(); return CUDA_SUCCESS; }
CUresult cuCtxSynchronize() {
  FAKE_STICKY(); return CUDA_SUCCESS; }
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  *free_bytes = *total = size_t(16) << 30;
  return CUDA_SUCCESS;
}
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  FAKE_STICKY();
  void* m = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!m) return 2;
  std::memset(m, 0xCD, (bytes + 255) / 256 * 256);  // garbage, as fresh device memory is
  *p = reinterpret_cast<uintptr_t>(m);
  return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  std::free(host(p));
  return CUDA_SUCCESS;
}
// Page-locked host memory is host memory here.
CUresult cuMemAllocHost_v2(void** p, size_t bytes) {
  FAKE_STICKY();
  *p = std::malloc(bytes ? bytes : 1);
  return *p ? CUDA_SUCCESS : 2;
}
CUresult cuMemFreeHost(void* p) {
  std::free(p);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  FAKE_STICKY();
  // Host memory may change after the call: a captured copy would read it at launch, as CUDA
  // does for pageable memory (the runtime never captures one).
  submit(s, NodeType::Memcpy, [=] { std::memcpy(host(dst), src, n); });
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  FAKE_STICKY();
  submit(s, NodeType::Memcpy, [=] { std::memcpy(dst, host(src), n); });
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  FAKE_STICKY();
  submit(s, NodeType::Memcpy, [=] { std::memmove(host(dst), host(src), n); });
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s) {
  FAKE_STICKY();
  submit(s, NodeType::Memset, [=] { std::memset(host(p), v, n); });
  return CUDA_SUCCESS;
}
CUresult cuStreamCreate(CUstream* s, unsigned) {
  FAKE_STICKY();
  *s = reinterpret_cast<CUstream>(new Stream);
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy_v2(CUstream s) {
  delete reinterpret_cast<Stream*>(s);
  return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream s) {
  FAKE_STICKY();
  auto* stream = reinterpret_cast<Stream*>(s);
  return stream && stream->capturing ? 900 : CUDA_SUCCESS;  // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
}
CUresult cuEventCreate(CUevent* e, unsigned) {
  FAKE_STICKY();
  *e = reinterpret_cast<CUevent>(new std::chrono::steady_clock::time_point());
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy_v2(CUevent e) {
  delete reinterpret_cast<std::chrono::steady_clock::time_point*>(e);
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent e, CUstream s) {
  FAKE_STICKY();
  auto* t = reinterpret_cast<std::chrono::steady_clock::time_point*>(e);
  submit(s, NodeType::Event, [t] { *t = std::chrono::steady_clock::now(); });
  return CUDA_SUCCESS;
}
CUresult cuEventSynchronize(CUevent) {
  FAKE_STICKY(); return CUDA_SUCCESS; }
CUresult cuEventElapsedTime_v2(float* ms, CUevent a, CUevent b) {
  FAKE_STICKY();
  *ms = std::chrono::duration<float, std::milli>(*reinterpret_cast<std::chrono::steady_clock::time_point*>(b) -
                                                 *reinterpret_cast<std::chrono::steady_clock::time_point*>(a))
            .count();
  return CUDA_SUCCESS;
}
CUresult cuEventElapsedTime(float* ms, CUevent a, CUevent b) {
  FAKE_STICKY(); return cuEventElapsedTime_v2(ms, a, b); }
CUresult cuModuleLoadData(CUmodule* m, const void* image) {
  FAKE_STICKY();
  std::lock_guard lock(big_lock());
  const char* text = static_cast<const char*>(image);
  const size_t tag = std::strlen(kImageTag);
  if (std::strncmp(text, kImageTag, tag) != 0) return 200;  // CUDA_ERROR_INVALID_IMAGE
  auto module = std::make_unique<Module>();
  CUresult r = load_module(*module, std::string(text + tag));
  if (r != CUDA_SUCCESS) return r;
  *m = reinterpret_cast<CUmodule>(module.release());
  return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule m) {
  auto* module = reinterpret_cast<Module*>(m);
  if (module && module->handle) dlclose(module->handle);
  delete module;
  return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  FAKE_STICKY();
  auto* module = reinterpret_cast<Module*>(m);
  auto it = module->functions.find(name);
  if (it == module->functions.end()) return 500;  // CUDA_ERROR_NOT_FOUND
  *f = reinterpret_cast<CUfunction>(&it->second);
  return CUDA_SUCCESS;
}
CUresult cuFuncSetAttribute(CUfunction, int, int) { return CUDA_SUCCESS; }
CUresult cuLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned, CUstream s, void** params, void**) {
  FAKE_STICKY();
  const Function& f = *reinterpret_cast<const Function*>(fn);
  if (gy != 1 || gz != 1 || by != 1 || bz != 1) {
    if (f.kind == Function::Emitted) return 1;  // emitted kernels are one-dimensional
  }
  // Arguments are copied now, as cuLaunchKernel does.
  if (f.kind == Function::Emitted) {
    std::vector<CUdeviceptr> args(static_cast<size_t>(f.nargs));
    for (int i = 0; i < f.nargs; ++i) std::memcpy(&args[static_cast<size_t>(i)], params[i], sizeof(CUdeviceptr));
    auto launch = f.launch;
    submit(s, NodeType::Kernel, [launch, args, gx, bx]() mutable {
      std::lock_guard lock(big_lock());
      std::vector<void*> a;
      for (auto& p : args) a.push_back(host(p));
      launch(a.data(), gx, bx);
    });
  } else if (f.kind == Function::Gemv) {
    CUdeviceptr p[5];
    int sizes[3];
    for (int i = 0; i < 5; ++i) std::memcpy(&p[i], params[i], sizeof(CUdeviceptr));
    for (int i = 0; i < 3; ++i) std::memcpy(&sizes[i], params[5 + i], sizeof(int));
    const Kind k = f.dtype, kw = f.weight_dtype;
    const int act = f.activation;
    submit(s, NodeType::Kernel, [=] { host_gemv(k, kw, act, p, sizes); });
  } else if (f.kind == Function::GemvGroup) {
    // (x, w0..w3, y0..y3, n0..n3, M, K, ...): member p is the GEMV contract with N = n_p.
    CUdeviceptr x, w[4], y[4];
    int n[4], mk[2];
    std::memcpy(&x, params[0], sizeof(CUdeviceptr));
    for (int i = 0; i < 4; ++i) {
      std::memcpy(&w[i], params[1 + i], sizeof(CUdeviceptr));
      std::memcpy(&y[i], params[5 + i], sizeof(CUdeviceptr));
      std::memcpy(&n[i], params[9 + i], sizeof(int));
    }
    for (int i = 0; i < 2; ++i) std::memcpy(&mk[i], params[13 + i], sizeof(int));
    const Kind k = f.dtype, kw = f.weight_dtype;
    submit(s, NodeType::Kernel, [=] {
      for (int i = 0; i < 4; ++i) {
        if (n[i] == 0) continue;
        const CUdeviceptr p[5] = {x, w[i], 0, 0, y[i]};
        const int sizes[3] = {mk[0], n[i], mk[1]};
        host_gemv(k, kw, 0, p, sizes);
      }
    });
  } else if (f.kind == Function::AttentionRows || f.kind == Function::AttentionFlash) {
    CUdeviceptr p[7];
    for (int i = 0; i < 7; ++i) std::memcpy(&p[i], params[i], sizeof(CUdeviceptr));
    const Kind k = f.dtype;
    const long long rows_per_block = f.kind == Function::AttentionFlash ? 64 : 1;
    submit(s, NodeType::Kernel, [=] { host_attention_rows(k, p, gx, rows_per_block); });
  } else if (f.kind == Function::Hold) {
    submit(s, NodeType::Kernel, [] {});
  } else if (f.kind == Function::SmallMatmul) {
    CUdeviceptr p[4];
    for (int i = 0; i < 4; ++i) std::memcpy(&p[i], params[i], sizeof(CUdeviceptr));
    const Kind k = f.dtype;
    submit(s, NodeType::Kernel, [=] { host_small_matmul(k, p, gx); });
  } else {
    CUdeviceptr out;
    long long n;
    unsigned seed;
    float scale;
    int specials;
    std::memcpy(&out, params[0], 8);
    std::memcpy(&n, params[1], 8);
    std::memcpy(&seed, params[2], 4);
    std::memcpy(&scale, params[3], 4);
    std::memcpy(&specials, params[4], 4);
    const Kind k = f.dtype;
    submit(s, NodeType::Kernel, [=] {
      static const double kSpecial[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-40, -1e-40, 1.0, -1.0, 65504.0, -3.0e38};
      for (long long i = 0; i < n; ++i) {
        uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed * 40503u;
        h ^= h >> 13;
        h *= 0x5bd1e995u;
        h ^= h >> 15;
        const double v = specials != 0 && (h & 7u) == 0 ? kSpecial[(h >> 3) % (specials == 1 ? 11 : 9)]
                                                         : (2.0 * (h / 4294967296.0) - 1.0) * scale;
        store(host(out), i, v, k);
      }
    });
  }
  return CUDA_SUCCESS;
}
CUresult cuStreamBeginCapture_v2(CUstream s, int) {
  FAKE_STICKY();
  auto* stream = reinterpret_cast<Stream*>(s);
  if (!stream || stream->capturing) return 900;
  stream->capturing = true;
  stream->recorded.clear();
  return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture(CUstream s, CUgraph* g) {
  FAKE_STICKY();
  auto* stream = reinterpret_cast<Stream*>(s);
  if (!stream || !stream->capturing) return 901;
  stream->capturing = false;
  *g = reinterpret_cast<CUgraph>(new FakeGraph{std::move(stream->recorded)});
  ++fake_stats().captures;
  stream->recorded.clear();
  return CUDA_SUCCESS;
}
CUresult cuGraphInstantiateWithFlags(CUgraphExec* e, CUgraph g, unsigned long long) {
  FAKE_STICKY();
  *e = reinterpret_cast<CUgraphExec>(new FakeGraph(*reinterpret_cast<FakeGraph*>(g)));
  ++fake_stats().instantiations;
  return CUDA_SUCCESS;
}
CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
  FAKE_STICKY();
  auto* graph = reinterpret_cast<FakeGraph*>(e);
  // The nodes as they are now: an update after this launch must not change what it runs.
  submit(s, NodeType::Kernel, [nodes = graph->nodes] {
    for (auto& node : nodes) node.run();
  });
  return CUDA_SUCCESS;
}
// Refuses (CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) a graph whose node count or node types
// differ; LUMINAL_FAKE_CUDA_GRAPH_UPDATE=0 answers CUDA_ERROR_NOT_SUPPORTED, as a driver
// that cannot update would, so the runtime's fallback is tested.
CUresult cuGraphExecUpdate_v2(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo* info) {
  FAKE_STICKY();
  auto* exec = reinterpret_cast<FakeGraph*>(e);
  const auto* graph = reinterpret_cast<const FakeGraph*>(g);
  if (!exec || !graph || !info) return 1;  // CUDA_ERROR_INVALID_VALUE
  *info = CUgraphExecUpdateResultInfo{};
  if (const char* v = std::getenv("LUMINAL_FAKE_CUDA_GRAPH_UPDATE"); v && std::strcmp(v, "0") == 0) {
    info->result = 1;  // CU_GRAPH_EXEC_UPDATE_ERROR
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (exec->nodes.size() != graph->nodes.size()) {
    info->result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  for (size_t k = 0; k < graph->nodes.size(); ++k)
    if (exec->nodes[k].type != graph->nodes[k].type) {
      info->result = 3;  // CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED
      return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
  exec->nodes = graph->nodes;
  ++fake_stats().updates;
  return CUDA_SUCCESS;
}
CUresult cuGraphExecDestroy(CUgraphExec e) {
  delete reinterpret_cast<FakeGraph*>(e);
  return CUDA_SUCCESS;
}
CUresult cuGraphDestroy(CUgraph g) {
  delete reinterpret_cast<FakeGraph*>(g);
  return CUDA_SUCCESS;
}

// ---- NVRTC ----
struct FakeProgram {
  std::string source;
};
nvrtcResult nvrtcVersion(int* major, int* minor) {
  *major = 99;
  *minor = 0;
  return NVRTC_SUCCESS;
}
const char* nvrtcGetErrorString(nvrtcResult) { return "NVRTC_ERROR_FAKE"; }
nvrtcResult nvrtcCreateProgram(nvrtcProgram* p, const char* src, const char*, int, const char* const*, const char* const*) {
  *p = reinterpret_cast<nvrtcProgram>(new FakeProgram{src});
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcDestroyProgram(nvrtcProgram* p) {
  delete reinterpret_cast<FakeProgram*>(*p);
  *p = nullptr;
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcCompileProgram(nvrtcProgram, int, const char* const*) { return NVRTC_SUCCESS; }
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram, size_t* n) {
  *n = 1;
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetProgramLog(nvrtcProgram, char* log) {
  *log = 0;
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram p, size_t* n) {
  *n = std::strlen(kImageTag) + reinterpret_cast<FakeProgram*>(p)->source.size() + 1;
  return NVRTC_SUCCESS;
}
nvrtcResult nvrtcGetCUBIN(nvrtcProgram p, char* out) {
  const std::string image = std::string(kImageTag) + reinterpret_cast<FakeProgram*>(p)->source;
  std::memcpy(out, image.c_str(), image.size() + 1);
  return NVRTC_SUCCESS;
}

// ---- cuBLASLt ----
size_t cublasLtGetVersion() { return 130000; }
const char* cublasLtGetStatusName(cublasStatus_t) { return "CUBLAS_STATUS_FAKE"; }
const char* cublasLtGetStatusString(cublasStatus_t) { return "an error of the host emulation (fake_cuda)"; }
cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  static int handle;
  *h = reinterpret_cast<cublasLtHandle_t>(&handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, int, int) {
  *d = reinterpret_cast<cublasLtMatmulDesc_t>(new MatmulDesc);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete reinterpret_cast<MatmulDesc*>(d);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, int attr, const void* buf, size_t) {
  auto* desc = reinterpret_cast<MatmulDesc*>(d);
  if (attr == CUBLASLT_MATMUL_DESC_TRANSA) std::memcpy(&desc->transa, buf, 4);
  if (attr == CUBLASLT_MATMUL_DESC_TRANSB) std::memcpy(&desc->transb, buf, 4);
  if (attr == CUBLASLT_MATMUL_DESC_EPILOGUE) std::memcpy(&desc->epilogue, buf, 4);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, int type, uint64_t rows, uint64_t cols, int64_t ld) {
  *l = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{type, rows, cols, ld, 1, 0});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete reinterpret_cast<Layout*>(l);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, int attr, const void* buf, size_t) {
  auto* layout = reinterpret_cast<Layout*>(l);
  if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) std::memcpy(&layout->batch, buf, 4);
  if (attr == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET) std::memcpy(&layout->stride, buf, 8);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  static cublasLtMatmulPreferenceOpaque_t preference;
  *p = &preference;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t, int, const void*, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                              cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                              cublasLtMatmulPreference_t, int requested,
                                              cublasLtMatmulHeuristicResult_t* r, int* found) {
  // Three (identical) candidates, so that the runtime's timing of them runs here too.
  *found = std::min(requested, 3);
  std::memset(r, 0, sizeof(*r) * static_cast<size_t>(*found));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void* alpha_p, const void* a,
                              cublasLtMatrixLayout_t al, const void* b, cublasLtMatrixLayout_t bl, const void* beta_p,
                              const void* c, cublasLtMatrixLayout_t cl, void* out, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t*, void*, size_t, CUstream s) {
  const MatmulDesc desc = *reinterpret_cast<MatmulDesc*>(d);
  const Layout A = *reinterpret_cast<Layout*>(al), B = *reinterpret_cast<Layout*>(bl), C = *reinterpret_cast<Layout*>(cl),
               D = *reinterpret_cast<Layout*>(dl);
  if (desc.epilogue != CUBLASLT_EPILOGUE_DEFAULT) return 15;  // CUBLAS_STATUS_NOT_SUPPORTED: not emulated
  float alpha, beta;
  std::memcpy(&alpha, alpha_p, 4);
  std::memcpy(&beta, beta_p, 4);
  const int64_t m = static_cast<int64_t>(D.rows), n = static_cast<int64_t>(D.cols);
  const int64_t k = static_cast<int64_t>(desc.transa == CUBLAS_OP_N ? A.cols : A.rows);
  const int64_t opb_rows = static_cast<int64_t>(desc.transb == CUBLAS_OP_N ? B.rows : B.cols);
  const int64_t opa_rows = static_cast<int64_t>(desc.transa == CUBLAS_OP_N ? A.rows : A.cols);
  const int64_t opb_cols = static_cast<int64_t>(desc.transb == CUBLAS_OP_N ? B.cols : B.rows);
  if (opa_rows != m || opb_rows != k || opb_cols != n) return 7;  // CUBLAS_STATUS_INVALID_VALUE
  if (A.ld < static_cast<int64_t>(A.rows) || B.ld < static_cast<int64_t>(B.rows) || D.ld < m) return 7;
  submit(s, NodeType::Kernel, [=] {
    for (int32_t batch = 0; batch < D.batch; ++batch) {
      const int64_t ao = batch * A.stride, bo = batch * B.stride, co = batch * C.stride, dout = batch * D.stride;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t p = 0; p < k; ++p) {
            const int64_t ai = desc.transa == CUBLAS_OP_N ? i + p * A.ld : p + i * A.ld;
            const int64_t bi = desc.transb == CUBLAS_OP_N ? p + j * B.ld : j + p * B.ld;
            acc += load(a, ao + ai, kind_of_cuda_type(A.type)) * load(b, bo + bi, kind_of_cuda_type(B.type));
          }
          double v = alpha * acc;
          if (beta != 0) v += beta * load(c, co + i + j * C.ld, kind_of_cuda_type(C.type));
          store(out, dout + i + j * D.ld, v, kind_of_cuda_type(D.type));
        }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
