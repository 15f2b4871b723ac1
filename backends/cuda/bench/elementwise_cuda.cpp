// Issue 10, benchmark case 2 (the elementwise part): a fused elementwise chain over
// (4096, 4096) BF16 built with the tensor API and compiled by the search for the CUDA
// runtime: y = silu(a) * b + c (a SwiGLU product and a residual add: three reads and one
// write, 128 MiB, twice an H100's or H200's L2, so no run is served from the L2).
// bench/suite_cuda.py runs this program and times the PyTorch peers in the same run.
//
// Prints one JSON line: the median CUDA-event time per run of 20 runs back to back on the
// runtime's stream (`profile` with runs_per_trial: the captured graph's kernels as a model's
// steps run them, the host's work overlapped), one run alone, the median host-clock
// time of `execute` (it also waits for the device and reads the error slot), the floor
// (bytes moved / the copy bandwidth measured here) and the fraction of it reached, and the
// largest error against a host reference over a sample of elements (exit 1 past BF16's
// rounding of the result).
//
// With --op softmax or --op rmsnorm it compiles, instead, the row op of case 2 over (rows,
// cols) BF16 (torch's softmax(dim=-1); rms_norm with a BF16 weight, eps 1e-5): what the
// compiler makes of them, beside the hand-written rows.cu kernels suite_cuda_linear times.
// A row op moves 64 MiB per input at 4096 x 4096, near an L2's size, so the graph holds
// --copies (default 3) independent ones, each on its own input and output, and the time is
// per op (a model reads distinct data at each layer).
//
// --op attention: attention as the models spell it (Llama-3-8B's shapes: 32 query heads, 8
// kv heads, head dim 128, BF16), --queries new tokens (1: a decode step; 512 with
// --context 0: a prompt's prefill, causal) over --context cached ones, a chain of --layers
// layers (each one's output is the next one's q; each reads its own cache), compiled twice
// in this process: without rules/cuda_attention.egg (LUMINAL_CUDA_ATTENTION=0: the matmuls
// and the softmax) and with it (=1). Prints the time per layer of both, how many
// CudaAttention steps the second program runs, and how far apart their results are.
//
//   elementwise_cuda [--op chain|softmax|rmsnorm|attention] [--rows 4096] [--cols 4096]
//                    [--copies N] [--layers 32] [--context 512] [--queries 1] [--search-s 5]
//                    [--runs 50]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "luminal/luminal.hpp"
#include "luminal_cuda/cuda_runtime.hpp"
#include "luminal_cuda/device.hpp"

#include "bench_util.hpp"

using namespace luminal;
using cuda::bench::arg;
using cuda::bench::json_escape;
using cuda::bench::json_number;
using cuda::bench::median;
using Clock = std::chrono::steady_clock;

