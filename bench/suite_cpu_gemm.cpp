// scripts/bench cpu: our GEMM/GEMV against OpenBLAS called directly, same thread count.
// The machine is shared and noisy, so repetitions alternate ours/OpenBLAS (first one,
// then the other, swapping each round) and each side reports its median.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "luminal/cpu/blas_gemm.hpp"
#include "luminal/cpu/gemm.hpp"
#include "luminal/cpu/thread_pool.hpp"

using namespace luminal;
using namespace luminal::cpu;

namespace {

// LUMINAL_BENCH_CPU_TIME=1 (with LUMINAL_NUM_THREADS=1): time by the calling thread's
// CPU time, which leaves out the time it sat descheduled: stable to ~2% on a shared
// machine where wall time varies 2x. With more threads it would miss the workers' work,
// so it is refused there.
bool cpu_clock() {
  static const bool on = [] {
    const char* env = std::getenv("LUMINAL_BENCH_CPU_TIME");
    return env != nullptr && std::string(env) == "1";
  }();
  return on;
}

double seconds(const std::function<void()>& fn) {
  if (cpu_clock()) {
    timespec start{}, stop{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
    fn();
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &stop);
    return static_cast<double>(stop.tv_sec - start.tv_sec) + 1e-9 * static_cast<double>(stop.tv_nsec - start.tv_nsec);
  }
  const auto t = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

struct Timing {
  double ours, peer;
};

Timing interleaved(int reps, const std::function<void()>& ours, const std::function<void()>& peer) {
  ours();
  peer();  // warm caches, page in buffers, start threads
  std::vector<double> t_ours, t_peer;
  for (int r = 0; r < reps; ++r) {
    if (r % 2 == 0) {
      t_ours.push_back(seconds(ours));
      t_peer.push_back(seconds(peer));
    } else {
      t_peer.push_back(seconds(peer));
      t_ours.push_back(seconds(ours));
    }
  }
  return {median(t_ours), median(t_peer)};
}

void emit(const std::string& name, double ours, double peer, const std::string& unit, const std::string& better,
          double target, double ratio, const std::string& extra) {
  std::printf(
      "{\"suite\":\"cpu\",\"case\":\"%s\",\"value\":%.4g,\"unit\":\"%s\",\"better\":\"%s\",\"target\":%.3g,"
      "\"peers\":{\"openblas\":%.4g},\"ratio_vs_best_peer\":%.3f,\"threads\":%d,\"isa\":\"%s\","
      "\"clock\":\"%s\"%s}\n",
      name.c_str(), ours, unit.c_str(), better.c_str(), target, peer, ratio, ThreadPool::global().num_threads(),
      std::string(isa_name(active_isa())).c_str(), cpu_clock() ? "thread_cpu" : "wall", extra.c_str());
  std::fflush(stdout);
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = uni(rng);
  return v;
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// C = A @ B, 1024^3, row-major; `trans_b` stores B as W[n, k] (a Linear weight).
void sgemm_case(int64_t size, bool trans_b, int reps) {
  const int64_t m = size, n = size, k = size;
  const std::vector<float> a = random_floats(static_cast<size_t>(m * k), 1);
  const std::vector<float> b = random_floats(static_cast<size_t>(k * n), 2);
  std::vector<float> c_ours(static_cast<size_t>(m * n)), c_blas(static_cast<size_t>(m * n));
  GemmArgs g = GemmArgs::row_major(m, n, k, a.data(), b.data(), c_ours.data());
  if (trans_b) g.b_row_stride = 1, g.b_col_stride = k;
  const Timing t = interleaved(
      reps, [&] { gemm(g); },
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
                    static_cast<int>(n), static_cast<int>(k), 1.f, a.data(), static_cast<int>(k), b.data(),
                    static_cast<int>(trans_b ? k : n), 0.f, c_blas.data(), static_cast<int>(n));
      });
  double max_diff = 0;
  for (size_t i = 0; i < c_ours.size(); ++i) max_diff = std::max(max_diff, double(std::fabs(c_ours[i] - c_blas[i])));
  const double gflop = 2.0 * static_cast<double>(m * n * k) * 1e-9;
  char extra[96];
  std::snprintf(extra, sizeof extra, ",\"ms\":%.3f,\"openblas_ms\":%.3f,\"max_abs_diff\":%.2g", t.ours * 1e3,
                t.peer * 1e3, max_diff);
  emit("sgemm_" + std::to_string(size) + (trans_b ? "_bt" : ""), gflop / t.ours, gflop / t.peer, "GFLOP/s", "higher",
       0.9, t.peer / t.ours, extra);
}

// y = W x with W[n, k] row-major (a Linear weight, decode): ours reads W in its dtype;
// OpenBLAS runs sgemv on an F32 W (what it would need for a BF16 model).
void gemv_case(int64_t n, int64_t k, DType w_dtype, int reps) {
  const std::vector<float> x = random_floats(static_cast<size_t>(k), 3);
  const std::vector<float> w = random_floats(static_cast<size_t>(n * k), 4);
  std::vector<uint16_t> w_bf16;
  if (w_dtype == DType::BF16) {
    w_bf16.resize(w.size());
    for (size_t i = 0; i < w.size(); ++i) w_bf16[i] = to_bf16(w[i]);
  }
  std::vector<float> y_ours(static_cast<size_t>(n)), y_blas(static_cast<size_t>(n));
  GemmArgs g = GemmArgs::row_major(1, n, k, x.data(), nullptr, y_ours.data(), w_dtype);
  g.b = w_dtype == DType::BF16 ? static_cast<const void*>(w_bf16.data()) : w.data();
  g.b_row_stride = 1, g.b_col_stride = k;
  const Timing t = interleaved(
      reps, [&] { gemm(g); },
      [&] {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(n), static_cast<int>(k), 1.f, w.data(),
                    static_cast<int>(k), x.data(), 1, 0.f, y_blas.data(), 1);
      });
  const double our_bytes = static_cast<double>(n * k) * static_cast<double>(dtype_bytes(w_dtype));
  const double blas_bytes = static_cast<double>(n * k) * 4.0;
  char extra[96];
  std::snprintf(extra, sizeof extra, ",\"ms\":%.3f,\"openblas_ms\":%.3f", t.ours * 1e3, t.peer * 1e3);
  emit("gemv_" + std::to_string(n) + "x" + std::to_string(k) + "_" + std::string(dtype_name(w_dtype)) + "_vs_sgemv",
       our_bytes / t.ours * 1e-9, blas_bytes / t.peer * 1e-9, "GB/s", "higher", 0.9, t.peer / t.ours, extra);
}

