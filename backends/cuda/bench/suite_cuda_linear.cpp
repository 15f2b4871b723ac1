// Issue 10, benchmark case 1 (and RMSNorm/softmax of case 2): BF16 linear layers y[M, N] = x[M, K] w[N, K]^T of Llama-3-8B
// shapes at 1, 16 and 512 rows, our GEMV/skinny kernels and cuBLASLt, timed with CUDA
// events around a CUDA graph of back-to-back launches. Every launch reads a different copy
// of the weights (enough copies to exceed 4x the L2), as a model reads each weight once per
// step. The floor is bytes moved / the device-to-device copy bandwidth measured here.
// Prints one JSON object per line; bench/suite_cuda.py adds PyTorch peers.
//
//   suite_cuda_linear [--quick] [--budget-s SECONDS] [--shape KxN ...] [--rows M ...]
// --shape and --rows replace the default shapes and row counts (a GEMV sweep of one shape).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "luminal/error.hpp"
#include "luminal_cuda/cublaslt.hpp"
#include "luminal_cuda/device.hpp"
#include "luminal_cuda/kernels.hpp"

using namespace luminal;
using namespace luminal::cuda;

namespace {

using Clock = std::chrono::steady_clock;

// A JSON object built field by field (numbers and plain strings only).
class Json {
 public:
  Json& str(const char* key, const std::string& value) {
    std::string escaped;
    for (char c : value) {
      if (c == '"' || c == '\\') escaped += '\\';
      escaped += (c == '\n' ? ' ' : c);
    }
    return raw(key, "\"" + escaped + "\"");
  }
  Json& num(const char* key, double value) {
    if (!std::isfinite(value)) return raw(key, "null");
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.6g", value);
    return raw(key, buf);
  }
  void print() const { std::printf("{%s}\n", body_.c_str()), std::fflush(stdout); }

