// The probe's second half: times a kernel luminal emitted for case 2's chain (its dumped
// source, renamed `emitted_chain` and included with -include by emitted_chain.sh, which also
// makes variants of it by text edits), launched as the runtime launches it: 256 threads, one
// per 16-byte chunk, arguments (in0, in1, in2, out, errors, dims). Random BF16 inputs in
// [-4, 4] (the benchmark's), or constant ones with --constant (elementwise_probe's).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "probe_util.cuh"

int main(int argc, char** argv) {
  // argv: name, "--constant" or "--random", optionally "--graph"
  const bool constant = argc > 2 && std::strcmp(argv[2], "--constant") == 0;
  const char* name = argc > 1 ? argv[1] : "emitted";
  const long long n = 4096LL * 4096;
  unsigned short *a, *b, *c, *y;
  int* err;
  long long* dims;
  cudaMalloc(&a, n * 2); cudaMalloc(&b, n * 2); cudaMalloc(&c, n * 2); cudaMalloc(&y, n * 2);
  cudaMalloc(&err, 256); cudaMemset(err, 0, 256);
  cudaMalloc(&dims, 256); cudaMemset(dims, 0, 256);
  if (constant) {
    cudaMemset(a, 0x3f, n * 2); cudaMemset(b, 0x3f, n * 2); cudaMemset(c, 0x3f, n * 2);
  } else {
    fill_random_bf16<<<1024, 256>>>(a, n, 1u);
    fill_random_bf16<<<1024, 256>>>(b, n, 2u);
    fill_random_bf16<<<1024, 256>>>(c, n, 3u);
  }
  const unsigned blocks = (unsigned)((n / 8 + 255) / 256);
  // --graph: as the runtime runs a plan, a captured graph of the error slot's memset and the
  // kernel launched with programmatic stream serialization allowed, replayed.
  const bool graph_mode = argc > 3 && std::strcmp(argv[3], "--graph") == 0;
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  cudaGraphExec_t exec = nullptr;
  if (graph_mode) {
    cudaGraph_t graph;
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    cudaMemsetAsync(err, 0, 256, stream);
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(256);
    config.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    cudaLaunchKernelEx(&config, emitted_chain, (const unsigned short*)a, (const unsigned short*)b,
                       (const unsigned short*)c, y, err, (const long long*)dims);
    cudaStreamEndCapture(stream, &graph);
    cudaGraphInstantiate(&exec, graph, 0);
  }
  auto launch = [&] {
    if (graph_mode) cudaGraphLaunch(exec, stream);
    else emitted_chain<<<blocks, 256, 0, stream>>>(a, b, c, y, err, dims);
  };
  cudaEvent_t start, stop;
  cudaEventCreate(&start); cudaEventCreate(&stop);
  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> per_launch;
  for (int s = 0; s < 7; ++s) {
    cudaEventRecord(start, stream);
    for (int i = 0; i < 20; ++i) launch();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    per_launch.push_back(ms * 1e3f / 20);
  }
  std::sort(per_launch.begin(), per_launch.end());
  const cudaError_t e = cudaGetLastError();
  std::printf("{\"probe\": \"emitted_chain\", \"variant\": \"%s%s%s\", \"us\": %.2f, \"gb_per_s\": %.0f, \"error\": \"%s\"}\n",
              name, constant ? "_constant_inputs" : "", graph_mode ? "_graph" : "", per_launch[3],
              4.0 * n * 2 / per_launch[3] * 1e-3, cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