// A prefill's product with a BF16 Linear weight W[n, k] packed once (a persisted weight):
// ours keeps half panels, widened in the micro-kernel; OpenBLAS has no BF16 SGEMM, so it
// runs on an F32 copy of W (twice the weight's bytes, which is what our F32 panels cost
// too before session 25: f32_panels_ms times that layout, the same values packed as F32).
void packed_bf16_case(int64_t m, int64_t n, int64_t k, int reps) {
  const std::vector<float> a = random_floats(static_cast<size_t>(m * k), 5);
  std::vector<float> w = random_floats(static_cast<size_t>(n * k), 6);
  std::vector<uint16_t> w_bf16(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    w_bf16[i] = to_bf16(w[i]);
    const uint32_t bits = uint32_t{w_bf16[i]} << 16;
    std::memcpy(&w[i], &bits, 4);  // the F32 copy holds the same values
  }
  std::vector<float> c_ours(static_cast<size_t>(m * n)), c_f32(c_ours.size()), c_blas(c_ours.size());
  GemmArgs g = GemmArgs::row_major(m, n, k, a.data(), w_bf16.data(), c_ours.data(), DType::BF16);
  g.b_row_stride = 1, g.b_col_stride = k;
  GemmArgs g32 = g;
  g32.b = w.data(), g32.b_dtype = DType::F32, g32.c = c_f32.data();
  const PackedB half = pack_b(g), f32 = pack_b(g32);
  g.packed_b = &half;
  g32.packed_b = &f32;
  const Timing t = interleaved(
      reps, [&] { gemm(g); },
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                    static_cast<int>(k), 1.f, a.data(), static_cast<int>(k), w.data(), static_cast<int>(k), 0.f,
                    c_blas.data(), static_cast<int>(n));
      });
  const Timing layouts = interleaved(reps, [&] { gemm(g); }, [&] { gemm(g32); });
  double max_diff = 0;
  for (size_t i = 0; i < c_ours.size(); ++i)
    max_diff = std::max({max_diff, double(std::fabs(c_ours[i] - c_blas[i])), double(std::fabs(c_ours[i] - c_f32[i]))});
  const double gflop = 2.0 * static_cast<double>(m * n * k) * 1e-9;
  char extra[224];
  std::snprintf(extra, sizeof extra,
                ",\"ms\":%.3f,\"openblas_ms\":%.3f,\"f32_panels_ms\":%.3f,\"half_panels_ms\":%.3f,"
                "\"packed_mb\":%.1f,\"f32_packed_mb\":%.1f,\"max_abs_diff\":%.2g,\"panels\":\"%s\"",
                t.ours * 1e3, t.peer * 1e3, layouts.peer * 1e3, layouts.ours * 1e3, half.bytes() / 1048576.0,
                f32.bytes() / 1048576.0, max_diff, std::string(dtype_name(half.dtype)).c_str());
  emit("gemm_packed_bf16_" + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k), gflop / t.ours,
       gflop / t.peer, "GFLOP/s", "higher", 0.9, t.peer / t.ours, extra);
}