namespace {

// Event time per run: 20 runs back to back on the runtime's stream, as a model's steps run.
double per_run_us(cuda::CudaRuntime& rt, const DimMap& dims, int runs) {
  std::vector<double> event_us;
  for (int i = 0; i < runs; ++i)
    event_us.push_back(rt.profile(dims, ProfileOptions{0, 1, std::chrono::duration<double>(60.0), 20}).seconds * 1e6);
  return median(event_us);
}

// Case 2's row ops through the compiler (see the top of the file).
int run_row_op(const std::string& op, int64_t rows, int64_t cols, int copies, double search_s, int runs) {
  copies = std::max(1, copies);
  Graph cx;
  auto weight = cx.named_tensor("weight", {cols}, DType::BF16).persist();
  std::vector<GraphTensor> xs, ys;
  for (int c = 0; c < copies; ++c) {
    const std::string index = std::to_string(c);  // (not "x" + ...: GCC 12's -Wrestrict misfires on it)
    std::string x_name = "x", y_name = "y";
    x_name += index;
    y_name += index;
    xs.push_back(cx.named_tensor(x_name, {rows, cols}, DType::BF16).persist());
    ys.push_back((op == "softmax" ? xs.back().softmax(-1) : xs.back().rms_norm(1, weight, 1e-5)).output(y_name));
  }
  const auto t0 = Clock::now();
  auto rt = cx.compile(cuda::CudaRuntime{}, CompileOptions().search_time_limit(std::chrono::duration<double>(search_s)));
  const double compile_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto n = static_cast<size_t>(rows * cols);
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  auto bf16 = [](float v) { return bf16_bits_to_f32(f32_to_bf16_bits(v)); };
  std::vector<float> w(static_cast<size_t>(cols));
  for (float& v : w) v = bf16(dist(rng) / 4.0f);
  rt.set_data(weight, w);
  std::vector<std::vector<float>> host(static_cast<size_t>(copies), std::vector<float>(n));
  for (int c = 0; c < copies; ++c) {
    for (float& v : host[static_cast<size_t>(c)]) v = bf16(dist(rng));
    rt.set_data(xs[static_cast<size_t>(c)], host[static_cast<size_t>(c)]);
  }
  const DimMap dims = cx.dim_map();
  for (int i = 0; i < 3; ++i) rt.execute(dims);  // resolve, capture, replay
  const double us = per_run_us(rt, dims, runs) / copies;
  // Sampled rows against the op in double over the BF16 inputs; BF16's rounding of the result.
  double worst = 0;
  for (int c = 0; c < copies; ++c) {
    const std::vector<float> got = rt.get_f32(ys[static_cast<size_t>(c)]);
    const std::vector<float>& x = host[static_cast<size_t>(c)];
    for (int64_t r = c; r < rows; r += 251) {
      const float* row = x.data() + r * cols;
      double stat = 0, mx = -INFINITY;
      for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, static_cast<double>(row[j]));
      for (int64_t j = 0; j < cols; ++j) stat += op == "softmax" ? std::exp(row[j] - mx) : double(row[j]) * row[j];
      for (int64_t j = 0; j < cols; ++j) {
        const double want = op == "softmax" ? std::exp(row[j] - mx) / stat
                                            : row[j] / std::sqrt(stat / static_cast<double>(cols) + 1e-5) * w[size_t(j)];
        const double scale = op == "softmax" ? std::max(want, 1e-6) : 1.0 + std::abs(want);
        worst = std::max(worst, std::abs(got[size_t(r * cols + j)] - want) / scale);
      }
    }
  }
  cuda::Stream stream;
  const double bandwidth = cuda::copy_bandwidth(stream.get());
  const double bytes = 2.0 * static_cast<double>(n) * 2.0 + (op == "rmsnorm" ? 2.0 * static_cast<double>(cols) : 0.0);
  const double floor_us = bytes / bandwidth * 1e6;
  std::printf(
      "{\"suite\": \"cuda\", \"case\": \"compiled_%s_bf16_%lldx%lld\", \"value\": %s, \"unit\": \"us\", "
      "\"better\": \"lower\", \"floor_us\": %s, \"fraction_of_floor\": %s, \"target\": \">= 0.85 of floor\", "
      "\"copies\": %d, \"compile_s\": %s, \"kernels_compiled\": %d, \"max_rel_error\": %s, "
      "\"what\": \"the compiled program's time per op (CUDA events, 20 runs back to back, %d ops on distinct data per run)\"}\n",
      op.c_str(), static_cast<long long>(rows), static_cast<long long>(cols), json_number(us).c_str(),
      json_number(floor_us).c_str(), json_number(floor_us / us, "%.3f").c_str(), copies,
      json_number(compile_s, "%.2f").c_str(), rt.kernels_compiled(), json_number(worst, "%.3g").c_str(), copies);
  return worst <= 0.05 ? 0 : 1;
}

