// The CUDA runtime against the reference interpreter, on the device: every op family
// through the tensor API (negatives, odd sizes, strided and broadcast views, dtypes,
// symbolic dims), matmuls through both implementations (cuBLASLt and our GEMV), blocks of
// real models compiled with search, CUDA-graph replay across runs and dims changes,
// state updates (a KV cache), custom ops through their host reference, external device
// pointers. Each test skips, saying so, where no GPU is usable.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include "luminal/kernel/program_kernels.hpp"
#include "luminal/luminal.hpp"
#include "luminal/search/genetic.hpp"
#include "luminal/search/hlir_egraph.hpp"
#include "luminal_cuda/cuda_runtime.hpp"
#include "test_graphs.hpp"
#include "test_util.hpp"

using namespace luminal;

namespace {

bool same_value(double a, double b, double tol) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::abs(a - b) <= tol * (1 + std::abs(b));
}

HostTensor varied(DType dt, size_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> dist(0.0, 1.5);
  const double special[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, -1.0, 3.0};
  HostTensor t = HostTensor::zeros(dt, n);
  for (size_t k = 0; k < n; ++k) {
    if (!is_float(dt)) t.set_i64(k, static_cast<int64_t>(rng() % 7) - 3);
    else t.set_f64(k, specials && rng() % 8 == 0 ? special[rng() % std::size(special)] : dist(rng));
  }
  return t;
}

double tolerance(DType dt, double tol) { return dt == DType::BF16 ? 3e-2 : dt == DType::F16 ? 1e-2 : tol; }

// half_tol, when set, replaces the BF16/F16 tolerance (see MatmulLayouts).
void expect_outputs_match(Runtime& got_rt, Runtime& want_rt, const std::vector<GraphTensor>& outputs,
                          const std::string& what, double tol, double half_tol = 0) {
  for (size_t o = 0; o < outputs.size(); ++o) {
    auto got = got_rt.get(outputs[o]).to_f64(), want = want_rt.get(outputs[o]).to_f64();
    ASSERT_EQ(got.size(), want.size()) << what << " output " << o;
    const double t = half_tol > 0 && luminal::is_half_float(outputs[o].dtype()) ? half_tol : tolerance(outputs[o].dtype(), tol);
    for (size_t k = 0; k < got.size(); ++k)
      ASSERT_TRUE(same_value(got[k], want[k], t)) << what << " output " << o << " element " << k << ": " << got[k]
                                                  << " instead of " << want[k];
  }
}

using Build = std::function<std::vector<GraphTensor>(luminal::Graph&, std::vector<GraphTensor>&)>;

// Build a graph, compile it for the CUDA backend (with search) and the reference
// runtime, run both on the same varied data for every dims map, compare every output.
void check(const std::string& what, const Build& build, std::vector<DimMap> dim_sets = {{}}, bool specials = true,
           double tol = 1e-4, CompileOptions options = CompileOptions().search_graph_limit(8).trials(1),
           double half_tol = 0) {
  luminal::Graph cx;
  std::vector<GraphTensor> inputs;
  auto outputs = build(cx, inputs);
  for (auto& o : outputs) o = o.output();
  for (const auto& [k, v] : dim_sets.front()) cx.set_dim(k, v);
  auto gpu = cx.compile(cuda::CudaRuntime{}, options);
  auto ref = cx.compile(ReferenceRuntime{}, CompileOptions().search_graph_limit(1));
  uint32_t seed = 1;
  for (int repeat = 0; repeat < 2; ++repeat)  // the second pass replays the captured graphs
    for (const auto& dims : dim_sets) {
      DimMap all = cx.dim_map();
      for (const auto& [k, v] : dims) all[k] = v;
      for (auto& in : inputs) {
        HostTensor t = varied(in.dtype(), static_cast<size_t>(in.numel().eval(all)), seed++, specials);
        gpu.set_data(in, t);
        ref.set_data(in, t);
      }
      gpu.execute(all);
      ref.execute(all);
      expect_outputs_match(gpu, ref, outputs, what, tol, half_tol);
    }
}

// The first of `attempts` random programs for `m` from the e-graph grown by the core and
// CUDA rules that `accept` takes (it may edit the program).
std::optional<search::Extracted> extracted_program(luminal::testing::TestModel& m, int attempts, uint64_t seed,
                                                   const std::function<bool(search::Extracted&)>& accept) {
  auto lowered = search::lower_to_egraph(m.cx, [](egraph::EGraph& eg) { cuda::register_runtime_primitives(eg); });
  auto files = search::core_rule_files();
  for (auto& f : cuda::runtime_rule_files()) files.push_back(f);
  search::load_rule_files(lowered, files);
  ReferenceRuntime base;
  for (const auto& stage : cuda::runtime_rule_stages(base, CompileOptions().rulesets({"core"}))) {
    std::vector<egraph::Schedule> sets;
    for (auto& rs : stage.rulesets) sets.push_back(egraph::Schedule::run(rs));
    lowered.egraph->run(egraph::Schedule::saturate(sets), {});
  }
  auto space = search::choice_space(lowered);
  std::mt19937_64 rng(seed);
  for (int attempt = 0; attempt < attempts; ++attempt) {
    search::Genome g(space.slots.size());
    for (size_t s = 0; s < g.size(); ++s) g[s] = static_cast<uint32_t>(rng() % space.options[s].size());
    auto p = search::extract(lowered, space, g);
    if (p && accept(*p)) return p;
  }
  return std::nullopt;
}

// A program for `m` from the e-graph with CUDA rules, its matmuls all `matmul_op`; with
// `b_dtype`, only one whose matmuls read a B operand of that dtype.
std::optional<search::Extracted> program_with_matmuls(luminal::testing::TestModel& m, const std::string& matmul_op,
                                                      std::optional<DType> b_dtype = std::nullopt,
                                                      int min_matmuls = 1, bool residual = false) {
  // The plain matmul ops, or (residual) those that add a third input in their epilogue.
  const std::string gemv = residual ? "CudaGemvAdd" : "CudaGemv", lt = residual ? "CudaCublasLtAdd" : "CudaCublasLt";
  return extracted_program(m, 400, 5, [&](search::Extracted& p) {
    int matmuls = 0;
    bool wanted = true;
    for (NodeId i = 0; i < p.program.size(); ++i) {
      const Node& n = p.program.node(i);
      if (n.op != OpKind::BackendOp || (n.backend->name != gemv && n.backend->name != lt)) continue;
      if (b_dtype && p.program.node(n.inputs[1].node).dtype != *b_dtype) wanted = false;
      auto call = *n.backend;
      call.name = matmul_op;
      p.program.mutable_node(i).backend = std::make_shared<const BackendOpCall>(std::move(call));
      ++matmuls;
    }
    return matmuls >= min_matmuls && wanted;
  });
}

// `p` on the device and `m` itself on the reference, ready to run side by side.
struct DeviceAndReference {
  cuda::CudaRuntime gpu;
  ReferenceRuntime ref;
  DeviceAndReference(const search::Extracted& p, luminal::testing::TestModel& m) {
    gpu.load_program(0, p.program, p.io_of);
    std::vector<NodeId> ids(m.cx.size());
    for (NodeId i = 0; i < ids.size(); ++i) ids[i] = i;
    ref.load(m.cx, ids);
  }
  // One run of both at `dim` = `len` on the same varied inputs, compared; the input at
  // `special_input` also holds +-0, +-inf and NaN.
  void step(luminal::testing::TestModel& m, DType dt, const std::string& dim, int64_t len, uint32_t seed,
            const std::string& what, double tol, double half_tol, std::optional<size_t> special_input = std::nullopt) {
    for (size_t k = 0; k < m.inputs.size(); ++k) {
      auto& in = m.inputs[k];
      HostTensor t = varied(dt, static_cast<size_t>(in.numel().eval({{dim, len}})), seed++, special_input == k);
      gpu.set_tensor(in.id(), t);
      ref.set_tensor(in.id(), t);
    }
    gpu.execute({{dim, len}});
    ref.execute({{dim, len}});
    expect_outputs_match(gpu, ref, m.outputs, what + " " + dim + " " + std::to_string(len), tol, half_tol);
  }
};

// Runs `p`, the program of y = x [rows, K] . w [N, K]^T, on the device and compares y with
// the products summed in double: within `magnitude_tol` of the products' magnitudes plus
// `rounding` of the result (and 1e-6).
void expect_linear_matches(const search::Extracted& p, luminal::testing::TestModel& m, const GraphTensor& x,
                           const GraphTensor& w, const HostTensor& xv, const HostTensor& wv, int rows, int N, int K,
                           double magnitude_tol, double rounding, const std::string& what) {
  cuda::CudaRuntime rt;
  rt.load_program(0, p.program, p.io_of);
  rt.set_tensor(x.id(), xv);
  rt.set_tensor(w.id(), wv);
  rt.execute(m.cx.dim_map());
  auto got = rt.get(m.outputs[0]).to_f64();
  ASSERT_EQ(got.size(), size_t(rows) * N) << what;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < N; ++j) {
      double want = 0, magnitude = 0;
      for (int k = 0; k < K; ++k) {
        const double prod = xv.get_f64(size_t(i) * K + k) * wv.get_f64(size_t(j) * K + k);
        want += prod;
        magnitude += std::abs(prod);
      }
      ASSERT_NEAR(got[size_t(i) * N + j], want, magnitude_tol * magnitude + rounding * std::abs(want) + 1e-6)
          << what << " at " << i << "," << j;
    }
}

}  // namespace