 private:
  Json& raw(const char* key, const std::string& value) {
    body_ += (body_.empty() ? "\"" : ", \"") + std::string(key) + "\": " + value;
    return *this;
  }
  std::string body_;
};

struct Shape {
  int K, N;
};

std::string config_name(const GemvConfig& c) {
  return "gemv ksplit=" + std::to_string(c.ksplit) + " rows_per_warp=" + std::to_string(c.rows_per_warp) +
         " unroll=" + std::to_string(c.unroll);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  double budget_s = 150;
  std::vector<Shape> chosen_shapes;
  std::vector<int> chosen_rows;
  for (int i = 1; i < argc; ++i) {
    int k = 0, n = 0;
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--budget-s") && i + 1 < argc) budget_s = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc && std::sscanf(argv[i + 1], "%dx%d", &k, &n) == 2 &&
             k > 0 && n > 0)
      chosen_shapes.push_back({k, n}), ++i;
    else if (!std::strcmp(argv[i], "--rows") && i + 1 < argc && std::atoi(argv[i + 1]) > 0)
      chosen_rows.push_back(std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: %s [--quick] [--budget-s SECONDS] [--shape KxN ...] [--rows M ...]\n", argv[0]);
      return 2;
    }
  }
  const Availability& status = available();
  if (!status.ok) {
    Json().str("suite", "cuda").str("case", "linear").str("status", "blocked").str("reason", status.message).print();
    return 0;
  }
  const auto started = Clock::now();
  try {
    Context ctx;
    Stream stream;
    const StreamHandle s = stream.get();
    ModuleCache cache(ctx.info().arch());
    CublasLt lt(size_t{32} << 20, static_cast<size_t>(ctx.info().l2_bytes));
    const DType bf16 = DType::BF16;
    // Compile every variant this run can launch, in parallel, before timing anything.
    {
      std::vector<KernelSource> sources{fill_source(bf16), rows_source(bf16)};
      for (int m_max : {1, 16})
        for (int rpw : {1, 2, 4})
          for (int unroll : {2, 4, 8}) sources.push_back(gemv_source(bf16, m_max, rpw, Activation::None, unroll));
      for (int rpw : {1, 2, 4})
        for (int unroll : {2, 4, 8}) sources.push_back(gemv_group_source(bf16, 1, rpw, unroll));
      cache.cubins(sources);
    }
    const double bandwidth = copy_bandwidth(s);
    Json()
        .str("suite", "cuda")
        .str("case", "copy_bandwidth")
        .num("value", bandwidth / 1e12)
        .str("unit", "TB/s")
        .str("better", "higher")
        .str("device", ctx.info().name)
        .num("l2_mb", ctx.info().l2_bytes / 1e6)
        .print();

    // The four shapes, and the k/v projections of grouped-query attention (1024 outputs).
    std::vector<Shape> shapes{{4096, 4096}, {4096, 14336}, {14336, 4096}, {4096, 128256}, {4096, 1024}};
    std::vector<int> row_counts{1, 16, 512};
    if (quick) shapes.resize(1), row_counts = {1};
    if (!chosen_shapes.empty()) shapes = chosen_shapes;
    if (!chosen_rows.empty()) row_counts = chosen_rows;
    uint32_t seed = 1;
    for (const Shape& shape : shapes) {
      const size_t weight_bytes = size_t(shape.N) * shape.K * 2;
      // Distinct weights per launch: at least 4x the L2 in all, at least 2 copies.
      const size_t l2 = std::max<size_t>(ctx.info().l2_bytes, 50u << 20);
      const int copies = int(std::max<size_t>(2, (4 * l2 + weight_bytes - 1) / weight_bytes));
      std::vector<DeviceBuffer> weights;
      for (int c = 0; c < copies; ++c) {
        weights.emplace_back(weight_bytes);
        fill_uniform(cache, bf16, weights.back().ptr(), int64_t(shape.N) * shape.K, seed++, 0.05f, s);
      }
      const int max_rows = *std::max_element(row_counts.begin(), row_counts.end());
      DeviceBuffer x(size_t(max_rows) * shape.K * 2), y(size_t(max_rows) * shape.N * 2),
          y_check(size_t(max_rows) * shape.N * 2);
      fill_uniform(cache, bf16, x.ptr(), int64_t(max_rows) * shape.K, seed++, 1.0f, s);
      stream.synchronize();

      for (int M : row_counts) {
        const std::string name = "linear_bf16_" + std::to_string(shape.K) + "x" + std::to_string(shape.N) + "_rows" +
                                 std::to_string(M);
        const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
        if (elapsed > budget_s) {
          Json().str("suite", "cuda").str("case", name).str("status", "skipped: time budget spent").print();
          continue;
        }
        const double bytes = double(weight_bytes) + 2.0 * M * shape.K + 2.0 * M * shape.N;
        const double floor_us = bytes / bandwidth * 1e6;
        const double flops = 2.0 * M * double(shape.K) * shape.N;
        // Launches per timed graph: all copies, repeated to about 2 ms of floor time.
        const int rounds = std::clamp(int(2000.0 / (floor_us * copies)), 1, 200);
        const int reps = copies * rounds;
        auto timed = [&](const std::function<void(DevicePtr w)>& launch_one) {
          launch_one(weights[0].ptr());  // loads the module outside the capture, and warms up
          stream.synchronize();
          int i = 0;
          return 1e3 * time_ms(s, [&] { launch_one(weights[i++ % copies].ptr()); }, reps, 5, /*use_graph=*/true);
        };
        Json line;
        line.str("suite", "cuda").str("case", name);
        double best = INFINITY;
        std::string best_name;
        double gemv_best = INFINITY, gemv_heuristic = INFINITY;
        if (M <= kGemvMaxRows) {
          GemvArgs args;
          args.dtype = bf16, args.M = M, args.N = shape.N, args.K = shape.K, args.x = x.ptr(), args.y = y.ptr();
          const GemvConfig heuristic = choose_gemv_config(M, shape.N, shape.K, ctx.info().sm_count);
          std::string gemv_best_name;
          for (int ksplit : {1, 2, 4, 8})
            for (int rpw : {1, 2, 4})
              for (int unroll : {2, 4, 8}) {
                const GemvConfig config{ksplit, rpw, unroll};
                const double us = timed([&](DevicePtr w) {
                  args.w = w;
                  launch_gemv(cache, args, s, ctx.info().sm_count, config);
                });
                if (ksplit == heuristic.ksplit && rpw == heuristic.rows_per_warp && unroll == heuristic.unroll)
                  gemv_heuristic = us;
                if (us < gemv_best) gemv_best = us, gemv_best_name = config_name(config);
              }
          line.num("gemv_us", gemv_best).str("gemv_best_config", gemv_best_name);
          line.num("gemv_heuristic_us", gemv_heuristic).str("gemv_heuristic_config", config_name(heuristic));
          // What the heuristic picks is what a model gets without search.
          best = gemv_heuristic, best_name = config_name(heuristic);
          if (gemv_best < best) best = gemv_best, best_name = gemv_best_name;
        }
        MatmulSpec spec;
        spec.dtype = bf16;
        spec.m = M, spec.n = shape.N, spec.k = shape.K;
        spec.a = {Order::RowMajor, 0, 0};
        spec.b = {Order::ColMajor, 0, 0};  // w[N, K] row-major is B = w^T [K, N] column-major
        spec.d = {Order::RowMajor, 0, 0};
        double lt_us = INFINITY;
        try {
          const CublasLt::Plan& plan = lt.prepare(spec);
          lt_us = timed([&](DevicePtr w) { lt.enqueue(plan, x.ptr(), w, y_check.ptr(), 0, s); });
          line.num("cublaslt_us", lt_us);
          if (lt_us < best) best = lt_us, best_name = "cublaslt";
        } catch (const Error& e) {
          line.str("cublaslt_error", e.what());
        }
        // Agreement between our kernel and cuBLASLt on the same inputs.
        if (M <= kGemvMaxRows && std::isfinite(lt_us)) {
          GemvArgs args;
          args.dtype = bf16, args.M = M, args.N = shape.N, args.K = shape.K, args.x = x.ptr(), args.y = y.ptr();
          args.w = weights[0].ptr();
          launch_gemv(cache, args, s, ctx.info().sm_count);
          lt.matmul(spec, x.ptr(), weights[0].ptr(), y_check.ptr(), 0, s);
          std::vector<uint16_t> a(size_t(M) * shape.N), b(a.size());
          y.download(a.data(), a.size() * 2, s);
          y_check.download(b.data(), b.size() * 2, s);
          double max_diff = 0, max_ref = 0;
          for (size_t i = 0; i < a.size(); ++i) {
            auto f = [](uint16_t v) {
              uint32_t u = uint32_t(v) << 16;
              float out;
              std::memcpy(&out, &u, 4);
              return double(out);
            };
            max_diff = std::max(max_diff, std::fabs(f(a[i]) - f(b[i])));
            max_ref = std::max(max_ref, std::fabs(f(b[i])));
          }
          line.num("gemv_vs_cublaslt_max_rel_diff", max_ref > 0 ? max_diff / max_ref : max_diff);
        }
        line.num("value", best).str("unit", "us").str("better", "lower").str("ours", best_name);
        if (M <= kGemvMaxRows) {
          line.num("floor_us", floor_us).num("fraction_of_floor", floor_us / best).str("target", ">= 0.8 of floor");
        } else {
          line.num("tflops", flops / (best * 1e-6) / 1e12).str("bound", "compute");
        }
        line.num("weight_copies", copies).num("launches_per_graph", reps).print();
      }
    }

    // Sibling GEMVs in one launch (launch_gemv_group), as a decode step runs them: q, k and
    // v of Llama-3-8B's attention (4096 + 1024 + 1024 outputs) and the MLP's gate and up
    // (2 x 14336), at 1 row, every config against the one the heuristic picks.
    struct Group {
      const char* name;
      int K;
      std::vector<int> N;
    };
    const std::vector<Group> groups{{"qkv", 4096, {4096, 1024, 1024}}, {"gate_up", 4096, {14336, 14336}}};
    for (const Group& group : (quick || !chosen_shapes.empty()) ? std::vector<Group>{} : groups) {
      const std::string name = std::string("linear_bf16_group_") + group.name + "_rows1";
      if (std::chrono::duration<double>(Clock::now() - started).count() > budget_s) {
        Json().str("suite", "cuda").str("case", name).str("status", "skipped: time budget spent").print();
        continue;
      }
      size_t group_bytes = 0, out_elems = 0;
      for (int n : group.N) group_bytes += size_t(n) * group.K * 2, out_elems += size_t(n);
      const size_t l2 = std::max<size_t>(ctx.info().l2_bytes, 50u << 20);
      const int copies = int(std::max<size_t>(2, (4 * l2 + group_bytes - 1) / group_bytes));
      std::vector<std::vector<DeviceBuffer>> weights(copies);
      for (auto& set : weights)
        for (int n : group.N) {
          set.emplace_back(size_t(n) * group.K * 2);
          fill_uniform(cache, bf16, set.back().ptr(), int64_t(n) * group.K, seed++, 0.05f, s);
        }
      DeviceBuffer x(size_t(group.K) * 2);
      std::vector<DeviceBuffer> ys;
      for (int n : group.N) ys.emplace_back(size_t(n) * 2);
      fill_uniform(cache, bf16, x.ptr(), group.K, seed++, 1.0f, s);
      stream.synchronize();
      GemvGroupArgs args;
      args.dtype = bf16, args.M = 1, args.K = group.K, args.x = x.ptr();
      for (size_t p = 0; p < group.N.size(); ++p) args.N[p] = group.N[p], args.y[p] = ys[p].ptr();
      args.count = int(group.N.size());
      const double floor_us = (double(group_bytes) + 2.0 * group.K + 2.0 * double(out_elems)) / bandwidth * 1e6;
      const int reps = copies * std::clamp(int(2000.0 / (floor_us * copies)), 1, 200);
      const GemvConfig heuristic = gemv_group_config(args, ctx.info().sm_count);
      double best = INFINITY, at_heuristic = INFINITY;
      std::string best_name;
      for (int ksplit : {1, 2, 4, 8})
        for (int rpw : {1, 2, 4})
          for (int unroll : {2, 4, 8}) {
            const GemvConfig config{ksplit, rpw, unroll};
            auto launch_one = [&](int c) {
              for (size_t p = 0; p < group.N.size(); ++p) args.w[p] = weights[c][p].ptr();
              launch_gemv_group(cache, args, s, ctx.info().sm_count, config);
            };
            launch_one(0);
            stream.synchronize();
            int i = 0;
            const double us = 1e3 * time_ms(s, [&] { launch_one(i++ % copies); }, reps, 5, true);
            if (ksplit == heuristic.ksplit && rpw == heuristic.rows_per_warp && unroll == heuristic.unroll)
              at_heuristic = us;
            if (us < best) best = us, best_name = config_name(config);
          }
      Json()
          .str("suite", "cuda")
          .str("case", name)
          .num("value", at_heuristic)
          .str("unit", "us")
          .str("better", "lower")
          .str("config", config_name(heuristic))
          .num("best_us", best)
          .str("best_config", best_name)
          .num("floor_us", floor_us)
          .num("fraction_of_floor", floor_us / at_heuristic)
          .num("best_fraction_of_floor", floor_us / best)
          .str("target", ">= 0.8 of floor")
          .print();
    }

    // Case 2 (part): RMSNorm and softmax over (4096, 4096) BF16 rows, distinct buffers per launch.
    if (!quick) {
      const int rows = 4096, cols = 4096;
      const size_t bytes = size_t(rows) * cols * 2;
      const size_t l2 = std::max<size_t>(ctx.info().l2_bytes, 50u << 20);
      const int copies = int(std::max<size_t>(2, (4 * l2 + bytes - 1) / bytes));
      std::vector<DeviceBuffer> inputs, outputs;
      for (int c = 0; c < copies; ++c) {
        inputs.emplace_back(bytes);
        outputs.emplace_back(bytes);
        fill_uniform(cache, bf16, inputs.back().ptr(), int64_t(rows) * cols, seed++, 4.0f, s);
      }
      DeviceBuffer weight(size_t(cols) * 2);
      fill_uniform(cache, bf16, weight.ptr(), cols, seed++, 1.0f, s);
      stream.synchronize();
      const double floor_us = (2.0 * double(bytes) + cols * 2.0) / bandwidth * 1e6;
      for (const char* op : {"rmsnorm", "softmax"}) {
        const std::string name = std::string("rows_") + op + "_bf16_4096x4096";
        if (std::chrono::duration<double>(Clock::now() - started).count() > budget_s) {
          Json().str("suite", "cuda").str("case", name).str("status", "skipped: time budget spent").print();
          continue;
        }
        const bool rms = op[0] == 'r';
        auto launch_one = [&](int i) {
          if (rms)
            launch_rmsnorm(cache, bf16, inputs[i].ptr(), weight.ptr(), outputs[i].ptr(), rows, cols, 1e-5f, s);
          else
            launch_softmax(cache, bf16, inputs[i].ptr(), outputs[i].ptr(), rows, cols, s);
        };
        launch_one(0);
        stream.synchronize();
        const int reps = copies * std::clamp(int(2000.0 / (floor_us * copies)), 1, 200);
        int i = 0;
        const double us = 1e3 * time_ms(s, [&] { launch_one(i++ % copies); }, reps, 5, true);
        Json()
            .str("suite", "cuda")
            .str("case", name)
            .num("value", us)
            .str("unit", "us")
            .str("better", "lower")
            .num("floor_us", floor_us)
            .num("fraction_of_floor", floor_us / us)
            .str("target", ">= 0.85 of floor")
            .num("weight_copies", copies)
            .num("launches_per_graph", reps)
            .print();
      }
    }
  } catch (const Error& e) {
    Json().str("suite", "cuda").str("case", "linear").str("status", "failed").str("error", e.what()).print();
    return 1;
  }
  return 0;
}
