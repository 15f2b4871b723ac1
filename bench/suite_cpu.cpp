// scripts/bench cpu, luminal's half: one case of issue 9's CPU suite per invocation,
// built with the tensor API, compiled for the CPU backend (cold: the kernel cache
// directory $LUMINAL_CACHE_DIR is expected empty; warm: a second compile in this
// process, with that cache populated), then timed. bench/suite_cpu.py is the entry
// point: it runs this program per case, times the peers (PyTorch eager, inductor,
// ONNX Runtime, Hugging Face transformers) and prints the suite's JSON lines.
//
//   suite_cpu --case NAME [--reps N] [--inputs F.safetensors] [--dump OUT.f32]
//             [--model DIR --context T --steps S --weights checkpoint|f32] [--search N] [--search-time S]
//             [--verify auto|never] [--prefill 1]
// Cases: mlp, llama_block, softmax, layer_norm, gelu, sgemm, decode. Prints one JSON
// object (luminal's numbers only). Without --case it prints nothing: scripts/bench runs
// every suite_cpu* executable before bench/suite_cpu.py.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "luminal/cpu/blas_gemm.hpp"
#include "luminal/cpu/cpu_runtime.hpp"
#include "luminal/cpu/gemm.hpp"
#include "luminal/cpu/thread_pool.hpp"
#include "luminal/luminal.hpp"
#include "luminal/models/nn.hpp"
#include "luminal/models/transformer.hpp"