TEST(CudaRuntime, ElementwiseAndReductions) {
  LUMINAL_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    check(std::string("unary ") + std::string(dtype_name(dt)), [dt](luminal::Graph& cx, std::vector<GraphTensor>& in) {
      auto x = cx.tensor({7, 13}, dt);
      in = {x};
      return std::vector<GraphTensor>{x.exp(), x.log(), x.sin(), x.sqrt(), x.reciprocal(), x.abs(), x.relu(),
                                      x.sigmoid(), x.tanh(), x.sum({1}), x.max({0}), x.mean({1})};
    });
  }
  check("binary with broadcast and transposed views", [](luminal::Graph& cx, std::vector<GraphTensor>& in) {
    auto a = cx.tensor({5, 9});
    auto b = cx.tensor({9, 5});
    auto c = cx.tensor({9});
    in = {a, b, c};
    return std::vector<GraphTensor>{a + b.t(), a * c, a - c, a / (b.t() + 3.0), a.maximum(b.t()),
                                    a.lt(b.t()).cast(DType::F32), a % (c + 5.0)};
  });
  check("integers", [](luminal::Graph& cx, std::vector<GraphTensor>& in) {
    auto a = cx.tensor({4, 6}, DType::I32);
    auto b = cx.tensor({6}, DType::I32);
    in = {a, b};
    return std::vector<GraphTensor>{a + b, a * b, a.sum({0}), a.max({1}), (a * 3 + b).cast(DType::F32)};
  });
  check("long reductions (pairwise over lanes)", [](luminal::Graph& cx, std::vector<GraphTensor>& in) {
    auto x = cx.tensor({3, 4099});
    in = {x};
    return std::vector<GraphTensor>{x.sum({1}), x.max({1}), (x * x).mean({1}), x.sum({0})};
  }, {{}}, false, 1e-5);
}

TEST(CudaRuntime, FusedNormsAndSoftmax) {
  LUMINAL_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16})
    check("softmax / norms", [dt](luminal::Graph& cx, std::vector<GraphTensor>& in) {
      auto x = cx.tensor({6, 333}, dt);
      auto w = cx.tensor({333}, dt);
      in = {x, w};
      return std::vector<GraphTensor>{x.softmax(1), x.rms_norm(1, w, 1e-5), x.layer_norm(1, std::nullopt, std::nullopt, 1e-5),
                                      x.gelu_tanh(), x.silu()};
    }, {{}}, /*specials=*/false);
}

namespace {
bool fake_device() { return cuda::available().message.find("Fake") != std::string::npos; }
}  // namespace

// Block-per-row kernels (a reduction over a run-time length, or rows of 1024 or more)
// launch from 32 to 1024 threads, chosen from the length's and the row count's bands at
// run time: lengths in several bands (one shorter than a warp, one not a multiple of any
// block), a static row of 4100 (1024 threads, a ragged tail), and, on a GPU, rows enough
// to shrink the blocks; each dims set after the first starts another band. The data mixes
// in +-0, +-inf, NaN and large values, which every partition of a row must carry alike.
TEST(CudaRuntime, BlockPerRowLaunchesFollowTheRowLength) {
  LUMINAL_REQUIRE_GPU();
  std::vector<DimMap> dims = {{{"n", 20}, {"r", 3}}, {{"n", 70}, {"r", 2}}, {{"n", 1500}, {"r", 5}}};
  if (!fake_device()) dims.push_back({{"n", 700}, {"r", 3000}});
  for (DType dt : {DType::F32, DType::BF16})
    check(std::string("block-per-row ") + std::string(dtype_name(dt)),
          [dt](luminal::Graph& cx, std::vector<GraphTensor>& in) {
            Expression n = Expression::var("n"), r = Expression::var("r");
            auto x = cx.tensor({r, n}, dt);
            auto wide = cx.tensor({r, 4100}, dt);
            auto w = cx.tensor({4100}, dt);
            in = {x, wide, w};
            return std::vector<GraphTensor>{(x * 0.7).softmax(1), x.sum({1}), wide.rms_norm(1, w, 1e-5),
                                            wide.softmax(1)};
          },
          dims, /*specials=*/true, 1e-4, CompileOptions().search_graph_limit(4).trials(1), /*half_tol=*/2e-2);
}

// Elementwise kernels loop over their elements: past a few waves of resident threads each
// thread takes four (Resolver::add_kernel). Sizes on both sides of that line (a symbolic
// row count, so one program runs both), ragged tails, a broadcast row and a transposed
// read, on special values.
TEST(CudaRuntime, LargeElementwiseKernelsTakeSeveralElementsPerThread) {
  LUMINAL_REQUIRE_GPU();
  std::vector<DimMap> dims = {{{"r", 3}}, {{"r", 1201}}, {{"r", 7}}};
  for (DType dt : {DType::F32, DType::BF16})
    check(std::string("large elementwise ") + std::string(dtype_name(dt)),
          [dt](luminal::Graph& cx, std::vector<GraphTensor>& in) {
            Expression r = Expression::var("r");
            auto x = cx.tensor({r, 1027}, dt);
            auto b = cx.tensor({1027}, dt);
            auto y = cx.tensor({1027, r}, dt);
            in = {x, b, y};
            return std::vector<GraphTensor>{x.silu() * b, x - y.t(), (x * 0.5).exp()};
          },
          dims, /*specials=*/true, 1e-4, CompileOptions().search_graph_limit(4).trials(1), /*half_tol=*/2e-2);
}

TEST(CudaRuntime, MatmulLayouts) {
  LUMINAL_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16})
    check(std::string("matmul layouts ") + std::string(dtype_name(dt)), [dt](luminal::Graph& cx, std::vector<GraphTensor>& in) {
      auto a = cx.tensor({17, 31}, dt);
      auto b = cx.tensor({31, 9}, dt);
      auto bt = cx.tensor({9, 31}, dt);
      auto at = cx.tensor({31, 17}, dt);
      auto ba = cx.tensor({3, 17, 31}, dt);
      auto bb = cx.tensor({3, 31, 9}, dt);
      auto row = cx.tensor({1, 31}, dt);
      in = {a, b, bt, at, ba, bb, row};
      return std::vector<GraphTensor>{a.matmul(b), a.matmul(bt.t()), at.t().matmul(b), ba.matmul(bb), ba.matmul(b),
                                      a.linear(bt), row.linear(bt), a.slice(1, 2, 31).matmul(b.slice(0, 2, 31)),
                                      a.slice(1, 0, 31, 2).matmul(b.slice(0, 0, 31, 2))};
      // BF16: the reference rounds each product to BF16 before summing, a GEMM only its
      // sum, so an output that cancels (~0.1 from 31 products of ~1.4) differs by up to
      // sum|a b| * 2^-9 (~0.09) while a wrong layout is off by the outputs' own size (~12).
    }, {{}}, /*specials=*/false, 1e-4, CompileOptions().search_graph_limit(8).trials(1), /*half_tol=*/0.1);
}

TEST(CudaRuntime, MatmulThroughBothImplementations) {
  LUMINAL_REQUIRE_GPU();
  // Against exact products summed in double (the reference interpreter rounds each product
  // to F16/BF16 first, which a GEMM does not): within fp32 accumulation of the products'
  // magnitudes plus one rounding of the result to the dtype.
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (int rows : {1, 3, 16, 40}) {  // 40 rows: the GEMV op falls back to cuBLASLt
      const int K = 72, N = 50;
      luminal::testing::TestModel m;
      auto x = m.cx.named_tensor("x", {rows, K}, dt);
      auto w = m.cx.named_tensor("w", {N, K}, dt).persist();
      m.inputs = {x, w};
      m.outputs.push_back(x.linear(w).output());
      HostTensor xv = varied(dt, static_cast<size_t>(rows) * K, 3, false), wv = varied(dt, size_t(N) * K, 4, false);
      const double rounding = dt == DType::BF16 ? 1.0 / 128 : dt == DType::F16 ? 1.0 / 1024 : 1e-6;
      for (const char* impl : {"CudaGemv", "CudaCublasLt"}) {
        auto p = program_with_matmuls(m, impl);
        ASSERT_TRUE(p.has_value()) << "no program with a matmul op";
        expect_linear_matches(*p, m, x, w, xv, wv, rows, N, K, 1e-5, rounding,
                              detail::concat(impl, " ", dtype_name(dt), " rows ", rows));
      }
    }
}

// A linear layer over a row count that changes between runs, with CUDA graphs on: the
// first run is eager, the next ones captured, and each new row count instantiated (its
// kernels differ from the live graph's) or replayed under its own graph. Each run
// against the reference, both matmul ops, F32 and BF16: the plain twin of the residual
// test below, so a failure there that shows here too is not the epilogue's.
TEST(CudaRuntime, AMatmulOverAChangingRowCountMatchesUnderGraphs) {
  LUMINAL_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16}) {
    const int K = 72, N = 40;
    luminal::testing::TestModel m;
    const Expression rows = Expression::var("rows");
    auto x = m.cx.named_tensor("x", {rows, K}, dt);
    auto w = m.cx.named_tensor("w", {N, K}, dt).persist();
    m.inputs = {x, w};
    m.outputs.push_back(x.linear(w).output());
    m.cx.set_dim("rows", 3);
    for (const char* impl : {"CudaGemv", "CudaCublasLt"}) {
      const std::string what = detail::concat(impl, " ", dtype_name(dt));
      auto p = program_with_matmuls(m, impl);
      ASSERT_TRUE(p.has_value()) << what << ": no program with a matmul op";
      DeviceAndReference both(*p, m);
      uint32_t seed = 90;
      for (int64_t len : std::vector<int64_t>{1, 3, 40, 1, 40, 3}) {
        both.step(m, dt, "rows", len, seed, what, 1e-4, 0.1);
        seed += 3;
        if (::testing::Test::HasFatalFailure()) return;
      }
      // Each row count launches other kernels (a GEMV variant per row capacity, a cuBLASLt
      // plan per m): never an update of the live graph (GraphExec::launches_same_as). The
      // H100 ran such updates wrong; the emulation, which takes them, counts them.
      EXPECT_EQ(both.gpu.graphs_updated(), 0) << what;
      EXPECT_GT(both.gpu.graphs_captured(), 0) << what << ": the runs after the first were not captured";
    }
  }
}