// See --op attention above.
int run_attention(int layers, int64_t context, int64_t queries, double search_s, int runs) {
  const int64_t heads = 32, kv_heads = 8, head_dim = 128, group = heads / kv_heads, t = context + queries;
  Graph cx;
  auto q0 = cx.named_tensor("q", {queries, heads, head_dim}, DType::BF16).persist();
  const Expression z = Expression::index(), p = Expression(context), i = z / t, j = z % t;
  auto mask = cx.iota((le(j, p + i) - 1) * 1000000000, {queries, t}, DType::I32).cast(DType::F32);
  GraphTensor q = q0;
  std::vector<GraphTensor> caches;
  for (int l = 0; l < layers; ++l) {
    std::string k_name = "k", v_name = "v";
    k_name += std::to_string(l);
    v_name += std::to_string(l);
    auto k = cx.named_tensor(k_name, {t, kv_heads, head_dim}, DType::BF16).persist();
    auto v = cx.named_tensor(v_name, {t, kv_heads, head_dim}, DType::BF16).persist();
    caches.push_back(k);
    caches.push_back(v);
    auto qh = q.reshape({queries, kv_heads, group, head_dim}).permute({1, 2, 0, 3}).contiguous().reshape(
        {kv_heads, group * queries, head_dim});
    auto scores = qh.matmul(k.permute({1, 2, 0})).reshape({kv_heads, group, queries, t}).cast(DType::F32) *
                  (1.0 / std::sqrt(static_cast<double>(head_dim)));
    auto probs = (scores + mask).softmax(-1).cast(DType::BF16).reshape({kv_heads, group * queries, t});
    auto out = probs.matmul(v.permute({1, 0, 2})).reshape({kv_heads, group, queries, head_dim}).permute({2, 0, 1, 3});
    q = out.reshape({queries, heads, head_dim});
  }
  auto y = q.output("y");
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  auto fill = [&](std::vector<float>& v, size_t n) {
    v.resize(n);
    for (float& x : v) x = dist(rng);
  };
  std::vector<float> q_data;
  fill(q_data, static_cast<size_t>(queries * heads * head_dim));
  std::vector<std::vector<float>> cache_data(caches.size());
  for (auto& c : cache_data) fill(c, static_cast<size_t>(t * kv_heads * head_dim));
  const DimMap dims = cx.dim_map();
  double us[2] = {0, 0}, compile_s[2] = {0, 0};
  int attention_steps = 0;
  std::vector<float> results[2];
  for (int fused = 0; fused < 2; ++fused) {
    ::setenv("LUMINAL_CUDA_ATTENTION", fused ? "1" : "0", 1);
    const auto t0 = Clock::now();
    auto rt = cx.compile(cuda::CudaRuntime{}, CompileOptions().search_time_limit(std::chrono::duration<double>(search_s)));
    compile_s[fused] = std::chrono::duration<double>(Clock::now() - t0).count();
    rt.set_data(q0, q_data);
    for (size_t c = 0; c < caches.size(); ++c) rt.set_data(caches[c], cache_data[c]);
    for (int r = 0; r < 3; ++r) rt.execute(dims);
    us[fused] = per_run_us(rt, dims, runs) / layers;
    results[fused] = rt.get_f32(y);
    if (fused) attention_steps = rt.steps_running("CudaAttention");
  }
  ::unsetenv("LUMINAL_CUDA_ATTENTION");
  double worst = 0;
  for (size_t k = 0; k < results[0].size(); ++k)
    worst = std::max(worst, std::abs(double(results[0][k]) - results[1][k]) / (1.0 + std::abs(double(results[0][k]))));
  std::printf(
      "{\"suite\": \"cuda\", \"case\": \"%s_attention_bf16_ctx%lld\", \"value\": %s, \"unit\": \"us\", "
      "\"better\": \"lower\", \"unfused_us\": %s, \"speedup\": %s, \"layers\": %d, \"attention_steps\": %d, "
      "\"compile_s\": [%s, %s], \"max_rel_diff\": %s, "
      "\"what\": \"per layer: the program with rules/cuda_attention.egg (value) and without (unfused_us), CUDA events, 20 runs back to back\"}\n",
      queries == 1 ? "decode" : ("prefill" + std::to_string(queries)).c_str(), static_cast<long long>(context),
      json_number(us[1]).c_str(), json_number(us[0]).c_str(),
      json_number(us[0] / us[1], "%.3f").c_str(), layers, attention_steps, json_number(compile_s[0], "%.2f").c_str(),
      json_number(compile_s[1], "%.2f").c_str(), json_number(worst, "%.3g").c_str());
  return worst <= 0.05 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (!cuda::available().ok) {
      std::printf("{\"suite\": \"cuda\", \"case\": \"elementwise_chain\", \"status\": \"skipped\", \"reason\": \"%s\"}\n",
                  json_escape(cuda::available().message).c_str());
      return 0;
    }
    const auto rows = static_cast<int64_t>(arg(argc, argv, "--rows", 4096));
    const auto cols = static_cast<int64_t>(arg(argc, argv, "--cols", 4096));
    const double search_s = arg(argc, argv, "--search-s", 5);
    const int runs = std::max(3, static_cast<int>(arg(argc, argv, "--runs", 50)));
    std::string op = "chain";
    for (int i = 1; i + 1 < argc; ++i)
      if (std::string(argv[i]) == "--op") op = argv[i + 1];
    if (op != "chain" && op != "softmax" && op != "rmsnorm" && op != "attention") {
      std::fprintf(stderr, "elementwise_cuda: --op takes chain, softmax, rmsnorm or attention, not '%s'\n", op.c_str());
      return 2;
    }
    if (op == "attention")
      return run_attention(static_cast<int>(arg(argc, argv, "--layers", 32)),
                           static_cast<int64_t>(arg(argc, argv, "--context", 512)),
                           std::max<int64_t>(1, static_cast<int64_t>(arg(argc, argv, "--queries", 1))), search_s, runs);
    if (op != "chain") return run_row_op(op, rows, cols, static_cast<int>(arg(argc, argv, "--copies", 3)), search_s, runs);

    Graph cx;
    auto a = cx.named_tensor("a", {rows, cols}, DType::BF16).persist();
    auto b = cx.named_tensor("b", {rows, cols}, DType::BF16).persist();
    auto c = cx.named_tensor("c", {rows, cols}, DType::BF16).persist();
    auto y = (a.silu() * b + c).output("y");
    const auto t0 = Clock::now();
    auto rt = cx.compile(cuda::CudaRuntime{}, CompileOptions().search_time_limit(std::chrono::duration<double>(search_s)));
    const double compile_s = std::chrono::duration<double>(Clock::now() - t0).count();

    const auto n = static_cast<size_t>(rows * cols);
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
    std::vector<std::vector<float>> host(3, std::vector<float>(n));
    for (auto& v : host)
      for (float& x : v) x = dist(rng);
    rt.set_data(a, host[0]);
    rt.set_data(b, host[1]);
    rt.set_data(c, host[2]);
    const DimMap dims = cx.dim_map();
    for (int i = 0; i < 3; ++i) rt.execute(dims);  // resolve, capture, replay

    std::vector<double> host_us, event_us;
    for (int i = 0; i < runs; ++i) {
      const auto s0 = Clock::now();
      rt.execute(dims);
      host_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s0).count());
    }
    // The value: 20 runs enqueued back to back between two events, per run, as a model's
    // steps run and as the PyTorch peers are timed (bench/suite_cuda.py: rounds of calls
    // between events). Beside it, one run on an idle stream, its host work (`run`'s prepare
    // and the graph launch) inside the events.
    std::vector<double> single_us;
    for (int i = 0; i < runs; ++i) {
      event_us.push_back(rt.profile(dims, ProfileOptions{0, 1, std::chrono::duration<double>(60.0), 20}).seconds * 1e6);
      single_us.push_back(rt.profile(dims, ProfileOptions{0, 1, std::chrono::duration<double>(60.0)}).seconds * 1e6);
    }

    // The result against the same chain in float on the host, rounded like the graph's
    // BF16 steps: within a few BF16 ulps of the result's magnitude.
    const std::vector<float> got = rt.get_f32(y);
    auto bf16 = [](float v) { return bf16_bits_to_f32(f32_to_bf16_bits(v)); };
    double worst = 0;
    for (size_t i = 0; i < n; i += 997) {
      const float x0 = bf16(host[0][i]), x1 = bf16(host[1][i]), x2 = bf16(host[2][i]);
      const double want = x0 / (1.0 + std::exp(-static_cast<double>(x0))) * x1 + x2;
      worst = std::max(worst, std::abs(got[i] - want) / (1.0 + std::abs(want)));
    }

    cuda::Stream stream;
    const double bandwidth = cuda::copy_bandwidth(stream.get());
    const double bytes = 4.0 * static_cast<double>(n) * 2.0;
    const double floor_us = bytes / bandwidth * 1e6;
    const double us = median(event_us);
    std::printf(
        "{\"suite\": \"cuda\", \"case\": \"elementwise_chain_bf16_%lldx%lld\", \"value\": %s, \"unit\": \"us\", "
        "\"better\": \"lower\", \"floor_us\": %s, \"fraction_of_floor\": %s, \"target\": \">= 0.85 of floor\", "
        "\"single_run_us\": %s, \"execute_host_us\": %s, \"compile_s\": %s, \"kernels_compiled\": %d, \"max_rel_error\": %s, "
        "\"what\": \"silu(a) * b + c, BF16, CUDA-event time per run of the captured graph, 20 runs back to back\"}\n",
        static_cast<long long>(rows), static_cast<long long>(cols), json_number(us).c_str(), json_number(floor_us).c_str(),
        json_number(floor_us / us, "%.3f").c_str(), json_number(median(single_us)).c_str(), json_number(median(host_us)).c_str(),
        json_number(compile_s, "%.2f").c_str(), rt.kernels_compiled(), json_number(worst, "%.3g").c_str());
    return worst <= 0.05 ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("{\"suite\": \"cuda\", \"case\": \"elementwise_chain\", \"status\": \"failed\", \"error\": \"%s\"}\n",
                json_escape(e.what()).c_str());
    return 1;
  }
}
