// The probe's timing half for the compiled row ops of case 2 (emitted_rows.sh): one kernel
// luminal emitted for softmax or RMSNorm over (4096, 4096) BF16, its dumped source renamed
// `emitted_row` and included with -include, launched as the runtime launches a block-per-row
// kernel: a block per row, THREADS threads, arguments (inputs..., out, errors, dims). Every
// input is a full (4096, 4096) buffer (a weight reads only its first row). Three copies of
// the operands, used in turn, so that the L2 holds none of them; median of 30 launches.
//   -DROW_INPUTS=1 or 2 (the kernel's inputs); argv: name, threads
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_util.cuh"

int main(int argc, char** argv) {
  if (argc < 3) return std::printf("usage: %s NAME THREADS\n", argv[0]), 2;
  const char* name = argv[1];
  const unsigned threads = unsigned(std::atoi(argv[2]));
  constexpr int inputs = ROW_INPUTS;
  constexpr long long rows = 4096, cols = 4096, n = rows * cols;
  constexpr int kCopies = 3;
  std::vector<unsigned short*> in[2], out;
  for (int c = 0; c < kCopies; ++c) {
    for (int i = 0; i < inputs; ++i) {
      unsigned short* p;
      CHECK(cudaMalloc(&p, n * 2));
      fill_random_bf16<<<1024, 256>>>(p, n, 17u * c + i);
      in[i].push_back(p);
    }
    unsigned short* o;
    CHECK(cudaMalloc(&o, n * 2));
    out.push_back(o);
  }
  int* err;
  long long* dims;
  CHECK(cudaMalloc(&err, 4096));
  CHECK(cudaMemset(err, 0, 4096));
  CHECK(cudaMalloc(&dims, 4096));
  CHECK(cudaMemset(dims, 0, 4096));
  auto launch = [&](int c) {
#if ROW_INPUTS == 1
    emitted_row<<<rows, threads>>>(in[0][c], out[c], err, dims);
#else
    emitted_row<<<rows, threads>>>(in[0][c], in[1][c], out[c], err, dims);
#endif
  };
  for (int c = 0; c < kCopies; ++c) launch(c);
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> us;
  for (int r = 0; r < 30; ++r) {
    CHECK(cudaEventRecord(a));
    launch(r % kCopies);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(ms * 1000.0f);
  }
  CHECK(cudaGetLastError());
  std::sort(us.begin(), us.end());
  const double t = us[us.size() / 2];
  const double bytes = 2.0 * n * 2.0;  // one read and one write of the rows
  std::printf("{\"probe\": \"emitted_rows\", \"variant\": \"%s\", \"threads\": %u, \"us\": %.2f, \"gb_per_s\": %.1f}\n", name,
              threads, t, bytes / t * 1e-3);
  return 0;
}