using namespace luminal;
namespace nn = luminal::models::nn;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// Median over `reps` samples after two warm-up calls; a sample runs `fn` often enough
// to last ~5 ms, so microsecond kernels are not measured at the clock's resolution.
// Wall time, or the process's CPU time with LUMINAL_BENCH_CPU_TIME=1 (bench/suite_cpu.py).
double timer_s() {
  static const bool cpu = [] {
    const char* v = std::getenv("LUMINAL_BENCH_CPU_TIME");
    return v && std::string(v) == "1";
  }();
  if (!cpu) return std::chrono::duration<double>(clock_type::now().time_since_epoch()).count();
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median_ms(const std::function<void()>& fn, int reps) {
  fn();
  fn();
  // Warm-up for 0.3 s of wall time (as bench/suite_cpu.py's peers): the first ~50-500 ms
  // of a process can run at up to half speed on a shared 2-core host (the scheduler places
  // the pool's worker beside the caller; docs/LESSONS.md), and 10 samples of ~5 ms fall
  // wholly inside that phase, so a process's median was bimodal (gelu 0.34 or 0.59 ms).
  for (const auto warm = clock_type::now(); seconds_since(warm) < 0.3;) fn();
  double t = timer_s();
  fn();
  const double once = timer_s() - t;
  const int inner = std::clamp(static_cast<int>(0.005 / std::max(once, 1e-7)), 1, 1000);
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    t = timer_s();
    for (int i = 0; i < inner; ++i) fn();
    samples.push_back(1e3 * (timer_s() - t) / inner);
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

struct Args {
  std::string case_name, inputs, dump, model;
  int reps = 20, context = 256, steps = 16, search = 30;
  bool verbose = false;  // the warm compile's report on stderr
  bool f32_weights = false;
  bool prefill = false;  // decode: --prefill 1 fills the cache by a prefill of the context (timed)
  // --verify never: keep the searched program even where it disagrees with the
  // unrewritten one by more than the verifier's tolerance (F32 GEMM sums over long k on
  // the verifier's large inputs; docs/CPU_BACKEND.md).
  VerifyMode verify = VerifyMode::Auto;  // decode: --weights f32 converts the checkpoint's matrices at load
  double search_time = 30, profile_timeout = 1;
};

CompileOptions compile_options(const Args& a) {
  return CompileOptions()
      .search_graph_limit(a.search)
      .search_time_limit(std::chrono::duration<double>(a.search_time))
      .profile_timeout(std::chrono::duration<double>(a.profile_timeout))
      .verify(a.verify)
      .verbose(a.verbose);
}

// ---- the graphs (weights are persisted named inputs: bench/suite_cpu.py writes the
// ---- same names to a safetensors file so the peers run on the same numbers) ----

GraphTensor weight(Graph& cx, const std::string& name, Shape shape) {
  return cx.named_tensor(name, std::move(shape)).persist();
}

// 3 x Linear(1024, 1024) with bias, exact GELU between them; batch 64.
GraphTensor build_mlp(Graph& cx) {
  constexpr int64_t width = 1024, batch = 64;
  GraphTensor x = weight(cx, "x", {batch, width});
  for (int l = 0; l < 3; ++l) {
    // (built by appending: GCC 12's -Wrestrict misfires on "literal" + std::string)
    std::string p = "l";
    p += std::to_string(l);
    p += '.';
    x = x.linear(weight(cx, p + "weight", {width, width}), weight(cx, p + "bias", {width}));
    if (l < 2) x = x.gelu();
  }
  return x;
}

// One Llama decoder block on a 128-token prompt: RMSNorm, GQA attention (16 heads,
// 4 KV heads, head_dim 64) with RoPE (cos/sin tables are inputs) and a causal mask,
// RMSNorm, SwiGLU MLP (2816).
GraphTensor build_llama_block(Graph& cx) {
  constexpr int64_t seq = 128, hidden = 1024, heads = 16, kv_heads = 4, head_dim = hidden / heads, inter = 2816;
  constexpr double eps = 1e-5;
  GraphTensor x = weight(cx, "x", {seq, hidden});
  nn::Rotary rope{weight(cx, "cos", {seq, head_dim / 2}), weight(cx, "sin", {seq, head_dim / 2})};
  GraphTensor h = x.rms_norm(1, weight(cx, "ln1", {hidden}), eps);
  GraphTensor q = h.linear(weight(cx, "q", {hidden, hidden})).reshape({seq, heads, head_dim});
  GraphTensor k = h.linear(weight(cx, "k", {kv_heads * head_dim, hidden})).reshape({seq, kv_heads, head_dim});
  GraphTensor v = h.linear(weight(cx, "v", {kv_heads * head_dim, hidden})).reshape({seq, kv_heads, head_dim});
  q = nn::RotaryEmbedding::apply(q, rope);
  k = nn::RotaryEmbedding::apply(k, rope);
  nn::SeqDims dims{Expression(0), Expression(seq)};
  nn::AttentionOptions attention;
  attention.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  GraphTensor attn = nn::gqa_attention(q, k, v, nn::causal_mask(cx, dims), attention);
  x = x + attn.linear(weight(cx, "o", {hidden, hidden}));
  GraphTensor n = x.rms_norm(1, weight(cx, "ln2", {hidden}), eps);
  GraphTensor mlp = (n.linear(weight(cx, "gate", {inter, hidden})).silu() * n.linear(weight(cx, "up", {inter, hidden})))
                        .linear(weight(cx, "down", {hidden, inter}));
  return x + mlp;
}

GraphTensor build_elementwise(Graph& cx, const std::string& which) {
  GraphTensor x = weight(cx, "x", {64, 4096});
  if (which == "softmax") return x.softmax(1);
  if (which == "gelu") return x.gelu();
  if (which == "gelu_tanh") return x.gelu_tanh();
  if (which == "rms_norm") return x.rms_norm(1, weight(cx, "weight", {4096}), 1e-5);
  return x.layer_norm(1, weight(cx, "weight", {4096}), weight(cx, "bias", {4096}), 1e-5);
}

GraphTensor build_sgemm(Graph& cx) {
  return weight(cx, "a", {1024, 1024}).matmul(weight(cx, "b", {1024, 1024}));
}

// Small graphs that isolate one piece of a case (not part of the suite; for diagnosis).
GraphTensor build_probe(Graph& cx, const std::string& which) {
  GraphTensor x = weight(cx, "x", {64, 1024}), w = weight(cx, "w", {1024, 1024}), b = weight(cx, "b", {1024});
  if (which == "matmul") return x.matmul(w);
  if (which == "linear") return x.linear(w);
  if (which == "linear_bias") return x.linear(w, b);
  if (which == "linear_gelu") return x.linear(w, b).gelu();
  if (which == "matmul_gelu") return x.matmul(w).gelu();
  if (which == "matmul_gelu_tanh") return x.matmul(w).gelu_tanh();
  if (which == "matmul_silu") return x.matmul(w).silu();
  if (which == "matmul_exp") return x.matmul(w).exp();
  fail("unknown probe '", which, "'");
}

// Random values for every input the safetensors file did not fill.
void fill_missing(Runtime& rt, const Graph& cx) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (NodeId id : cx.inputs()) {
    if (rt.has_tensor(id)) continue;
    const Node& n = cx.node(id);
    std::vector<float> v(static_cast<size_t>(product(n.shape).eval(cx.dim_map())));
    for (auto& e : v) e = 0.05f * dist(rng);
    rt.set_tensor(id, HostTensor::from<float>(v, n.dtype));
  }
}

// `kernels`: kernels the cold compile built (its cache was empty).
void print_common(const Args& a, double median, double cold, double warm, const CompileReport& r, int kernels) {
  if (a.verbose) std::fprintf(stderr, "%s\n", r.to_string().c_str());
  std::printf("{\"case\":\"%s\",\"luminal_ms\":%.6g,\"compile_s_cold\":%.4g,\"compile_s_warm\":%.4g,"
              "\"threads\":%d,\"candidates\":%lld,\"search_s\":%.3g,\"kernels_compiled\":%d",
              a.case_name.c_str(), median, cold, warm, cpu::ThreadPool::global().num_threads(),
              static_cast<long long>(r.candidates), r.search_s, kernels);
}

int run_graph_case(const Args& a) {
  Graph cx;
  GraphTensor out;
  if (a.case_name == "mlp") out = build_mlp(cx);
  else if (a.case_name == "llama_block") out = build_llama_block(cx);
  else if (a.case_name == "softmax" || a.case_name == "layer_norm" || a.case_name == "gelu" ||
           a.case_name == "gelu_tanh" || a.case_name == "rms_norm")
    out = build_elementwise(cx, a.case_name);
  else if (a.case_name == "sgemm") out = build_sgemm(cx);
  else if (a.case_name.rfind("probe_", 0) == 0) out = build_probe(cx, a.case_name.substr(6));
  else fail("unknown case '", a.case_name, "' (mlp, llama_block, softmax, layer_norm, rms_norm, gelu, gelu_tanh, sgemm, decode)");
  out = out.output();

  auto t = clock_type::now();
  int cold_kernels = 0;
  {
    auto cold_rt = cx.compile(cpu::CpuRuntime{}, compile_options(a));
    cold_kernels = cold_rt.kernels_compiled();
  }
  const double cold = seconds_since(t);
  CompileReport report;
  t = clock_type::now();
  cpu::CpuRuntime rt = cx.compile(cpu::CpuRuntime{}, compile_options(a).report(&report));
  const double warm = seconds_since(t);

  if (!a.inputs.empty()) rt.load_safetensors(cx, a.inputs, /*allow_missing=*/true);
  fill_missing(rt, cx);
  const DimMap dims = cx.dim_map();
  const double median = median_ms([&] { rt.execute(dims); }, a.reps);
  if (!a.dump.empty()) {
    std::vector<float> values = rt.get_f32(out);
    std::ofstream f(a.dump, std::ios::binary);
    f.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
  }
  print_common(a, median, cold, warm, report, cold_kernels);
  if (a.case_name == "sgemm") {
    // The peer: OpenBLAS's cblas_sgemm on the same row-major operands, and our own
    // GEMM kernel called directly (what the compiled graph should approach).
    constexpr int64_t n = 1024;
    auto input = [&](const std::string& label) {
      for (NodeId id : cx.inputs())
        if (cx.node(id).label == label) return rt.get_tensor(id).to_f32();
      fail("no input '", label, "'");
    };
    std::vector<float> A = input("a"), B = input("b");
    std::vector<float> C(n * n);
    auto args = cpu::GemmArgs::row_major(n, n, n, A.data(), B.data(), C.data());
    const double blas = median_ms([&] { LUMINAL_CHECK(cpu::blas_gemm(args), "blas_gemm refused a row-major SGEMM"); },
                                  a.reps);
    const double ours = median_ms([&] { cpu::gemm(args); }, a.reps);
    std::printf(",\"openblas_ms\":%.6g,\"gemm_kernel_ms\":%.6g,\"openblas_threads\":%d", blas, ours,
                cpu::blas_threads());
  }
  std::printf("}\n");
  return 0;
}

// Decode of a Hugging Face Llama directory (weight matrices kept in the checkpoint's BF16,
// converted inside the GEMMs; --weights f32 converts them at load instead). TPOT: the median decode step (s = 1) with `context`
// tokens already in the KV cache. The cache rows are filled with random values instead
// of a prefill: a step's time does not depend on them, and the decode-shaped plan runs a
// 256-token prefill slowly (see docs/CPU_BACKEND.md, Benchmarks).
int run_decode(const Args& a) {
  LUMINAL_CHECK(!a.model.empty(), "--case decode needs --model DIR");
  models::ModelOptions mo;
  mo.max_seq_len = a.context + a.steps + 8;
  mo.keep_weight_dtype = !a.f32_weights;
  auto compile = [&](CompileReport* report) {
    models::CausalLM m = models::CausalLM::from_pretrained(a.model, mo);
    m.graph().set_dim("p", a.context);  // search at the decode shape that is timed
    CompileOptions o = m.with_prefill_plan(compile_options(a));
    if (report) o.report(report);
    auto t = clock_type::now();
    cpu::CpuRuntime rt = m.graph().compile(cpu::CpuRuntime{}, o);
    return std::tuple{std::move(m), std::move(rt), seconds_since(t)};
  };
  double cold = 0;
  int cold_kernels = 0;
  {
    auto [m, rt, seconds] = compile(nullptr);
    cold = seconds;
    cold_kernels = rt.kernels_compiled();
  }
  CompileReport report;
  auto [model, rt, warm] = compile(&report);
  auto t = clock_type::now();
  model.load_weights(rt);
  const double load_s = seconds_since(t);
  std::mt19937 rng(3);
  const int64_t vocab = model.config().vocab_size;
  double prefill_ms = -1;
  if (a.prefill) {
    // The context as one prefill (p = 0, s = context) on the same compiled plan.
    std::vector<int32_t> prompt(static_cast<size_t>(a.context));
    for (auto& id : prompt) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    t = clock_type::now();
    rt.set_tensor(model.input_ids().id(), HostTensor::from<int32_t>(prompt, DType::I32, {a.context}));
    rt.execute({{"p", 0}, {"s", a.context}});
    prefill_ms = 1e3 * seconds_since(t);
  } else {
    std::normal_distribution<float> dist(0.f, 1.f);
    for (const auto& kv : model.caches()) {
      std::vector<float> rows(static_cast<size_t>(kv.max_seq * kv.kv_heads * kv.head_dim));
      for (auto& e : rows) e = dist(rng);
      rt.set_data(kv.k, rows);
      rt.set_data(kv.v, rows);
    }
  }
  int32_t next = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  std::vector<double> steps;
  for (int s = 0; s < a.steps + 2; ++s) {  // the first two warm up
    t = clock_type::now();
    rt.set_tensor(model.input_ids().id(), HostTensor::from<int32_t>(std::vector<int32_t>{next}, DType::I32, {1}));
    rt.execute({{"p", a.context + s}, {"s", 1}});
    std::vector<float> logits = rt.get_f32(model.logits());
    next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (s >= 2) steps.push_back(1e3 * seconds_since(t));
  }
  std::sort(steps.begin(), steps.end());
  print_common(a, steps[steps.size() / 2], cold, warm, report, cold_kernels);
  std::printf(",\"load_s\":%.4g,\"weights_dtype\":\"%s\"", load_s,
              std::string(dtype_name(model.config().weight_dtype)).c_str());
  if (a.prefill) std::printf(",\"prefill_ms\":%.6g", prefill_ms);
  std::printf("}\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  std::map<std::string, std::string> kv;
  for (int i = 1; i + 1 < argc; i += 2) kv[argv[i]] = argv[i + 1];
  if (!kv.count("--case")) return 0;  // scripts/bench runs every suite_cpu* binary; the driver is suite_cpu.py
  try {
    a.case_name = kv["--case"];
    if (kv.count("--reps")) a.reps = std::stoi(kv["--reps"]);
    if (kv.count("--inputs")) a.inputs = kv["--inputs"];
    if (kv.count("--dump")) a.dump = kv["--dump"];
    if (kv.count("--model")) a.model = kv["--model"];
    if (kv.count("--context")) a.context = std::stoi(kv["--context"]);
    if (kv.count("--steps")) a.steps = std::stoi(kv["--steps"]);
    if (kv.count("--search")) a.search = std::stoi(kv["--search"]);
    a.verbose = kv.count("--verbose") && kv["--verbose"] == "1";
    a.prefill = kv.count("--prefill") && kv["--prefill"] == "1";
    if (kv.count("--verify")) {
      LUMINAL_CHECK(kv["--verify"] == "auto" || kv["--verify"] == "never", "--verify: auto or never, not '",
                    kv["--verify"], "'");
      a.verify = kv["--verify"] == "never" ? VerifyMode::Never : VerifyMode::Auto;
    }
    if (kv.count("--weights")) {
      LUMINAL_CHECK(kv["--weights"] == "f32" || kv["--weights"] == "checkpoint", "--weights: f32 or checkpoint, not '",
                    kv["--weights"], "'");
      a.f32_weights = kv["--weights"] == "f32";
    }
    if (kv.count("--profile-timeout")) a.profile_timeout = std::stod(kv["--profile-timeout"]);
    if (kv.count("--search-time")) a.search_time = std::stod(kv["--search-time"]);
    return a.case_name == "decode" ? run_decode(a) : run_graph_case(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "suite_cpu: %s\n", e.what());
    return 1;
  }
}
