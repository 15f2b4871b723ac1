// Google Benchmark micro-benchmarks of the core: expression building, view algebra,
// graph construction and the reference interpreter's matmul.
#include <benchmark/benchmark.h>

#include "luminal/luminal.hpp"

using namespace luminal;

static void BM_ExpressionViewIndex(benchmark::State& state) {
  auto seq = Expression::var("seq");
  for (auto _ : state) {
    auto t = ShapeTracker::contiguous({seq, 32, 64}).permute(std::vector<int>{1, 0, 2}).merge_dims(1, 2);
    benchmark::DoNotOptimize(t.index_expression());
  }
}
BENCHMARK(BM_ExpressionViewIndex);

static void BM_BuildTransformerLayerGraph(benchmark::State& state) {
  for (auto _ : state) {
    Graph cx;
    auto seq = Expression::var("seq");
    auto x = cx.tensor({seq, 256});
    auto w = cx.tensor({256, 256});
    auto h = x.rms_norm(1, std::nullopt).linear(w).softmax(-1).linear(w).silu();
    benchmark::DoNotOptimize(h.output().id());
  }
}
BENCHMARK(BM_BuildTransformerLayerGraph);

static void BM_ReferenceMatmul(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  Graph cx;
  auto a = cx.tensor({n, n});
  auto b = cx.tensor({n, n});
  auto c = a.matmul(b).output();
  auto rt = cx.compile(ReferenceRuntime{}, CompileOptions{});
  std::vector<float> ones(static_cast<size_t>(n) * n, 1.f);
  for (auto _ : state) {
    rt.set_data(a, ones);
    rt.set_data(b, ones);
    rt.execute(cx.dim_map());
  }
  state.SetItemsProcessed(state.iterations() * int64_t(n) * n * n);
}
BENCHMARK(BM_ReferenceMatmul)->Arg(32)->Arg(64);

BENCHMARK_MAIN();
