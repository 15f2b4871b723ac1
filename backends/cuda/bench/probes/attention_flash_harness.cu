// Probe harness (scripts/gpu, GPU_PROBE=1, run by attention_flash.sh): the prefill attention
// kernel (attention_flash.cu, or the file given as -DFLASH_FILE) alone on Llama-3-8B's
// 512-token prompt (8 kv heads x 4 query heads x 512 rows, 512 keys, head dim 128, BF16, a
// causal mask of -inf or -1e9, a scalar scale), timed with CUDA events over 50 launches. Its
// output is written to a file, or compared with one (the largest difference relative to
// 1 + |x|), so that an edit of the kernel is checked against the kernel before it.
//   nvcc -O3 -arch=sm_90 -std=c++17 -I backends/cuda/kernels -o h attention_flash_harness.cu
//   ./h VARIANT inf|finite [KV_HEADS GROUP SEQ] (save FILE | compare FILE)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common.cuh"
#ifdef FLASH_FILE
#include FLASH_FILE
#else
#include "attention_flash.cu"
#endif

LUMINAL_ATTENTION_FLASH_ENTRY(probe_flash, __nv_bfloat16, 128)

#include "probe_util.cuh"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::printf("usage: %s VARIANT inf|finite [KV GROUP SEQ] save|compare FILE\n", argv[0]);
    return 2;
  }
  const char* variant = argv[1];
  const bool infinite = std::strcmp(argv[2], "inf") == 0;
  long long kv = 8, group = 4, seq = 512;
  int arg = 3;
  if (argc >= 8) kv = std::atoll(argv[3]), group = std::atoll(argv[4]), seq = std::atoll(argv[5]), arg = 6;
  const bool save = std::strcmp(argv[arg], "save") == 0;
  const char* file = argv[arg + 1];
  const long long D = 128, rows = group * seq, keys = seq;
  uint64_t state = 12345;
  auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float((state >> 40) & 0xffffff) / float(1 << 24) * 2.0f - 1.0f;
  };
  auto make = [&](size_t n) {
    std::vector<__nv_bfloat16> h(n);
    for (auto& x : h) x = __float2bfloat16_rn(uniform());
    return h;
  };
  const auto q = make(size_t(kv * rows * D)), k = make(size_t(kv * keys * D)), v = make(size_t(kv * keys * D));
  std::vector<float> mask(size_t(seq * keys));
  for (long long i = 0; i < seq; ++i)
    for (long long j = 0; j < keys; ++j) mask[size_t(i * keys + j)] = j <= i ? 0.0f : infinite ? -INFINITY : -1e9f;
  const float scale = float(1.0 / std::sqrt(double(D)));
  const std::vector<long long> params{kv, rows, group, seq, keys, D, D, 0, rows * D, D, 1, 0, keys * D, 1, D,
                                      0, keys * D, D, 1, 0, 0, 0, keys, 1, 0, 0, 0, 0, 0};
  void *dq, *dk, *dv, *dmask, *dscale, *dout, *dparams;
  CHECK(cudaMalloc(&dq, q.size() * 2));
  CHECK(cudaMalloc(&dk, k.size() * 2));
  CHECK(cudaMalloc(&dv, v.size() * 2));
  CHECK(cudaMalloc(&dmask, mask.size() * 4));
  CHECK(cudaMalloc(&dscale, 4));
  CHECK(cudaMalloc(&dout, q.size() * 2));
  CHECK(cudaMalloc(&dparams, params.size() * 8));
  CHECK(cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dk, k.data(), k.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dv, v.data(), v.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dmask, mask.data(), mask.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dscale, &scale, 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dparams, params.data(), params.size() * 8, cudaMemcpyHostToDevice));
  const unsigned grid = unsigned(kv * ((rows + lk::kFlashRows - 1) / lk::kFlashRows));
  auto launch = [&] {
    probe_flash<<<grid, lk::kFlashWarps * 32>>>((const __nv_bfloat16*)dq, (const __nv_bfloat16*)dk,
                                                (const __nv_bfloat16*)dv, (const float*)dmask, (const float*)dscale,
                                                (__nv_bfloat16*)dout, (const long long*)dparams);
  };
  for (int i = 0; i < 3; ++i) launch();
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  constexpr int kRuns = 50;
  CHECK(cudaEventRecord(a));
  for (int i = 0; i < kRuns; ++i) launch();
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  std::vector<__nv_bfloat16> out(q.size());
  CHECK(cudaMemcpy(out.data(), dout, out.size() * 2, cudaMemcpyDeviceToHost));
  double worst = -1;
  if (save) {
    FILE* f = std::fopen(file, "wb");
    std::fwrite(out.data(), 2, out.size(), f);
    std::fclose(f);
  } else {
    std::vector<__nv_bfloat16> want(out.size());
    FILE* f = std::fopen(file, "rb");
    if (!f || std::fread(want.data(), 2, want.size(), f) != want.size()) {
      std::printf("probe: cannot read %s\n", file);
      return 1;
    }
    std::fclose(f);
    worst = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      const double x = __bfloat162float(out[i]), y = __bfloat162float(want[i]);
      const double d = (x == y) ? 0.0 : std::isnan(x) || std::isnan(y) ? INFINITY : std::fabs(x - y) / (1 + std::fabs(y));
      worst = d > worst ? d : worst;
    }
  }
  std::printf("{\"probe\": \"attention_flash\", \"variant\": \"%s\", \"mask\": \"%s\", \"kv\": %lld, \"rows\": %lld, "
              "\"keys\": %lld, \"us\": %.2f, \"max_rel_diff_vs_base\": %.3g}\n",
              variant, infinite ? "inf" : "finite", kv, rows, keys, ms * 1000.0 / kRuns, worst);
  return 0;
}