// A residual added to a linear layer's result (`h + o_proj(a)`) is added in the matmul's
// epilogue (rules/cuda_residual.egg): the GEMV adds it, cuBLASLt reads it as D with beta 1.
// Both operand orders of the Add, 1 and 3 rows (the GEMV), 40 (the GEMV op falls back to
// cuBLASLt), two lengths of a symbolic row count (the resolution and the replay), against
// the reference, then a residual holding +-0, +-inf and NaN; and the residual is the
// matmul's only other input, so a result that ignored it, or added it twice, would fail.
TEST(CudaRuntime, AResidualIsAddedInTheMatmulsEpilogue) {
  LUMINAL_REQUIRE_GPU();
  ::unsetenv("LUMINAL_CUDA_RESIDUAL_EPILOGUE");  // on by default (runtime_rule_files); =0 would leave it out
  const bool emulated = fake_device();
  for (DType dt : {DType::F32, DType::BF16})
    for (bool residual_first : {true, false}) {
      const int K = 72, N = 40;
      luminal::testing::TestModel m;
      const Expression rows = Expression::var("rows");
      auto x = m.cx.named_tensor("x", {rows, K}, dt);
      auto w = m.cx.named_tensor("w", {N, K}, dt).persist();
      auto r = m.cx.named_tensor("r", {rows, N}, dt);
      m.inputs = {x, w, r};
      auto y = x.linear(w);
      m.outputs.push_back((residual_first ? r + y : y + r).output());
      m.cx.set_dim("rows", 3);
      for (const char* impl : {"CudaGemvAdd", "CudaCublasLtAdd"}) {
        const std::string what = detail::concat(impl, " ", dtype_name(dt), residual_first ? " r + xW" : " xW + r");
        auto p = program_with_matmuls(m, impl, std::nullopt, 1, /*residual=*/true);
        ASSERT_TRUE(p.has_value()) << what << ": no program adds the residual in a matmul";
        for (const Node& n : p->program.nodes())
          EXPECT_TRUE(n.op == OpKind::Input || n.op == OpKind::Output || (n.op == OpKind::BackendOp && n.backend->name == impl))
              << what << ": the program computes more than the one matmul (" << op_name(n.op) << ")";
        DeviceAndReference both(*p, m);
        uint32_t seed = 60;
        for (int64_t len : emulated ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{1, 3, 40, 1}) {
          both.step(m, dt, "rows", len, seed, what, 1e-4, 0.1);
          seed += 3;
          if (::testing::Test::HasFatalFailure()) return;
        }
        // The residual with +-0, +-inf and NaN: added as the unfused Add adds it (inf + a
        // finite product stays inf, NaN stays NaN, -0 + 0 is 0), by the GEMV and cuBLASLt.
        for (int64_t len : emulated ? std::vector<int64_t>{3} : std::vector<int64_t>{3, 40}) {
          both.step(m, dt, "rows", len, seed, what + " special residual", 1e-4, 0.1, 2);
          seed += 3;
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
}

// Grouped-query attention as the models spell it (models/src/nn.cpp, gqa_attention: q
// stacked per kv head, scores rounded to the dtype, upcast, scaled, a causal mask added,
// softmax in F32, probabilities rounded, times v) runs as one CudaAttention kernel
// (rules/cuda_attention.egg). Against the reference: F16 and BF16, head dims 24 (scalar
// loads of k) and 32 (16-byte loads), one new token over growing caches and several
// tokens at once (the mask cuts rows off), 2100 keys (past what the kernel keeps in shared
// memory: scores computed again), NaN and infinities in the data; the program
// keeps no matmul and no reduction besides the one op. Head dim 64 also runs prompts of
// 33 to 300 tokens (66 to 600 rows per kv head: the tensor-core kernel, attention_flash.cu,
// with a last block of 2 rows, keys not a multiple of its 64-key tiles, and rows whose
// first tiles are all masked: the window below) beside decode steps (the rows kernel).
TEST(CudaRuntime, AttentionRunsAsOneKernel) {
  LUMINAL_REQUIRE_GPU();
  ::setenv("LUMINAL_CUDA_ATTENTION", "1", 1);
  struct Unset {
    ~Unset() { ::unsetenv("LUMINAL_CUDA_ATTENTION"); }
  } unset;
  const bool emulated = fake_device();
  for (DType dt : {DType::BF16, DType::F16})
    for (int head_dim : {24, 32, 64}) {
      if (emulated && dt == DType::F16 && head_dim != 32) continue;
      const std::string what = detail::concat("attention ", dtype_name(dt), " d", head_dim);
      const int heads = 4, kv_heads = 2, group = heads / kv_heads;
      luminal::testing::TestModel m;
      const Expression p = Expression::var("p"), sq = Expression::var("s"), t = p + sq;
      auto q = m.cx.named_tensor("q", {sq, heads, head_dim}, dt);
      auto k = m.cx.named_tensor("k", {t, kv_heads, head_dim}, dt);
      auto v = m.cx.named_tensor("v", {t, kv_heads, head_dim}, dt);
      m.inputs = {q, k, v};
      const Expression z = Expression::index(), i = z / t, j = z % t;
      // Causal with -1e9; at head dim 64 a window of 150 keys (Gemma's local layers) with
      // -inf (log 0), so that a late row's first tiles are all -inf.
      auto mask = head_dim == 64
                      ? m.cx.iota(le(j, p + i) * le(p + i, j + 150), {sq, t}, DType::I32).cast(DType::F32).log()
                      : m.cx.iota((le(j, p + i) - 1) * 1000000000, {sq, t}, DType::I32).cast(DType::F32);
      auto qh = q.reshape({sq, kv_heads, group, head_dim}).permute({1, 2, 0, 3}).contiguous().reshape(
          {Expression(kv_heads), Expression(group) * sq, head_dim});
      auto scores = qh.matmul(k.permute({1, 2, 0})).reshape({Expression(kv_heads), Expression(group), sq, t})
                        .cast(DType::F32) * (1.0 / std::sqrt(double(head_dim)));
      auto probs = (scores + mask).softmax(-1).cast(dt).reshape({Expression(kv_heads), Expression(group) * sq, t});
      m.outputs.push_back(probs.matmul(v.permute({1, 0, 2})).output());
      m.cx.set_dim("p", 5);
      m.cx.set_dim("s", 1);
      auto chosen = extracted_program(m, 2000, 11, [](search::Extracted& program) {
        int attention = 0, other = 0;
        for (const Node& n : program.program.nodes()) {
          attention += n.op == OpKind::BackendOp && n.backend->name == "CudaAttention";
          other += n.op == OpKind::SumReduce || n.op == OpKind::MaxReduce ||
                   (n.op == OpKind::BackendOp && n.backend->name != "CudaAttention" && n.backend->name != "Fused");
        }
        return attention == 1 && other == 0;
      });
      ASSERT_TRUE(chosen.has_value()) << what << ": no program runs the attention as one op";
      DeviceAndReference both(*chosen, m);
      uint32_t seed = 80;
      using Dims = std::vector<std::pair<int64_t, int64_t>>;  // (p, s)
      Dims dims = emulated ? Dims{{5, 1}, {6, 1}, {2, 3}} : Dims{{5, 1}, {6, 1}, {40, 1}, {300, 1}, {2, 3}, {0, 7}, {2100, 1}, {41, 1}};
      if (head_dim == 64)
        dims = emulated ? Dims{{0, 33}, {5, 1}} : Dims{{0, 33}, {0, 300}, {5, 1}, {7, 130}, {400, 1}, {0, 64}};
      for (bool specials : {false, true})
        for (auto [past, seq] : dims) {
          const DimMap at{{"p", past}, {"s", seq}};
          for (auto& in : m.inputs) {
            HostTensor data = varied(dt, static_cast<size_t>(in.numel().eval(at)), seed++, specials);
            // Head dim 64: scores of ~N(0, 18) would lie where one BF16 step of a score (a
            // sum in another order rounding the other way) moves a probability by several
            // percent; at a third of the scale a step is well inside the tolerance.
            if (head_dim == 64)
              for (size_t e = 0; e < data.numel(); ++e) data.set_f64(e, data.get_f64(e) / 3);
            both.gpu.set_tensor(in.id(), data);
            both.ref.set_tensor(in.id(), data);
          }
          both.gpu.execute(at);
          both.ref.execute(at);
          expect_outputs_match(both.gpu, both.ref, m.outputs,
                               detail::concat(what, specials ? " specials" : "", " p ", past, " s ", seq), 1e-4, 3e-2);
          if (::testing::Test::HasFatalFailure()) return;
        }
    }
}

// GEMVs reading one x (an attention block's q, k, v projections) share one launch: the
// runtime moves them next to each other (another node, built between them, reads the first
// one's result) and joins up to four per launch; a fifth launches alone. Every result
// against the reference, at 1 and 3 rows, with x an intermediate (its arena buffer must
// outlive every member).
TEST(CudaRuntime, SiblingGemvsShareOneLaunch) {
  LUMINAL_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (int rows : {1, 3}) {
      const int K = 72;
      luminal::testing::TestModel m;
      auto xin = m.cx.named_tensor("x", {rows, K}, dt);
      m.inputs = {xin};
      auto x = xin * 1.5;
      std::vector<GraphTensor> results;
      int index = 0;
      for (int N : {64, 24, 24, 40, 8}) {
        auto w = m.cx.named_tensor(detail::concat("w", index++), {N, K}, dt).persist();
        m.inputs.push_back(w);
        auto y = x.linear(w);
        // The first result is read before the next projection is built.
        results.push_back(results.empty() ? (y * 0.5).output() : y.output());
      }
      m.outputs = results;
      auto p = program_with_matmuls(m, "CudaGemv", std::nullopt, 5);
      ASSERT_TRUE(p.has_value()) << "no program with five GEMV ops";
      DeviceAndReference both(*p, m);
      const std::string what = detail::concat("sibling GEMVs ", dtype_name(dt), " rows ", rows);
      // BF16: the reference rounds every product to BF16 (see MatmulLayouts).
      both.step(m, dt, "unused", 1, 7, what, 1e-4, 0.1);
      both.step(m, dt, "unused", 1, 9, what, 1e-4, 0.1);  // replayed
      EXPECT_EQ(both.gpu.gemvs_grouped(), 3) << what << ": four of the five share a launch";
    }
}

// The output projection of attention reads [kv, group * s, d] as [s, kv * group * d]: no
// linear view for every s (the matmul's step copies it), but one at s = 1 (a decode step),
// where the launch reads it in place with the strides it has there. Lengths 1, 3, 1, 2:
// each change of s must resolve anew (wrong strides at s = 3 read the wrong heads).
TEST(CudaRuntime, ANonLinearOperandIsReadInPlaceWhereItIsLinear) {
  LUMINAL_REQUIRE_GPU();
  for (DType dt : {DType::F32, DType::BF16})
    for (const char* impl : {"CudaGemv", "CudaCublasLt"}) {
      const std::string what = detail::concat(impl, " ", dtype_name(dt));
      luminal::testing::TestModel m;
      const Expression s = Expression::var("s");
      auto a = m.cx.named_tensor("a", {2, s * 3, 8}, dt);
      auto w = m.cx.named_tensor("w", {16, 48}, dt);
      m.inputs = {a, w};
      m.outputs.push_back(a.reshape({2, 3, s, 8}).permute({2, 0, 1, 3}).reshape({s, 48}).linear(w).output());
      m.cx.set_dim("s", 3);
      auto p = program_with_matmuls(m, impl);
      ASSERT_TRUE(p.has_value()) << what << ": no program with a matmul op";
      bool copied_operand = false;  // the case this test is about
      for (NodeId i = 0; i < p->program.size(); ++i) {
        const Node& n = p->program.node(i);
        if (n.op != OpKind::BackendOp || n.backend->name != impl) continue;
        auto l = kernel::gemm_layout(n.inputs[0].view, n.inputs[1].view);
        copied_operand = copied_operand || (l && (l->a.copy || l->b.copy));
      }
      ASSERT_TRUE(copied_operand) << what << ": the program reads no operand through a non-linear view";
      DeviceAndReference both(*p, m);
      uint32_t seed = 40;
      for (int64_t len : {1, 3, 1, 2}) {
        both.step(m, dt, "s", len, seed, what, 1e-4, 0.1);
        seed += 2;
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
}

TEST(CudaRuntime, F32ProductsReadHalfWeightsWithoutAnF32Copy) {
  LUMINAL_REQUIRE_GPU();
  // A model computing in F32 over an F16/BF16 checkpoint: x.linear(w.cast(F32)). The
  // half-weights rule gives matmuls reading w itself: the GEMV widens it in registers, and
  // cuBLASLt (also the GEMV op at 40 rows) reads an F32 copy made per call. Every half value
  // is exact in F32, so the result is the F32 product of the decoded weights: within fp32
  // accumulation of the products' magnitudes. K = 72 takes the vector path, K = 45 the scalar one.
  for (DType wdt : {DType::F16, DType::BF16})
    for (int rows : {1, 3, 40})
      for (int K : {72, 45}) {
        const int N = 50;
        luminal::testing::TestModel m;
        auto x = m.cx.named_tensor("x", {rows, K}, DType::F32);
        auto w = m.cx.named_tensor("w", {N, K}, wdt).persist();
        m.inputs = {x, w};
        m.outputs.push_back(x.linear(w.cast(DType::F32)).output());
        HostTensor xv = varied(DType::F32, static_cast<size_t>(rows) * K, 7, false);
        HostTensor wv = varied(wdt, size_t(N) * K, 8, false);
        for (const char* impl : {"CudaGemv", "CudaCublasLt"}) {
          auto p = program_with_matmuls(m, impl, wdt);
          ASSERT_TRUE(p.has_value()) << "no program whose matmul reads the " << dtype_name(wdt) << " weight itself";
          int casts = 0;
          for (const Node& n : p->program.nodes()) casts += n.op == OpKind::Cast;
          EXPECT_EQ(casts, 0) << "the weight was still widened by a Cast node";
          expect_linear_matches(*p, m, x, w, xv, wv, rows, N, K, 1e-6, 1e-6,
                                detail::concat(impl, " ", dtype_name(wdt), " rows ", rows, " K ", K));
        }
      }
}

TEST(CudaRuntime, SymbolicDimsRunWithoutRecompiling) {
  LUMINAL_REQUIRE_GPU();
  check("symbolic seq", [](luminal::Graph& cx, std::vector<GraphTensor>& in) {
    Expression seq = Expression::var("seq");
    auto x = cx.tensor({seq, 8});
    auto w = cx.tensor({8, 8});
    in = {x, w};
    return std::vector<GraphTensor>{x.matmul(w).softmax(1), (x * 2.0).sum({0})};
  }, {{{"seq", 5}}, {{"seq", 11}}, {{"seq", 1}}, {{"seq", 40}}}, /*specials=*/false);
}

TEST(CudaRuntime, GatherAndEmbedding) {
  LUMINAL_REQUIRE_GPU();
  check("embedding", [](luminal::Graph& cx, std::vector<GraphTensor>& in) {
    auto table = cx.tensor({10, 6});
    auto ids = cx.tensor({4}, DType::I32);
    in = {table, ids};
    return std::vector<GraphTensor>{table.embedding(ids + 3)};
  }, {{}}, false);
}

TEST(CudaRuntime, GraphsReplayAcrossRunsAndDimsChanges) {
  LUMINAL_REQUIRE_GPU();
  luminal::Graph cx;
  Expression seq = Expression::var("seq");
  auto x = cx.tensor({seq, 12});
  auto w = cx.tensor({12, 12}).persist();
  auto y = (x.matmul(w) + 1.0).softmax(1).output();
  cx.set_dim("seq", 3);
  auto gpu = cx.compile(cuda::CudaRuntime{}, CompileOptions().search_graph_limit(4).trials(1));
  auto ref = cx.compile(ReferenceRuntime{}, CompileOptions().search_graph_limit(1));
  HostTensor wv = varied(DType::F32, 144, 9, false);
  gpu.set_data(w, wv);
  ref.set_data(w, wv);
  const int captured0 = gpu.graphs_captured(), updated0 = gpu.graphs_updated(), eager0 = gpu.eager_runs();
  const int replays0 = gpu.graph_replays();
  uint32_t seed = 20;
  // The largest dims first: buffers and the arena get their size once, so later dims keep
  // every pointer and only their own graph is captured.
  for (int64_t s : {7, 7, 7, 3, 3, 7, 1, 3}) {
    HostTensor xv = varied(DType::F32, static_cast<size_t>(s) * 12, seed++, false);
    gpu.set_data(x, xv);
    ref.set_data(x, xv);
    gpu.execute({{"seq", s}});
    ref.execute({{"seq", s}});
    expect_outputs_match(gpu, ref, {y}, "seq " + std::to_string(s), 1e-5);
  }
  // Only the first run goes eagerly; every other run replays a graph, or captures or
  // updates one. Seq 7's second run gets its own graph; seq 3, new, makes the live graph
  // (nothing to update yet); seq 1 updates it in place (or, where the device's matmul
  // changes the graph's nodes, instantiates it again); seq 3, run again while the live graph
  // holds seq 1, gets its own: 4 graph changes, replays of 7, 3, 7. Where the matmul the
  // search picked launches the same at seq 3 and 1 as at 7 (its launches hold across dims),
  // those runs reuse seq 7's resolution and replay its graph instead: fewer changes, never
  // more, and at least those three replays.
  const int changes = gpu.graphs_captured() - captured0 + gpu.graphs_updated() - updated0;
  EXPECT_GE(changes, 1);
  EXPECT_LE(changes, 4);
  EXPECT_EQ(gpu.eager_runs() - eager0, 1);
  EXPECT_EQ(changes + gpu.graph_replays() - replays0 + gpu.eager_runs() - eager0, 8);
  EXPECT_GE(gpu.graph_replays() - replays0, 3);
  // Without graphs: the same values.
  gpu.set_graphs_enabled(false);
  HostTensor xv = varied(DType::F32, 7 * 12, 99, false);
  gpu.set_data(x, xv);
  ref.set_data(x, xv);
  gpu.execute({{"seq", 7}});
  ref.execute({{"seq", 7}});
  expect_outputs_match(gpu, ref, {y}, "no graphs", 1e-5);
}

namespace {

// y = x * w - 1.5 (odd width, a grid that grows with n) and its column sums over the
// symbolic axis (a fixed grid, a loop as long as n read from the dims buffer).
struct GrowingProgram {
  luminal::Graph cx;
  GraphTensor x, w, y, sums;
  GrowingProgram() {
    Expression n = Expression::var("n");
    x = cx.tensor({n, 5});
    w = cx.tensor({5}).persist();
    auto prod = x * w.expand_dim(0, n) - 1.5;
    y = prod.output();
    sums = prod.sum({0}).output();
    cx.set_dim("n", 4);
  }
  // Compiled for the device (a short search) and for the reference, with the same weights.
  std::pair<cuda::CudaRuntime, ReferenceRuntime> compile(uint32_t weight_seed) {
    auto gpu = cx.compile(cuda::CudaRuntime{}, CompileOptions().search_graph_limit(2).trials(1));
    auto ref = cx.compile(ReferenceRuntime{}, CompileOptions().search_graph_limit(1));
    HostTensor wv = varied(DType::F32, 5, weight_seed, false);
    gpu.set_data(w, wv);
    ref.set_data(w, wv);
    return {std::move(gpu), std::move(ref)};
  }
};

// Runs the program at each n (a decode loop's growing position, and back), comparing
// with the reference at every step.
void run_lengths(GrowingProgram& g, Runtime& gpu, Runtime& ref, std::initializer_list<int64_t> lengths, uint32_t seed) {
  for (int64_t n : lengths) {
    HostTensor xv = varied(DType::F32, static_cast<size_t>(n) * 5, seed++, /*specials=*/n % 2 == 1);
    gpu.set_data(g.x, xv);
    ref.set_data(g.x, xv);
    gpu.execute({{"n", n}});
    ref.execute({{"n", n}});
    expect_outputs_match(gpu, ref, {g.y, g.sums}, "n " + std::to_string(n), 1e-5);
    if (::testing::Test::HasFatalFailure()) return;
  }
}
}  // namespace

// Decode with a growing position: every new length is a new resolution (grids, dims,
// and, as the arena and outputs grow, pointers), which updates the plan's executable
// graph in place instead of launching kernel by kernel.
TEST(CudaRuntime, NewDimsUpdateTheGraphInsteadOfRunningEagerly) {
  LUMINAL_REQUIRE_GPU();
  GrowingProgram g;
  auto [gpu, ref] = g.compile(3);
  ASSERT_TRUE(gpu.graph_updates_enabled());
  const int eager0 = gpu.eager_runs(), updated0 = gpu.graphs_updated(), captured0 = gpu.graphs_captured();
  const int reused0 = gpu.resolutions_reused();
  run_lengths(g, gpu, ref, {5}, 40);
  const int eager1 = gpu.eager_runs();
  EXPECT_LE(eager1 - eager0, 1);
  // 6 makes the live graph; each later length either updates it (the arena and outputs
  // grew: new pointers, a new resolution) or, where its launches are the last run's
  // (Resolved::serves), replays it with only the dims buffer written.
  run_lengths(g, gpu, ref, {6, 7, 6, 9, 3, 11, 8, 12}, 50);
  EXPECT_EQ(gpu.eager_runs(), eager1) << "a new length ran kernel by kernel";
  EXPECT_GE(gpu.graphs_updated() - updated0 + gpu.resolutions_reused() - reused0, 6);
  EXPECT_LE(gpu.graphs_captured() - captured0, 2);
  // A length seen before with the same pointers replays (its own graph or the live one).
  const int replays0 = gpu.graph_replays();
  run_lengths(g, gpu, ref, {12, 12, 5, 5}, 70);
  EXPECT_GE(gpu.graph_replays() - replays0, 2);
  EXPECT_EQ(gpu.eager_runs(), eager1);

  // Updates off: new lengths run eagerly and are captured on their second run, as before.
  gpu.set_graph_updates_enabled(false);
  const int updated1 = gpu.graphs_updated(), eager2 = gpu.eager_runs();
  run_lengths(g, gpu, ref, {10, 10, 2}, 90);
  EXPECT_EQ(gpu.graphs_updated(), updated1);
  EXPECT_LE(gpu.eager_runs() - eager2, 2);
}

// A decode loop's length growing by one, then shrinking: most steps launch exactly what
// the step before did (grids are rounded up, buffers planned with headroom), so they
// reuse its resolution and replay its graph, with only the dims buffer rewritten. The
// values match the reference at every step: a stale dims buffer would sum the wrong rows.
TEST(CudaRuntime, NewLengthsReuseTheLaunchesWhileTheyFit) {
  LUMINAL_REQUIRE_GPU();
  GrowingProgram g;
  auto [gpu, ref] = g.compile(5);
  std::vector<int64_t> lengths;
  for (int64_t n = 300; n < 340; ++n) lengths.push_back(n);
  for (int64_t n = 339; n > 250; n -= 7) lengths.push_back(n);
  const int resolved0 = gpu.resolutions(), reused0 = gpu.resolutions_reused(), eager0 = gpu.eager_runs();
  uint32_t seed = 200;
  for (int64_t n : lengths) run_lengths(g, gpu, ref, {n}, seed++);
  const int resolved = gpu.resolutions() - resolved0, reused = gpu.resolutions_reused() - reused0;
  // (A length seen before with the same pointers finds its own resolution: counted by neither.)
  EXPECT_LE(resolved + reused, static_cast<int>(lengths.size()));
  EXPECT_LE(resolved, 8) << "most new lengths should keep the last run's launches";
  EXPECT_GE(reused, 35);
  EXPECT_LE(gpu.eager_runs() - eager0, 1);
}

// Attention of one query row per head over a cache that grows by a position per step (a
// decode loop), its two matmuls put on cuBLASLt or the GEMV: both run as the small matmul
// kernel (their n or k follows the length), whose sizes come from the dims buffer, so the
// steps reuse one resolution and replay its graph. Every step matches the reference: a
// stale size would sum the wrong positions; odd sizes, and a batch of heads.
TEST(CudaRuntime, DecodeAttentionOverAGrowingCacheReusesItsLaunches) {
  LUMINAL_REQUIRE_GPU();
  // The emulation runs each step for seconds: there one case and 8 lengths.
  const bool emulated = fake_device();
  const int64_t last = emulated ? 45 : 60;
  for (DType dt : {DType::BF16, DType::F32})
    for (const char* impl : {"CudaCublasLt", "CudaGemv"}) {
      if (emulated && (dt != DType::BF16 || std::string_view(impl) != "CudaCublasLt")) continue;
      const std::string what = detail::concat(impl, " ", dtype_name(dt));
      luminal::testing::TestModel m;
      Expression n = Expression::var("n");
      auto q = m.cx.named_tensor("q", {3, 4, 24}, dt);
      auto k = m.cx.named_tensor("k", {3, n, 24}, dt);
      auto v = m.cx.named_tensor("v", {3, n, 24}, dt);
      m.inputs = {q, k, v};
      auto scores = q.matmul(k.permute({0, 2, 1})) * 0.2;
      m.outputs.push_back(scores.softmax(2).matmul(v).output());
      m.cx.set_dim("n", 37);
      auto p = program_with_matmuls(m, impl);
      ASSERT_TRUE(p.has_value()) << what << ": no program with a matmul op";
      DeviceAndReference both(*p, m);
      cuda::CudaRuntime& rt = both.gpu;
      const int resolved0 = rt.resolutions(), reused0 = rt.resolutions_reused();
      for (int64_t len = 37; len < last; ++len) {
        both.step(m, dt, "n", len, static_cast<uint32_t>(len) * 3, what, 1e-4, 3e-2);
        if (::testing::Test::HasFatalFailure()) return;
      }
      // New resolutions only where a buffer grew past its headroom (new pointers).
      EXPECT_LE(rt.resolutions() - resolved0, emulated ? 4 : 8) << what;
      EXPECT_GE(rt.resolutions_reused() - reused0, emulated ? 4 : 14) << what;
    }
}

// The small matmul on special values: +-0, +-inf, NaN and -1/3 among the data, and
// products past the float range (batch 0: row 0 meets 3e38 * 2 and 3e38 * -2, so +inf and
// -inf; row 1 only the first). Each product is rounded before it is summed, as the
// reference's Mul then SumReduce: +inf and -inf give NaN, not what a fused multiply-add
// of the finite exact product would leave.
TEST(CudaRuntime, SmallMatmulKeepsSpecialValuesAndOverflow) {
  LUMINAL_REQUIRE_GPU();
  luminal::testing::TestModel m;
  Expression n = Expression::var("n");
  auto a = m.cx.named_tensor("a", {3, 4, 24}, DType::F32);
  auto b = m.cx.named_tensor("b", {3, 24, n}, DType::F32);
  m.inputs = {a, b};
  m.outputs.push_back(a.matmul(b).output());
  m.cx.set_dim("n", 37);
  auto p = program_with_matmuls(m, "CudaCublasLt");
  ASSERT_TRUE(p.has_value()) << "no program with a matmul op";
  cuda::CudaRuntime rt;
  rt.load_program(0, p->program, p->io_of);
  std::vector<NodeId> ids(m.cx.size());
  for (NodeId i = 0; i < ids.size(); ++i) ids[i] = i;
  ReferenceRuntime ref;
  ref.load(m.cx, ids);
  // 37 and 5 run the lane-per-column path; 40 and 8 (B rows 16-byte aligned) the path
  // that reads 16 bytes of a row of B per thread and splits k over the block.
  for (int64_t len : {37, 5, 40, 8}) {
    HostTensor av = varied(DType::F32, 3 * 4 * 24, static_cast<uint32_t>(len), true);
    HostTensor bv = varied(DType::F32, static_cast<size_t>(3 * 24 * len), static_cast<uint32_t>(len) + 1, true);
    av.set_f64(0, 3e38);
    av.set_f64(1, 3e38);
    av.set_f64(24, 3e38);
    for (int64_t j = 0; j < len; ++j) {
      bv.set_f64(static_cast<size_t>(j), 2.0);
      bv.set_f64(static_cast<size_t>(len + j), -2.0);
    }
    rt.set_tensor(a.id(), av);
    rt.set_tensor(b.id(), bv);
    ref.set_tensor(a.id(), av);
    ref.set_tensor(b.id(), bv);
    rt.execute({{"n", len}});
    ref.execute({{"n", len}});
    expect_outputs_match(rt, ref, m.outputs, "length " + std::to_string(len), 1e-5);
    auto got = rt.get(m.outputs[0]).to_f64();
    EXPECT_TRUE(std::isnan(got[0])) << "batch 0, row 0: +inf and -inf products";
  }
}

// Milliseconds per step of a launch-bound loop whose length grows by one each step (a
// decode loop's position; 24 layers, about 100 small kernels per step), with graph updates,
// eagerly, and replayed at a fixed length: printed for the GPU run's log. No time is
// asserted (a shared machine); the values are checked against the reference at the end.
// Under the host emulation (whose times say nothing) it runs 1 layer and 3 steps a mode.
TEST(CudaRuntime, GrowingLengthLoopTimings) {
  LUMINAL_REQUIRE_GPU();
  const bool emulated = fake_device();
  const int layers = emulated ? 1 : 24, steps = emulated ? 3 : 60;
  luminal::Graph cx;
  Expression n = Expression::var("n");
  auto x = cx.tensor({n, 64});
  std::vector<GraphTensor> weights;
  GraphTensor h = x;
  for (int layer = 0; layer < layers; ++layer) {
    auto w = cx.tensor({64}).persist();
    weights.push_back(w);
    auto attention = (h * w.expand_dim(0, n)).sum({1}).softmax(0);  // over the growing axis
    h = h * 0.75 + attention.expand_dim(1, 64) * h;
  }
  auto out = h.sum({0}).output();
  std::vector<NodeId> ids(cx.size());
  for (NodeId i = 0; i < ids.size(); ++i) ids[i] = i;
  cuda::CudaRuntime rt;
  rt.load(cx, ids);  // the program as written (fused by the runtime's fuse_program), no search
  ReferenceRuntime ref;
  ref.load(cx, ids);
  for (size_t l = 0; l < weights.size(); ++l) {
    HostTensor wv = varied(DType::F32, 64, 500 + static_cast<uint32_t>(l), false);
    rt.set_data(weights[l], wv);
    ref.set_data(weights[l], wv);
  }
  auto step = [&](int64_t len) {
    rt.set_data(x, varied(DType::F32, static_cast<size_t>(len) * 64, static_cast<uint32_t>(len), false));
    rt.execute({{"n", len}});
  };
  auto ms_per_step = [&](int64_t first, int steps, bool grow) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < steps; ++k) step(grow ? first + k : first);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
  };
  step(63);
  step(64);
  const int updated0 = rt.graphs_updated(), captured0 = rt.graphs_captured(), reused0 = rt.resolutions_reused();
  const double updates = ms_per_step(65, steps, true);
  const int updated = rt.graphs_updated() - updated0, captured = rt.graphs_captured() - captured0;
  const int reused = rt.resolutions_reused() - reused0;
  rt.set_graphs_enabled(false);
  const int eager0 = rt.eager_runs();
  const double eager = ms_per_step(65 + steps, steps, true);
  EXPECT_EQ(rt.eager_runs() - eager0, steps);
  rt.set_graphs_enabled(true);
  const int64_t last = 65 + 2 * steps;
  const int replays0 = rt.graph_replays();
  const double replay = ms_per_step(last, steps, false);
  EXPECT_GE(rt.graph_replays() - replays0, steps - 2);
  std::printf("growing length (%d layers), ms per step incl. an [n, 64] input upload: graph updates or reuse %.3f, "
              "eager %.3f, replay at a fixed length %.3f; %d graphs updated, %d instantiated, %d reused over %d new "
              "lengths\n",
              layers, updates, eager, replay, updated, captured, reused, steps);
  EXPECT_GE(updated + reused, steps - 2);
  // The last length, against the reference.
  HostTensor xv = varied(DType::F32, static_cast<size_t>(last) * 64, 7, false);
  rt.set_data(x, xv);
  ref.set_data(x, xv);
  rt.execute({{"n", last}});
  ref.execute({{"n", last}});
  expect_outputs_match(rt, ref, {out}, "n " + std::to_string(last), 1e-3);
}

// A driver that refuses every update (the emulation's LUMINAL_FAKE_CUDA_GRAPH_UPDATE=0
// answers CUDA_ERROR_NOT_SUPPORTED): each new length instantiates the graph again, and
// after a few refusals in a row the plan runs new lengths eagerly; results stay right.
TEST(CudaRuntime, RefusedGraphUpdatesFallBack) {
  LUMINAL_REQUIRE_GPU();
  GrowingProgram g;
  auto [gpu, ref] = g.compile(4);
  ::setenv("LUMINAL_FAKE_CUDA_GRAPH_UPDATE", "0", 1);
  const int updated0 = gpu.graphs_updated(), eager0 = gpu.eager_runs();
  // Lengths far apart (each grid more than 4x from the last launched, beyond what it serves),
  // so that each launches other grids (a new resolution, not a reuse).
  run_lengths(g, gpu, ref, {80000, 12000, 1800, 60000, 9000, 1300, 40000, 6000, 900}, 110);
  ::unsetenv("LUMINAL_FAKE_CUDA_GRAPH_UPDATE");
  if (fake_device()) {
    EXPECT_EQ(gpu.graphs_updated(), updated0);
    EXPECT_GE(gpu.eager_runs() - eager0, 3);  // the first run, and new lengths once updates stopped
  }
}

// A rebound external buffer at the same dims is a new resolution with other pointers: the
// graph is updated to them, so the outputs land in the new buffer and the old one keeps
// what the previous run wrote.
TEST(CudaRuntime, ReboundPointersUpdateTheGraph) {
  LUMINAL_REQUIRE_GPU();
  luminal::Graph cx;
  auto x = cx.tensor({3, 7});
  auto y = ((x * 3.0 - 1.0) * x).output();
  auto rt = cx.compile(cuda::CudaRuntime{}, CompileOptions().search_graph_limit(2).trials(1));
  cuda::Stream stream;
  std::vector<cuda::DeviceBuffer> ins, outs;
  std::vector<std::vector<float>> values;
  for (int b = 0; b < 3; ++b) {
    ins.emplace_back(21 * sizeof(float));
    outs.emplace_back(21 * sizeof(float));
    std::vector<float> v(21);
    for (int i = 0; i < 21; ++i) v[i] = static_cast<float>((i * (b + 3)) % 11) * 0.75f - 3.25f;
    ins.back().upload(v, stream.get());
    outs.back().upload(std::vector<float>(21, -99.0f), stream.get());
    values.push_back(v);
  }
  const int updated0 = rt.graphs_updated(), eager0 = rt.eager_runs();
  // Buffers 0, 1, 2, then 0 and 1 again (the one resolution of these dims is replaced
  // each time: same dims, other pointers).
  bool written[3] = {false, false, false};
  for (int b : {0, 1, 2, 0, 1}) {
    rt.bind_device_pointer(x.id(), ins[b].ptr(), ins[b].bytes());
    rt.bind_device_pointer(y.id(), outs[b].ptr(), outs[b].bytes());
    rt.execute(cx.dim_map());
    written[b] = true;
    // Every buffer bound so far holds its own input's result; the others are untouched.
    for (int c = 0; c < 3; ++c) {
      auto got = outs[c].download<float>(stream.get());
      for (int i = 0; i < 21; ++i) {
        const float want = written[c] ? (values[c][i] * 3 - 1) * values[c][i] : -99.0f;
        ASSERT_FLOAT_EQ(got[i], want) << "run on buffer " << b << ": buffer " << c << " element " << i;
      }
    }
  }
  EXPECT_EQ(rt.eager_runs() - eager0, 1);
  EXPECT_EQ(rt.graphs_updated() - updated0, 3);  // 2, 0 and 1: 1 made the live graph
}

// The primitives as the program (no search, nothing fused by it): scalar Constants and
// Output copies. Constants are computed once at load, and each Output's producer writes
// the output buffer itself, so neither appears among a run's launches (the profile table,
// LUMINAL_CUDA_PROFILE=1, lists every launch by op); the values match the reference.
TEST(CudaRuntime, ConstantsAreComputedOnceAndOutputsWrittenByTheirProducer) {
  LUMINAL_REQUIRE_GPU();
  luminal::Graph cx;
  auto x = cx.tensor({3, 5});
  auto h = cx.tensor({7}, DType::BF16);
  // One constant read by two kernels stays its own step (as shared constants in a model do).
  auto c = cx.constant(-1.25);
  auto y = (x * 2.5 + c.expand(Shape{3, 5})).output();
  auto z = (x.t() * c.expand(Shape{5, 3})).output();
  auto hb = (h * 3.0 + 1.0).output();
  std::vector<NodeId> ids(cx.size());
  for (NodeId i = 0; i < ids.size(); ++i) ids[i] = i;
  ReferenceRuntime ref;
  ref.load(cx, ids);
  ::setenv("LUMINAL_CUDA_PROFILE", "1", 1);
  ::testing::internal::CaptureStderr();
  {
    cuda::CudaRuntime rt;
    rt.load(cx, ids);
    for (uint32_t run = 0; run < 3; ++run) {
      for (auto t : {x, h}) {
        HostTensor v = varied(t.dtype(), static_cast<size_t>(t.numel().eval({})), 200 + run * 2 + (t.id() == h.id()), true);
        rt.set_data(t, v);
        ref.set_data(t, v);
      }
      rt.execute({});
      ref.execute({});
      expect_outputs_match(rt, ref, {y, z, hb}, "run " + std::to_string(run), 1e-6);
    }
  }  // the profile table prints here
  const std::string table = ::testing::internal::GetCapturedStderr();
  ::unsetenv("LUMINAL_CUDA_PROFILE");
  ASSERT_NE(table.find("cuda profile:"), std::string::npos) << table;
  std::istringstream lines(table);
  int launches = 0;
  for (std::string line; std::getline(lines, line);) {
    // "    0.0123   12.5%        3  Fused[Constant,Mul] [3x5]": ms, share, calls, op.
    std::istringstream fields(line);
    double ms = 0;
    std::string share, op;
    long calls = 0;
    if (!(fields >> ms >> share >> calls)) continue;
    std::getline(fields >> std::ws, op);
    ++launches;
    EXPECT_NE(op.rfind("Constant", 0), 0u) << "a constant launched at every run: " << line;
    EXPECT_NE(op.rfind("Output", 0), 0u) << "an output copied at every run: " << line;
  }
  EXPECT_GE(launches, 3) << table;
}

// An output bound over an input's memory: the producer must not write it while it still
// reads the input (here through a transpose), so the Output keeps its copy.
TEST(CudaRuntime, OutputBoundOverItsInputStaysCorrect) {
  LUMINAL_REQUIRE_GPU();
  luminal::Graph cx;
  auto x = cx.tensor({4, 4});
  auto y = (x.t() * 2.0 - x).output();
  auto rt = cx.compile(cuda::CudaRuntime{}, CompileOptions().search_graph_limit(2).trials(1));
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = static_cast<float>((i * 7) % 13) - 6.5f;
  cuda::DeviceBuffer both(16 * sizeof(float));
  cuda::Stream stream;
  for (int run = 0; run < 3; ++run) {
    both.upload(v, stream.get());
    rt.bind_device_pointer(x.id(), both.ptr(), both.bytes());
    rt.bind_device_pointer(y.id(), both.ptr(), both.bytes());
    rt.execute(cx.dim_map());
    auto got = both.download<float>(stream.get());
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j)
        ASSERT_FLOAT_EQ(got[i * 4 + j], v[j * 4 + i] * 2 - v[i * 4 + j]) << "run " << run << " " << i << "," << j;
    for (int i = 0; i < 16; ++i) v[i] = -v[i] * 0.5f + static_cast<float>(i % 3);
  }
}

TEST(CudaRuntime, StateUpdatesStayOnTheDevice) {
  LUMINAL_REQUIRE_GPU();
  // A cache that accumulates: cache' = cache * 0.5 + x; out = sum(cache').
  luminal::Graph cx;
  auto cache = cx.named_tensor("cache", {5, 7}).persist();
  auto x = cx.tensor({5, 7});
  auto next = cache * 0.5 + x;
  cx.update(cache, next);
  auto out = next.sum({1}).output();
  auto gpu = cx.compile(cuda::CudaRuntime{}, CompileOptions().search_graph_limit(4).trials(1));
  auto ref = cx.compile(ReferenceRuntime{}, CompileOptions().search_graph_limit(1));
  HostTensor c0 = varied(DType::F32, 35, 1, false);
  gpu.set_data(cache, c0);
  ref.set_data(cache, c0);
  for (uint32_t step = 0; step < 4; ++step) {
    HostTensor xv = varied(DType::F32, 35, 10 + step, false);
    gpu.set_data(x, xv);
    ref.set_data(x, xv);
    gpu.execute(cx.dim_map());
    ref.execute(cx.dim_map());
    expect_outputs_match(gpu, ref, {out}, "step " + std::to_string(step), 1e-5);
    auto got = gpu.get(cache).to_f64(), want = ref.get(cache).to_f64();
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) ASSERT_NEAR(got[k], want[k], 1e-5 * (1 + std::abs(want[k]))) << k;
  }
}

// A KV-cache append (scatter into a persisted cache, written back with Graph::update) runs
// in place: no cache-sized buffer in the arena, and step after step the cache and the
// reads of it match the reference. With a second reader of the old cache the update is
// not in place, and still right.
// computed_rows: the rows are computed (an elementwise region, as RoPE of k); with
// LUMINAL_CUDA_SCATTER_FUSION=1 (FuseOptions::scatter_roots, opt-in) inside the scatter's
// kernel, in place too.
TEST(CudaRuntime, CacheAppendRunsInPlace) {
  LUMINAL_REQUIRE_GPU();
  for (auto [second_reader, computed_rows] : {std::pair{false, false}, {true, false}, {false, true}}) {
    const int64_t max_seq = 64, heads = 3, dim = 5;
    luminal::Graph cx;
    auto [cache, rows, outs, update] =
        luminal::testing::build_cache_append(cx, max_seq, heads, dim, second_reader, computed_rows);
    auto gpu = cx.compile(cuda::CudaRuntime{}, CompileOptions().search_graph_limit(4).trials(1));
    auto ref = cx.compile(ReferenceRuntime{}, CompileOptions().search_graph_limit(1));
    HostTensor start = varied(DType::F32, static_cast<size_t>(max_seq * heads * dim), 7, false);
    gpu.set_data(cache, start);
    ref.set_data(cache, start);
    int64_t pos = 0;
    uint32_t seed = 11;
    // The last append, 40 x 3 x 5 elements, spreads over three blocks of 256 threads.
    for (int64_t len : {5, 1, 1, 3, 1, 1, 7, 40}) {
      DimMap dims{{"p", pos}, {"s", len}};
      HostTensor r = varied(DType::F32, static_cast<size_t>(len * heads * dim), seed++, true);
      gpu.set_data(rows, r);
      ref.set_data(rows, r);
      gpu.execute(dims);
      ref.execute(dims);
      const std::string what = "second reader " + std::to_string(second_reader) + ", computed rows " +
                               std::to_string(computed_rows) + ", position " + std::to_string(pos);
      expect_outputs_match(gpu, ref, outs, what, 1e-5);
      auto cached = gpu.get(cache).to_f64(), want = ref.get(cache).to_f64(), appended = r.to_f64();
      ASSERT_EQ(cached.size(), want.size());
      for (size_t k = 0; k < cached.size(); ++k) ASSERT_TRUE(same_value(cached[k], want[k], 0)) << what << ", element " << k;
      for (size_t k = 0; k < appended.size(); ++k) {
        const double row = computed_rows ? static_cast<double>(static_cast<float>(static_cast<float>(appended[k] * 1.5) - 0.25f))
                                         : appended[k];
        ASSERT_TRUE(same_value(cached[static_cast<size_t>(pos * heads * dim) + k], row, 0)) << what << ", row element " << k;
      }
      // The update Output reads as the new cache; run in place, it is the cache's own
      // buffer (no copy of the whole cache per run).
      auto updated = gpu.get(update).to_f64();
      ASSERT_EQ(updated.size(), want.size());
      for (size_t k = 0; k < updated.size(); ++k) ASSERT_TRUE(same_value(updated[k], want[k], 0)) << what << ", update " << k;
      if (!second_reader) {
        // Less than a copy of the cache, beside the computed rows (and their temporaries)
        // where they are materialised (the scatter fusion is opt-in).
        const int64_t rows_bytes = computed_rows ? 2 * len * heads * dim * 4 : 0;
        EXPECT_LT(gpu.last_arena_bytes(), max_seq * heads * dim * 4 + rows_bytes) << what;
        EXPECT_EQ(gpu.device_pointer(update.id()), gpu.device_pointer(cache.id())) << what;
      }
      pos += len;
    }
  }
}

// A cache append of rotated rows (RoPE's halves, tables broadcast over the heads), with the
// scatter fusion off and with it (LUMINAL_CUDA_SCATTER_FUSION=scatter: the rotation runs
// inside the scatter's kernel), over appends of several lengths, against the reference.
TEST(CudaRuntime, ACacheAppendOfRotatedRowsMatchesTheReference) {
  LUMINAL_REQUIRE_GPU();
  struct Unset {
    ~Unset() { ::unsetenv("LUMINAL_CUDA_SCATTER_FUSION"); }
  } unset;
  for (const char* mode : {"0", "scatter"}) {
    ::setenv("LUMINAL_CUDA_SCATTER_FUSION", mode, 1);
    const int64_t max_seq = 32, heads = 3, dim = 8;
    luminal::Graph cx;
    auto [cache, rows, outs, update] = luminal::testing::build_cache_append(cx, max_seq, heads, dim, false, true);
    auto gpu = cx.compile(cuda::CudaRuntime{}, CompileOptions().search_graph_limit(4).trials(1).verify(VerifyMode::Never));
    auto ref = cx.compile(ReferenceRuntime{}, CompileOptions().search_graph_limit(1));
    HostTensor start = varied(DType::F32, static_cast<size_t>(max_seq * heads * dim), 7, false);
    gpu.set_data(cache, start);
    ref.set_data(cache, start);
    int64_t pos = 0;
    uint32_t seed = 21;
    for (int64_t len : {5, 1, 3, 9}) {
      DimMap dims{{"p", pos}, {"s", len}};
      HostTensor r = varied(DType::F32, static_cast<size_t>(len * heads * dim), seed++, true);
      gpu.set_data(rows, r);
      ref.set_data(rows, r);
      gpu.execute(dims);
      ref.execute(dims);
      auto cached = gpu.get(cache).to_f64(), want = ref.get(cache).to_f64();
      ASSERT_EQ(cached.size(), want.size());
      for (size_t k = 0; k < cached.size(); ++k)
        ASSERT_TRUE(same_value(cached[k], want[k], 1e-5))
            << "fusion " << mode << ", position " << pos << ", cache element " << k << ": " << cached[k] << " instead of "
            << want[k];
      pos += len;
    }
  }
}

TEST(CudaRuntime, ModelBlocksWithSearchMatchTheReference) {
  LUMINAL_REQUIRE_GPU();
  for (int which = 0; which < 3; ++which) {
    luminal::testing::TestModel m;
    if (which == 0) luminal::testing::build_mlp(m);
    if (which == 1) luminal::testing::build_attention(m);
    if (which == 2) luminal::testing::build_transformer_block(m);
    auto gpu = m.cx.compile(cuda::CudaRuntime{}, CompileOptions().search_graph_limit(30).trials(2));
    ReferenceRuntime ref;
    std::vector<NodeId> ids(m.cx.size());
    for (NodeId i = 0; i < ids.size(); ++i) ids[i] = i;
    ref.load(m.cx, ids);
    luminal::testing::fill_random(gpu, m);
    luminal::testing::fill_random(ref, m);
    for (int run = 0; run < 3; ++run) {  // replays of the captured graph
      luminal::testing::fill_random(gpu, m, 7 + run);
      luminal::testing::fill_random(ref, m, 7 + run);
      gpu.execute(m.cx.dim_map());
      ref.execute(m.cx.dim_map());
      expect_outputs_match(gpu, ref, m.outputs, "block " + std::to_string(which) + " run " + std::to_string(run), 1e-4);
    }
  }
}

namespace {
struct Square : CustomOp {
  std::string name() const override { return "square"; }
  HostTensor execute_reference(std::span<const HostTensor> in, const std::vector<int64_t>&, DType dt) const override {
    HostTensor out = HostTensor::zeros(dt, in[0].numel());
    for (size_t k = 0; k < in[0].numel(); ++k) out.set_f64(k, in[0].get_f64(k) * in[0].get_f64(k));
    return out;
  }
};
}  // namespace

TEST(CudaRuntime, CustomOpsRunThroughTheirHostReference) {
  LUMINAL_REQUIRE_GPU();
  luminal::Graph cx;
  auto x = cx.tensor({3, 5});
  auto y = (cx.custom_op(std::make_shared<Square>(), {x.t()}, {5, 3}, DType::F32) + 1.0).output();
  auto rt = cx.compile(cuda::CudaRuntime{}, CompileOptions().search_graph_limit(2).trials(1));
  std::vector<float> v = {-2, 1.5f, 0, 3, -1, 4, 2, -0.5f, 7, 1, -3, 2.5f, 6, -4, 0.25f};
  rt.set_data(x, v);
  rt.execute(cx.dim_map());
  auto got = rt.get_f32(y);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_FLOAT_EQ(got[i * 3 + j], v[j * 5 + i] * v[j * 5 + i] + 1) << i << "," << j;
}

TEST(CudaRuntime, ExternalDevicePointersAreReadAndWrittenInPlace) {
  LUMINAL_REQUIRE_GPU();
  luminal::Graph cx;
  auto x = cx.tensor({4, 6});
  auto y = (x * 3.0 - 1.0).output();
  auto rt = cx.compile(cuda::CudaRuntime{}, CompileOptions().search_graph_limit(2).trials(1));
  cuda::DeviceBuffer in(24 * sizeof(float)), out(24 * sizeof(float));
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>(i % 7) - 2.5f;
  cuda::Stream stream;
  in.upload(v, stream.get());
  rt.bind_device_pointer(x.id(), in.ptr(), in.bytes());
  rt.bind_device_pointer(y.id(), out.ptr(), out.bytes());
  rt.execute(cx.dim_map());
  auto got = out.download<float>(stream.get());
  for (int i = 0; i < 24; ++i) EXPECT_FLOAT_EQ(got[i], v[i] * 3 - 1) << i;
  EXPECT_EQ(rt.device_pointer(y.id()), out.ptr());
}

TEST(CudaRuntime, KernelErrorsAreReported) {
  LUMINAL_REQUIRE_GPU();
  luminal::Graph cx;
  auto table = cx.tensor({10, 6});
  auto ids = cx.tensor({4}, DType::I32);
  table.embedding(ids).output();
  auto rt = cx.compile(cuda::CudaRuntime{}, CompileOptions().search_graph_limit(2).trials(1));
  rt.set_data(table, std::vector<float>(60, 1.5f));
  rt.set_data(ids, std::vector<int32_t>{1, 2, 30, 0});
  try {
    rt.execute(cx.dim_map());
    FAIL() << "an out-of-range gather index did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

TEST(CudaRuntime, KernelErrorsInABatchOfProfiledRunsAreReported) {
  // profile's runs_per_trial queues the runs of a trial without waiting between them; only
  // the last reads the error records. The runs are the same program on the same data, so
  // the out-of-range index fails that last run as it failed the first.
  LUMINAL_REQUIRE_GPU();
  luminal::Graph cx;
  auto table = cx.tensor({10, 6});
  auto ids = cx.tensor({4}, DType::I32).persist();
  table.persist();
  auto out = table.embedding(ids).output();
  auto rt = cx.compile(cuda::CudaRuntime{}, CompileOptions().search_graph_limit(2).trials(1));
  rt.set_data(table, std::vector<float>(60, 1.5f));
  rt.set_data(ids, std::vector<int32_t>{1, 2, 3, 0});
  const ProfileResult fine = rt.profile(cx.dim_map(), ProfileOptions{1, 2, std::chrono::seconds(60), 4});
  EXPECT_GT(fine.seconds, 0);
  EXPECT_EQ(rt.get_f32(out), std::vector<float>(24, 1.5f));
  rt.set_data(ids, std::vector<int32_t>{1, 2, 30, 0});
  try {
    rt.profile(cx.dim_map(), ProfileOptions{0, 1, std::chrono::seconds(60), 4});
    FAIL() << "an out-of-range gather index in a batch of profiled runs did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

TEST(CudaRuntime, AFaultingCandidateIsRejectedAndTheSearchGoesOn) {
  // Candidates run in the profiling worker (luminal-cuda-profile-worker): ctest's
  // cuda_runtime_worker_fault_emulated makes the second kernel execution of one worker
  // process fault (LUMINAL_FAKE_CUDA_FAULT_IN_WORKER, _AT_KERNEL=2, _ONCE=file). The
  // candidate that ran it is rejected, the next candidate gets a fresh worker, the compile
  // finishes and says what happened, and the program it chose computes the right values.
  const char* once = std::getenv("LUMINAL_FAKE_CUDA_FAULT_ONCE");
  if (once == nullptr || std::getenv("LUMINAL_FAKE_CUDA_FAULT_IN_WORKER") == nullptr)
    GTEST_SKIP() << "runs under the emulation with a fault injected into one profiling worker "
                    "(ctest cuda_runtime_worker_fault_emulated)";
  LUMINAL_REQUIRE_GPU();
  ASSERT_FALSE(cuda::CudaRuntime().profiling_worker().empty()) << "luminal-cuda-profile-worker is not built";
  std::ofstream(once) << "the first profiling worker to run its second kernel faults\n";
  luminal::Graph cx;
  auto x = cx.named_tensor("x", {5, 24}, DType::F32);
  auto w = cx.named_tensor("w", {7, 24}, DType::F32).persist();
  auto y = (x.linear(w).relu() * 2.0f + 1.0f).output("y");
  CompileReport report;
  auto rt = cx.compile(cuda::CudaRuntime{}, CompileOptions().search_graph_limit(6).trials(1).report(&report));
  EXPECT_FALSE(std::filesystem::exists(once)) << "no profiling worker faulted";
  EXPECT_GE(report.rejected, 1) << report.to_string();
  bool noted = false;
  for (const auto& note : report.notes) noted |= note.find("took down its profiling worker") != std::string::npos &&
                                                note.find("CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos;
  EXPECT_TRUE(noted) << report.to_string();
  const HostTensor xs = varied(DType::F32, 5 * 24, 3, false), ws = varied(DType::F32, 7 * 24, 4, false);
  rt.set_tensor(x.id(), xs);
  rt.set_tensor(w.id(), ws);
  rt.execute(cx.dim_map());
  const std::vector<float> got = rt.get_f32(y), xv = xs.to_f32(), wv = ws.to_f32();
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j) {
      double acc = 0;
      for (int k = 0; k < 24; ++k) acc += static_cast<double>(xv[i * 24 + k]) * wv[j * 24 + k];
      EXPECT_NEAR(got[i * 7 + j], std::max(acc, 0.0) * 2 + 1, 1e-4 * (1 + std::abs(acc))) << i << " " << j;
    }
}

TEST(CudaRuntime, AFaultingKernelStopsTheCompileWithDeviceLost) {
  // A kernel that faults (an illegal address) leaves the context unusable for the rest of
  // the process, on a GPU as in the emulation, so this runs in a process of its own: ctest's
  // cuda_runtime_fault_emulated sets LUMINAL_FAKE_CUDA_FAULT_AT_KERNEL, which makes one
  // kernel execution fault. The search must not reject the candidate and go on against a
  // dead context (every later candidate would "fail" for an unrelated reason): it stops with
  // DeviceLost naming the fault, and every later use of the device says the same.
  if (std::getenv("LUMINAL_FAKE_CUDA_FAULT_AT_KERNEL") == nullptr)
    GTEST_SKIP() << "runs under the emulation with LUMINAL_FAKE_CUDA_FAULT_AT_KERNEL set "
                    "(ctest cuda_runtime_fault_emulated)";
  LUMINAL_REQUIRE_GPU();
  luminal::Graph cx;
  auto x = cx.named_tensor("x", {5, 24}, DType::F32);
  auto w = cx.named_tensor("w", {7, 24}, DType::F32).persist();
  auto y = (x.linear(w).relu() * 2.0f + 1.0f).output("y");
  try {
    auto compiled = cx.compile(cuda::CudaRuntime{}, CompileOptions().search_graph_limit(6).trials(1));
    ADD_FAILURE() << "the compile finished although a kernel faulted";
  } catch (const DeviceLost& e) {
    const std::string what = e.what();
    std::fprintf(stderr, "DeviceLost: %s\n", what.c_str());
    EXPECT_NE(what.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << what;
    EXPECT_NE(what.find("restart the process"), std::string::npos) << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "a fault surfaced as something other than DeviceLost: " << e.what();
  }
  // Anything later fails the same way, naming the first fault rather than a symptom of it.
  try {
    cuda::CudaRuntime again;
    again.set_tensor(x.id(), varied(DType::F32, 5 * 24, 1, false));
    ADD_FAILURE() << "a lost device accepted more work";
  } catch (const DeviceLost& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << e.what();
  }
  (void)y;
}