// Sibling products of one A (a Llama block's q, k and v projections, or its gate and up, at
// a 128-token prompt; F32 Linear weights packed once): gemm_group (A packed once, one
// parallel region) against the same products as separate gemm() calls.
void sibling_group_case(const std::string& name, int64_t m, int64_t k, const std::vector<int64_t>& widths, int reps) {
  const std::vector<float> a = random_floats(static_cast<size_t>(m * k), 7);
  std::vector<std::vector<float>> w, c_group, c_alone;
  std::vector<PackedB> packed;
  std::vector<GemmArgs> group, alone;
  for (size_t i = 0; i < widths.size(); ++i) {
    w.push_back(random_floats(static_cast<size_t>(widths[i] * k), 8 + static_cast<uint32_t>(i)));
    c_group.emplace_back(static_cast<size_t>(m * widths[i]));
    c_alone.emplace_back(static_cast<size_t>(m * widths[i]));
  }
  for (size_t i = 0; i < widths.size(); ++i) {
    GemmArgs g = GemmArgs::row_major(m, widths[i], k, a.data(), w[i].data(), c_group[i].data());
    g.b_row_stride = 1, g.b_col_stride = k;
    packed.push_back(pack_b(g));
  }
  for (size_t i = 0; i < widths.size(); ++i) {
    GemmArgs g = GemmArgs::row_major(m, widths[i], k, a.data(), w[i].data(), c_group[i].data());
    g.b_row_stride = 1, g.b_col_stride = k;
    g.packed_b = &packed[i];
    group.push_back(g);
    g.c = c_alone[i].data();
    alone.push_back(g);
  }
  const Timing t = interleaved(reps, [&] { gemm_group(group); }, [&] {
    for (const GemmArgs& g : alone) gemm(g);
  });
  bool same = true;
  for (size_t i = 0; i < widths.size(); ++i) same = same && c_group[i] == c_alone[i];
  double flop = 0;
  for (int64_t n : widths) flop += 2.0 * static_cast<double>(m * n * k);
  char extra[160];
  std::snprintf(extra, sizeof extra, ",\"ms\":%.3f,\"separate_ms\":%.3f,\"bitwise_equal\":%s", t.ours * 1e3,
                t.peer * 1e3, same ? "true" : "false");
  std::printf(
      "{\"suite\":\"cpu\",\"case\":\"%s\",\"value\":%.4g,\"unit\":\"GFLOP/s\",\"better\":\"higher\","
      "\"ratio_vs_separate_calls\":%.3f,\"threads\":%d,\"isa\":\"%s\",\"clock\":\"%s\"%s}\n",
      name.c_str(), flop * 1e-9 / t.ours, t.peer / t.ours, ThreadPool::global().num_threads(),
      std::string(isa_name(active_isa())).c_str(), cpu_clock() ? "thread_cpu" : "wall", extra);
  std::fflush(stdout);
}

}  // namespace

int main(int, char** argv) {
  // OpenBLAS's idle threads spin for ~0.1 s after each call (its THREAD_TIMEOUT, read when
  // the library loads) on the cores the next timed run uses: interleaved with it, our GEMM
  // ran at half speed (157 against 281 GFLOP/s on 2 cores). Letting them sleep at once
  // leaves OpenBLAS's own time as it was (312-320 GFLOP/s either way), so the process
  // starts again with OPENBLAS_THREAD_TIMEOUT at its minimum unless it is set.
  if (std::getenv("OPENBLAS_THREAD_TIMEOUT") == nullptr) {
    setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: measure as we are
  }
  if (cpu_clock() && ThreadPool::global().num_threads() != 1) {
    std::fprintf(stderr, "suite_cpu_gemm: LUMINAL_BENCH_CPU_TIME=1 needs LUMINAL_NUM_THREADS=1\n");
    return 2;
  }
  // The peer is OpenBLAS as users call it: its own threads, as many as the pool's.
  openblas_set_num_threads(ThreadPool::global().num_threads());
  // An argument keeps the cases whose names start with it (`suite_cpu_gemm gemv`).
  const std::string only = argv[1] ? argv[1] : "";
  auto wanted = [&](const char* name) { return std::strncmp(name, only.c_str(), only.size()) == 0; };
  if (wanted("sgemm_1024")) sgemm_case(1024, false, 21);
  if (wanted("sgemm_1024_bt")) sgemm_case(1024, true, 11);
  if (wanted("gemv_4096x4096_F32_vs_sgemv")) gemv_case(4096, 4096, DType::F32, 31);
  if (wanted("gemv_4096x4096_BF16_vs_sgemv")) gemv_case(4096, 4096, DType::BF16, 31);
  // the Llama block's gate/up shape at a 128-token prompt
  if (wanted("gemm_packed_bf16_128x2816x1024")) packed_bf16_case(128, 2816, 1024, 21);
  auto group = [&](const char* name, const std::vector<int64_t>& widths, int reps) {
    if (wanted(name)) sibling_group_case(name, 128, 1024, widths, reps);
  };
  group("gemm_group_qkv_128x1024", {1024, 256, 256}, 41);
  group("gemm_group_gate_up_128x1024", {2816, 2816}, 21);
  return 0;
}
