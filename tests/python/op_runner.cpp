// luminal_op_runner: runs a batch of single-op test cases on the ReferenceRuntime.
//
//   luminal_op_runner [--search] [--backend cpu|cuda]... cases.json inputs.safetensors outputs.safetensors
//
// --backend B also compiles every case for backend B (no search: its rules and the first
// candidate) and writes its output k as "<id>.<B>.<k>", or reports
// {"id", "backend": B, "backend_error": message}. --cpu is --backend cpu. A backend this
// build lacks, or one that is unavailable here (no GPU), is an error at start.
//
// cases.json is a list of cases:
//   {"id": "add.f32.bcast", "op": "add",
//    "inputs": [{"name": "a", "shape": [2, "seq", 3], "dtype": "F32",
//                "view": null | {"kind": "transpose", "dims": [0, 1]}
//                             | {"kind": "permute", "dims": [...]}
//                             | {"kind": "slice", "axis": 1, "start": 0, "end": 4, "step": 2}
//                             | {"kind": "expand", "shape": [4, 3]}}],
//    "args": {...}, "dims": {"seq": 5}}
// Input `name` of case `id` is read from tensor "<id>.in.<name>" of inputs.safetensors
// (the stored tensor has the declared shape; the view is applied in the graph). Output k
// of the case is written as "<id>.<k>". Each case is its own Graph; a case that throws is
// reported on stdout as {"id": ..., "error": ...} and the runner moves on. Before each
// case a line {"start": id} is printed so a caller can tell which case aborted the process.
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "luminal/luminal.hpp"
#ifdef LUMINAL_OP_RUNNER_CPU
#include "luminal/cpu/cpu_runtime.hpp"
#endif
#ifdef LUMINAL_OP_RUNNER_CUDA
#include "luminal_cuda/cuda_runtime.hpp"
#endif
#include "luminal/safetensors.hpp"

using json = nlohmann::json;
using namespace luminal;

namespace {

bool g_search = false;  // --search: compile with the default CompileOptions
// --backend B: every case also runs on these backends. Each case's runtime is a fresh()
// copy of the backend's prototype: compiled kernels are shared in memory across cases
// (and cached on disk across runs).
std::vector<std::pair<std::string, std::unique_ptr<Runtime>>> g_backends;

std::unique_ptr<Runtime> make_backend(const std::string& name) {
#ifdef LUMINAL_OP_RUNNER_CPU
  if (name == "cpu") return std::make_unique<cpu::CpuRuntime>();
#endif
#ifdef LUMINAL_OP_RUNNER_CUDA
  if (name == "cuda") return std::make_unique<cuda::CudaRuntime>();
#endif
  fail("--backend ", name, ": this build of luminal_op_runner has no such backend (built with:",
#ifdef LUMINAL_OP_RUNNER_CPU
       " cpu",
#endif
#ifdef LUMINAL_OP_RUNNER_CUDA
       " cuda",
#endif
       ")");
}
Graph* g_graph = nullptr;  // the graph of the case being built (ops without inputs create in it)
Graph* current_graph() { return g_graph; }

using Ins = std::vector<GraphTensor>;
using Outs = std::vector<GraphTensor>;
using OpFn = std::function<Outs(Ins&, const json&)>;

Expression to_expr(const json& j) {
  if (j.is_string()) return Expression::var(j.get<std::string>());
  return Expression(j.get<int64_t>());
}
Shape to_shape(const json& j) {
  Shape s;
  for (const auto& d : j) s.push_back(to_expr(d));
  return s;
}
std::vector<int> ints(const json& j) { return j.get<std::vector<int>>(); }
// A number; JSON has no inf/NaN, so those arrive as the strings "inf", "-inf", "nan".
double dbl(const json& j) {
  if (j.is_string()) return std::stod(j.get<std::string>());
  return j.get<double>();
}
template <class T>
T arg(const json& args, const char* key, T def) {
  if (!args.contains(key) || args[key].is_null()) return def;
  if constexpr (std::is_same_v<T, double>) return dbl(args[key]);
  else return args[key].get<T>();
}
std::optional<double> opt_double(const json& args, const char* key) {
  if (!args.contains(key) || args[key].is_null()) return std::nullopt;
  return dbl(args[key]);
}
std::pair<int, int> pair2(const json& args, const char* key, int def) {
  if (!args.contains(key)) return {def, def};
  const json& j = args[key];
  if (j.is_number()) return {j.get<int>(), j.get<int>()};
  return {j[0].get<int>(), j[1].get<int>()};
}
// A per-dim list (or one int for every dim).
std::vector<int> vec(const json& args, const char* key, int def) {
  if (!args.contains(key)) return {def};
  const json& j = args[key];
  if (j.is_number()) return {j.get<int>()};
  return j.get<std::vector<int>>();
}
std::optional<GraphTensor> opt_input(Ins& in, size_t i) {
  if (i < in.size()) return in[i];
  return std::nullopt;
}

// Binary arithmetic/comparison: tensor (op) tensor, tensor (op) scalar, or scalar (op) tensor.
OpFn binop(GraphTensor (*tt)(const GraphTensor&, const GraphTensor&), GraphTensor (*ts)(const GraphTensor&, double),
           GraphTensor (*st)(double, const GraphTensor&)) {
  return [=](Ins& in, const json& a) -> Outs {
    if (in.size() == 2) return {tt(in[0], in[1])};
    double s = dbl(a.at("scalar"));
    if (arg(a, "reverse", false)) {
      LUMINAL_CHECK(st != nullptr, "this op has no scalar-first form");
      return {st(s, in[0])};
    }
    return {ts(in[0], s)};
  };
}

#define CMP(NAME)                                                              \
  {#NAME, [](Ins& in, const json& a) -> Outs {                                 \
     if (in.size() == 2) return {in[0].NAME(in[1])};                           \
     return {in[0].NAME(dbl(a.at("scalar")))};                        \
   }}
#define UNARY(NAME) \
  {#NAME, [](Ins& in, const json&) -> Outs { return {in[0].NAME()}; }}
#define REDUCE(NAME)                                                                             \
  {#NAME, [](Ins& in, const json& a) -> Outs {                                                   \
     return {in[0].NAME(arg(a, "axes", std::vector<int>{}), arg(a, "keepdim", false))};          \
   }}

const std::map<std::string, OpFn>& registry() {
  static const std::map<std::string, OpFn> table = {
      // ---- arithmetic ----
      {"add", binop([](const GraphTensor& x, const GraphTensor& y) { return x + y; },
                    [](const GraphTensor& x, double s) { return x + s; },
                    [](double s, const GraphTensor& x) { return s + x; })},
      {"sub", binop([](const GraphTensor& x, const GraphTensor& y) { return x - y; },
                    [](const GraphTensor& x, double s) { return x - s; },
                    [](double s, const GraphTensor& x) { return s - x; })},
      {"mul", binop([](const GraphTensor& x, const GraphTensor& y) { return x * y; },
                    [](const GraphTensor& x, double s) { return x * s; },
                    [](double s, const GraphTensor& x) { return s * x; })},
      {"div", binop([](const GraphTensor& x, const GraphTensor& y) { return x / y; },
                    [](const GraphTensor& x, double s) { return x / s; },
                    [](double s, const GraphTensor& x) { return s / x; })},
      {"mod", binop([](const GraphTensor& x, const GraphTensor& y) { return x % y; },
                    [](const GraphTensor& x, double s) { return x % s; }, nullptr)},
      {"floor_div", [](Ins& in, const json&) -> Outs { return {in[0].floor_div(in[1])}; }},
      {"neg", [](Ins& in, const json&) -> Outs { return {-in[0]}; }},
      UNARY(abs),
      UNARY(sign),
      {"pow", [](Ins& in, const json& a) -> Outs {
         if (in.size() == 2) return {in[0].pow(in[1])};
         return {in[0].pow(dbl(a.at("scalar")))};
       }},
      {"minimum", [](Ins& in, const json& a) -> Outs {
         if (in.size() == 2) return {in[0].minimum(in[1])};
         return {in[0].minimum(dbl(a.at("scalar")))};
       }},
      {"maximum", [](Ins& in, const json& a) -> Outs {
         if (in.size() == 2) return {in[0].maximum(in[1])};
         return {in[0].maximum(dbl(a.at("scalar")))};
       }},
      {"clamp", [](Ins& in, const json& a) -> Outs { return {in[0].clamp(opt_double(a, "min"), opt_double(a, "max"))}; }},
      // ---- elementwise functions ----
      UNARY(exp), UNARY(exp2), UNARY(log), UNARY(log2), UNARY(sin), UNARY(cos), UNARY(tan), UNARY(sqrt),
      UNARY(rsqrt), UNARY(reciprocal), UNARY(floor), UNARY(ceil), UNARY(round), UNARY(erf), UNARY(tanh),
      UNARY(sigmoid), UNARY(relu), UNARY(gelu), UNARY(gelu_tanh), UNARY(silu),
      {"leaky_relu", [](Ins& in, const json& a) -> Outs { return {in[0].leaky_relu(arg(a, "slope", 0.01))}; }},
      {"softplus", [](Ins& in, const json& a) -> Outs {
         return {in[0].softplus(arg(a, "beta", 1.0), arg(a, "threshold", 20.0))};
       }},
      UNARY(log1p), UNARY(expm1), UNARY(log10), UNARY(trunc), UNARY(asin), UNARY(acos), UNARY(atan),
      UNARY(sinh), UNARY(cosh), UNARY(asinh), UNARY(acosh), UNARY(atanh), UNARY(isnan), UNARY(isinf),
      UNARY(isfinite), UNARY(selu), UNARY(mish), UNARY(hardswish), UNARY(hardsigmoid), UNARY(relu6),
      UNARY(logsigmoid), UNARY(softsign),
      {"fmod", binop([](const GraphTensor& x, const GraphTensor& y) { return x.fmod(y); },
                     [](const GraphTensor& x, double s) { return x.fmod(s); }, nullptr)},
      {"atan2", [](Ins& in, const json&) -> Outs { return {in[0].atan2(in[1])}; }},
      {"nan_to_num", [](Ins& in, const json& a) -> Outs {
         return {in[0].nan_to_num(arg(a, "nan", 0.0), opt_double(a, "posinf"), opt_double(a, "neginf"))};
       }},
      {"elu", [](Ins& in, const json& a) -> Outs { return {in[0].elu(arg(a, "alpha", 1.0))}; }},
      {"celu", [](Ins& in, const json& a) -> Outs { return {in[0].celu(arg(a, "alpha", 1.0))}; }},
      {"hardtanh", [](Ins& in, const json& a) -> Outs {
         return {in[0].hardtanh(arg(a, "min", -1.0), arg(a, "max", 1.0))};
       }},
      {"glu", [](Ins& in, const json& a) -> Outs { return {in[0].glu(arg(a, "axis", -1))}; }},
      // ---- comparisons and logic ----
      {"logical_xor", [](Ins& in, const json&) -> Outs { return {in[0].logical_xor(in[1])}; }},
      {"bitwise_and", [](Ins& in, const json&) -> Outs { return {in[0].bitwise_and(in[1])}; }},
      {"bitwise_or", [](Ins& in, const json&) -> Outs { return {in[0].bitwise_or(in[1])}; }},
      {"bitwise_xor", [](Ins& in, const json&) -> Outs { return {in[0].bitwise_xor(in[1])}; }},
      UNARY(bitwise_not),
      {"masked_fill", [](Ins& in, const json& a) -> Outs {
         if (in.size() == 3) return {in[0].masked_fill(in[1], in[2])};
         return {in[0].masked_fill(in[1], dbl(a.at("value")))};
       }},
      CMP(lt), CMP(le), CMP(gt), CMP(ge), CMP(eq), CMP(ne),
      {"logical_and", [](Ins& in, const json&) -> Outs { return {in[0].logical_and(in[1])}; }},
      {"logical_or", [](Ins& in, const json&) -> Outs { return {in[0].logical_or(in[1])}; }},
      UNARY(logical_not),
      {"where", [](Ins& in, const json&) -> Outs { return {GraphTensor::where(in[0], in[1], in[2])}; }},
      // ---- reductions ----
      REDUCE(sum), REDUCE(mean), REDUCE(max), REDUCE(min), REDUCE(prod), REDUCE(logsumexp),
      {"var", [](Ins& in, const json& a) -> Outs {
         return {in[0].var(arg(a, "axes", std::vector<int>{}), arg(a, "keepdim", false), arg(a, "correction", 1))};
       }},
      {"std", [](Ins& in, const json& a) -> Outs {
         return {in[0].std(arg(a, "axes", std::vector<int>{}), arg(a, "keepdim", false), arg(a, "correction", 1))};
       }},
      UNARY(sum_all),
      {"argmax", [](Ins& in, const json& a) -> Outs { return {in[0].argmax(a.at("axis"), arg(a, "keepdim", false))}; }},
      {"argmin", [](Ins& in, const json& a) -> Outs { return {in[0].argmin(a.at("axis"), arg(a, "keepdim", false))}; }},
      {"cumsum", [](Ins& in, const json& a) -> Outs { return {in[0].cumsum(a.at("axis"))}; }},
      {"softmax", [](Ins& in, const json& a) -> Outs { return {in[0].softmax(a.at("axis"))}; }},
      {"log_softmax", [](Ins& in, const json& a) -> Outs { return {in[0].log_softmax(a.at("axis"))}; }},
      {"layer_norm", [](Ins& in, const json& a) -> Outs {
         bool w = arg(a, "weight", false), b = arg(a, "bias", false);
         std::optional<GraphTensor> wt = w ? opt_input(in, 1) : std::nullopt;
         std::optional<GraphTensor> bt = b ? opt_input(in, w ? 2 : 1) : std::nullopt;
         return {in[0].layer_norm(a.at("normalized_rank"), wt, bt, arg(a, "eps", 1e-5))};
       }},
      {"rms_norm", [](Ins& in, const json& a) -> Outs {
         return {in[0].rms_norm(a.at("normalized_rank"), opt_input(in, 1), arg(a, "eps", 1e-6))};
       }},
      {"cumprod", [](Ins& in, const json& a) -> Outs { return {in[0].cumprod(a.at("axis"))}; }},
      {"cummax", [](Ins& in, const json& a) -> Outs {
         auto [v, i] = in[0].cummax(a.at("axis"));
         return {v, i};
       }},
      {"cummin", [](Ins& in, const json& a) -> Outs {
         auto [v, i] = in[0].cummin(a.at("axis"));
         return {v, i};
       }},
      {"logcumsumexp", [](Ins& in, const json& a) -> Outs { return {in[0].logcumsumexp(a.at("axis"))}; }},
      REDUCE(any), REDUCE(all),
      {"norm", [](Ins& in, const json& a) -> Outs {
         return {in[0].norm(arg(a, "p", 2.0), arg(a, "axes", std::vector<int>{}), arg(a, "keepdim", false))};
       }},
      {"median", [](Ins& in, const json& a) -> Outs {
         auto [v, i] = in[0].median(arg(a, "axis", -1), arg(a, "keepdim", false));
         return {v, i};
       }},
      {"kthvalue", [](Ins& in, const json& a) -> Outs {
         auto [v, i] = in[0].kthvalue(a.at("k"), arg(a, "axis", -1), arg(a, "keepdim", false));
         return {v, i};
       }},
      {"quantile", [](Ins& in, const json& a) -> Outs {
         return {in[0].quantile(dbl(a.at("q")), arg(a, "axis", -1), arg(a, "keepdim", false),
                                arg(a, "interpolation", std::string("linear")))};
       }},
      {"group_norm", [](Ins& in, const json& a) -> Outs {
         return {in[0].group_norm(a.at("groups"), opt_input(in, 1), opt_input(in, 2), arg(a, "eps", 1e-5))};
       }},
      {"batch_norm", [](Ins& in, const json& a) -> Outs {
         bool stats = arg(a, "running", true);
         size_t k = stats ? 3 : 1;
         return {in[0].batch_norm(stats ? opt_input(in, 1) : std::nullopt, stats ? opt_input(in, 2) : std::nullopt,
                                  opt_input(in, k), opt_input(in, k + 1), arg(a, "eps", 1e-5))};
       }},
      {"normalize", [](Ins& in, const json& a) -> Outs {
         return {in[0].normalize(arg(a, "p", 2.0), arg(a, "axis", 1), arg(a, "eps", 1e-12))};
       }},
      {"cross_entropy", [](Ins& in, const json& a) -> Outs {
         return {in[0].cross_entropy(in[1], opt_input(in, 2), arg<int64_t>(a, "ignore_index", -100),
                                     arg(a, "reduction", std::string("mean")), arg(a, "label_smoothing", 0.0))};
       }},
      // Statistics of a random op, compared with their expected values: [mean, var, lag-1
      // correlation, fraction equal on a rerun with the same seed, fraction equal with seed + 1].
      {"rand_stats", [](Ins&, const json& a) -> Outs {
         Graph& g = *current_graph();
         Shape shape = to_shape(a.at("shape"));
         uint64_t seed = a.at("seed");
         DType dt = parse_dtype(a.at("dtype").get<std::string>());
         bool normal = arg(a, "normal", false);
         // With "offset": the counter-offset overload, and "other" is the next offset (2^32 on).
         std::optional<double> offset;
         if (a.contains("offset")) offset = dbl(a.at("offset"));
         auto make = [&](uint64_t s, double shift = 0) {
           if (!offset) return normal ? randn(g, shape, s, dt) : rand(g, shape, s, dt);
           GraphTensor off = g.constant(*offset + shift, DType::I64);
           return normal ? randn(g, shape, s, off, dt) : rand(g, shape, s, off, dt);
         };
         GraphTensor x = make(seed).cast(DType::F64).reshape({-1});
         GraphTensor mean = x.mean({});
         GraphTensor c = x - mean;
         GraphTensor var = (c * c).mean({});
         Expression n = x.dim(0);
         GraphTensor lag = (c.slice(0, Expression(0), n - 1) * c.slice(0, Expression(1), n)).mean({}) / var;
         GraphTensor same = make(seed).eq(make(seed)).cast(DType::F64).mean({});
         GraphTensor other = (offset ? make(seed).eq(make(seed, 4294967296.0)) : make(seed).eq(make(seed + 1)))
                                 .cast(DType::F64)
                                 .mean({});
         // In range: [min >= lo, max < hi] (1 or 0); NaN fails both.
         GraphTensor y = make(seed);
         GraphTensor lo = y.min({}).ge(normal ? -7.0 : 0.0).cast(DType::F64);
         GraphTensor hi = y.max({}).lt(normal ? 7.0 : 1.0).cast(DType::F64);
         return {GraphTensor::stack({mean, var, lag, same, other}, 0), GraphTensor::stack({lo, hi}, 0)};
       }},
      // Dropout while training: [fraction zeroed, max |kept - x / (1 - p)|].
      {"dropout_stats", [](Ins& in, const json& a) -> Outs {
         double p = dbl(a.at("p"));
         GraphTensor y = in[0].dropout(p, true, a.at("seed")).cast(DType::F64);
         GraphTensor x = in[0].cast(DType::F64);
         GraphTensor zeroed = y.eq(0.0);
         GraphTensor diff = GraphTensor::where(zeroed, scalar_like(y, 0), (y - x / (1.0 - p)).abs());
         return {GraphTensor::stack({zeroed.cast(DType::F64).mean({}), diff.max({})}, 0)};
       }},
      {"dropout", [](Ins& in, const json& a) -> Outs {
         return {in[0].dropout(arg(a, "p", 0.5), arg(a, "training", false), arg<uint64_t>(a, "seed", 0))};
       }},
      {"full", [](Ins&, const json& a) -> Outs {
         return {full(*current_graph(), to_shape(a.at("shape")), dbl(a.at("value")),
                      parse_dtype(a.at("dtype").get<std::string>()))};
       }},
      {"zeros", [](Ins&, const json& a) -> Outs {
         return {zeros(*current_graph(), to_shape(a.at("shape")), parse_dtype(a.at("dtype").get<std::string>()))};
       }},
      {"ones", [](Ins&, const json& a) -> Outs {
         return {ones(*current_graph(), to_shape(a.at("shape")), parse_dtype(a.at("dtype").get<std::string>()))};
       }},
      {"eye", [](Ins&, const json& a) -> Outs {
         std::optional<Expression> m;
         if (a.contains("m")) m = to_expr(a.at("m"));
         return {eye(*current_graph(), to_expr(a.at("n")), m, parse_dtype(a.at("dtype").get<std::string>()))};
       }},
      {"linspace", [](Ins&, const json& a) -> Outs {
         return {linspace(*current_graph(), dbl(a.at("start")), dbl(a.at("end")), a.at("steps"),
                          parse_dtype(a.at("dtype").get<std::string>()))};
       }},
      // ---- linear algebra, convolution, pooling ----
      {"matmul", [](Ins& in, const json&) -> Outs { return {in[0].matmul(in[1])}; }},
      {"linear", [](Ins& in, const json&) -> Outs { return {in[0].linear(in[1], opt_input(in, 2))}; }},
      {"conv1d", [](Ins& in, const json& a) -> Outs {
         return {in[0].conv1d(in[1], opt_input(in, 2), arg(a, "stride", 1), arg(a, "padding", 0),
                              arg(a, "dilation", 1), arg(a, "groups", 1))};
       }},
      {"conv2d", [](Ins& in, const json& a) -> Outs {
         return {in[0].conv2d(in[1], opt_input(in, 2), pair2(a, "stride", 1), pair2(a, "padding", 0),
                              pair2(a, "dilation", 1), arg(a, "groups", 1))};
       }},
      {"max_pool2d", [](Ins& in, const json& a) -> Outs {
         return {in[0].max_pool2d(pair2(a, "kernel", 1), pair2(a, "stride", 0), pair2(a, "padding", 0))};
       }},
      {"avg_pool2d", [](Ins& in, const json& a) -> Outs {
         return {in[0].avg_pool2d(pair2(a, "kernel", 1), pair2(a, "stride", 0), pair2(a, "padding", 0))};
       }},
      {"conv3d", [](Ins& in, const json& a) -> Outs {
         return {in[0].conv3d(in[1], opt_input(in, 2), vec(a, "stride", 1), vec(a, "padding", 0), vec(a, "dilation", 1),
                              arg(a, "groups", 1))};
       }},
      {"conv_transpose", [](Ins& in, const json& a) -> Outs {
         return {in[0].conv_transpose(in[1], opt_input(in, 2), vec(a, "stride", 1), vec(a, "padding", 0),
                                      vec(a, "output_padding", 0), arg(a, "groups", 1), vec(a, "dilation", 1))};
       }},
      {"max_pool", [](Ins& in, const json& a) -> Outs {
         return {in[0].max_pool(vec(a, "kernel", 1), vec(a, "stride", 0), vec(a, "padding", 0), vec(a, "dilation", 1),
                                arg(a, "ceil_mode", false))};
       }},
      {"avg_pool", [](Ins& in, const json& a) -> Outs {
         return {in[0].avg_pool(vec(a, "kernel", 1), vec(a, "stride", 0), vec(a, "padding", 0), arg(a, "ceil_mode", false),
                                arg(a, "count_include_pad", true))};
       }},
      {"max_pool1d", [](Ins& in, const json& a) -> Outs {
         return {in[0].max_pool1d(a.at("kernel"), arg(a, "stride", 0), arg(a, "padding", 0))};
       }},
      {"avg_pool1d", [](Ins& in, const json& a) -> Outs {
         return {in[0].avg_pool1d(a.at("kernel"), arg(a, "stride", 0), arg(a, "padding", 0))};
       }},
      {"adaptive_avg_pool", [](Ins& in, const json& a) -> Outs {
         return {in[0].adaptive_avg_pool(a.at("size").get<std::vector<int64_t>>())};
       }},
      {"adaptive_max_pool", [](Ins& in, const json& a) -> Outs {
         return {in[0].adaptive_max_pool(a.at("size").get<std::vector<int64_t>>())};
       }},
      {"interpolate", [](Ins& in, const json& a) -> Outs {
         return {in[0].interpolate(a.at("size").get<std::vector<int64_t>>(), arg(a, "mode", std::string("nearest")),
                                   arg(a, "align_corners", false))};
       }},
      {"im2col", [](Ins& in, const json& a) -> Outs {
         return {in[0].im2col(pair2(a, "kernel", 1), pair2(a, "dilation", 1), pair2(a, "padding", 0),
                              pair2(a, "stride", 1))};
       }},
      {"col2im", [](Ins& in, const json& a) -> Outs {
         auto size = a.at("output_size").get<std::vector<int64_t>>();
         return {in[0].col2im({size.at(0), size.at(1)}, pair2(a, "kernel", 1), pair2(a, "dilation", 1),
                              pair2(a, "padding", 0), pair2(a, "stride", 1))};
       }},
      {"outer", [](Ins& in, const json&) -> Outs { return {in[0].outer(in[1])}; }},
      {"diag", [](Ins& in, const json& a) -> Outs { return {in[0].diag(arg<int64_t>(a, "offset", 0))}; }},
      {"diagonal", [](Ins& in, const json& a) -> Outs {
         return {in[0].diagonal(arg<int64_t>(a, "offset", 0), arg(a, "axis1", 0), arg(a, "axis2", 1))};
       }},
      UNARY(trace),
      {"einsum", [](Ins& in, const json& a) -> Outs { return {GraphTensor::einsum(a.at("equation"), in)}; }},
      // ---- movement ----
      {"identity", [](Ins& in, const json&) -> Outs { return {in[0]}; }},
      // A random view chain (test_view_chains.py): the view itself, and y * y read through it.
      {"view_chain", [](Ins& in, const json&) -> Outs { return {in[0], in[0] * in[0]}; }},
      UNARY(contiguous),
      {"reshape", [](Ins& in, const json& a) -> Outs { return {in[0].reshape(to_shape(a.at("shape")))}; }},
      {"permute", [](Ins& in, const json& a) -> Outs { return {in[0].permute(ints(a.at("dims")))}; }},
      {"transpose", [](Ins& in, const json& a) -> Outs { return {in[0].transpose(a.at("dim0"), a.at("dim1"))}; }},
      UNARY(t),
      {"expand", [](Ins& in, const json& a) -> Outs { return {in[0].expand(to_shape(a.at("shape")))}; }},
      {"expand_dim", [](Ins& in, const json& a) -> Outs {
         return {in[0].expand_dim(a.at("axis"), to_expr(a.at("size")))};
       }},
      {"unsqueeze", [](Ins& in, const json& a) -> Outs { return {in[0].unsqueeze(a.at("axis"))}; }},
      {"squeeze", [](Ins& in, const json& a) -> Outs {
         if (a.contains("axis")) return {in[0].squeeze(a.at("axis").get<int>())};
         return {in[0].squeeze()};
       }},
      {"flatten", [](Ins& in, const json& a) -> Outs { return {in[0].flatten(arg(a, "start", 0), arg(a, "end", -1))}; }},
      {"slice", [](Ins& in, const json& a) -> Outs {
         std::optional<int64_t> end;
         if (a.contains("end") && !a["end"].is_null()) end = a["end"].get<int64_t>();
         return {in[0].slice(a.at("axis"), arg<int64_t>(a, "start", 0), end, arg<int64_t>(a, "step", 1))};
       }},
      {"narrow", [](Ins& in, const json& a) -> Outs {
         return {in[0].narrow(a.at("axis"), to_expr(a.at("start")), to_expr(a.at("length")))};
       }},
      {"pad", [](Ins& in, const json& a) -> Outs {
         return {in[0].pad(a.at("axis"), to_expr(a.at("before")), to_expr(a.at("after")), arg(a, "value", 0.0))};
       }},
      {"concat", [](Ins& in, const json& a) -> Outs { return {GraphTensor::concat(in, a.at("axis"))}; }},
      {"stack", [](Ins& in, const json& a) -> Outs { return {GraphTensor::stack(in, a.at("axis"))}; }},
      {"split", [](Ins& in, const json& a) -> Outs {
         std::vector<Expression> sizes;
         for (const auto& s : a.at("sizes")) sizes.push_back(to_expr(s));
         return in[0].split(sizes, a.at("axis"));
       }},
      {"chunk", [](Ins& in, const json& a) -> Outs { return in[0].chunk(a.at("chunks"), a.at("axis")); }},
      {"repeat", [](Ins& in, const json& a) -> Outs { return {in[0].repeat(to_shape(a.at("times")))}; }},
      {"flip", [](Ins& in, const json& a) -> Outs { return {in[0].flip(ints(a.at("dims")))}; }},
      {"roll", [](Ins& in, const json& a) -> Outs {
         return {in[0].roll(a.at("shifts").get<std::vector<int64_t>>(), arg(a, "axes", std::vector<int>{}))};
       }},
      {"movedim", [](Ins& in, const json& a) -> Outs {
         return {in[0].movedim(ints(a.at("source")), ints(a.at("destination")))};
       }},
      {"unbind", [](Ins& in, const json& a) -> Outs { return in[0].unbind(arg(a, "axis", 0)); }},
      {"repeat_interleave", [](Ins& in, const json& a) -> Outs {
         std::optional<int> axis;
         if (a.contains("axis")) axis = a.at("axis").get<int>();
         return {in[0].repeat_interleave(a.at("repeats"), axis)};
       }},
      {"unfold", [](Ins& in, const json& a) -> Outs {
         return {in[0].unfold(a.at("axis"), a.at("size"), a.at("step"))};
       }},
      {"pixel_shuffle", [](Ins& in, const json& a) -> Outs { return {in[0].pixel_shuffle(a.at("r"))}; }},
      {"pixel_unshuffle", [](Ins& in, const json& a) -> Outs { return {in[0].pixel_unshuffle(a.at("r"))}; }},
      {"tril", [](Ins& in, const json& a) -> Outs { return {in[0].tril(arg<int64_t>(a, "diagonal", 0))}; }},
      {"triu", [](Ins& in, const json& a) -> Outs { return {in[0].triu(arg<int64_t>(a, "diagonal", 0))}; }},
      // ---- indexing, sorting ----
      {"gather", [](Ins& in, const json& a) -> Outs { return {in[0].gather(a.at("axis"), in[1])}; }},
      {"scatter", [](Ins& in, const json& a) -> Outs { return {in[0].scatter(a.at("axis"), in[1], in[2])}; }},
      {"scatter_add", [](Ins& in, const json& a) -> Outs { return {in[0].scatter_add(a.at("axis"), in[1], in[2])}; }},
      {"index_add", [](Ins& in, const json& a) -> Outs {
         return {in[0].index_add(a.at("axis"), in[1], in[2], arg(a, "alpha", 1.0))};
       }},
      {"index_put", [](Ins& in, const json& a) -> Outs {
         std::vector<GraphTensor> idx(in.begin() + 1, in.end() - 1);
         return {in[0].index_put(idx, in.back(), arg(a, "accumulate", false))};
       }},
      {"index_select", [](Ins& in, const json& a) -> Outs { return {in[0].index_select(a.at("axis"), in[1])}; }},
      {"embedding", [](Ins& in, const json&) -> Outs { return {in[0].embedding(in[1])}; }},
      {"one_hot", [](Ins& in, const json& a) -> Outs { return {in[0].one_hot(a.at("num_classes"))}; }},
      {"topk", [](Ins& in, const json& a) -> Outs {
         auto [v, i] = in[0].topk(a.at("k"), arg(a, "axis", -1), arg(a, "largest", true));
         return {v, i};
       }},
      {"argsort", [](Ins& in, const json& a) -> Outs {
         return {in[0].argsort(arg(a, "axis", -1), arg(a, "descending", false))};
       }},
      {"sort", [](Ins& in, const json& a) -> Outs {
         auto [v, i] = in[0].sort(arg(a, "axis", -1), arg(a, "descending", false));
         return {v, i};
       }},
      {"cast", [](Ins& in, const json& a) -> Outs { return {in[0].cast(parse_dtype(a.at("dtype").get<std::string>()))}; }},
  };
  return table;
}

GraphTensor apply_view(const GraphTensor& x, const json& v) {
  if (v.is_null()) return x;
  std::string kind = v.at("kind");
  if (kind == "transpose") return x.transpose(v.at("dims")[0], v.at("dims")[1]);
  if (kind == "permute") return x.permute(ints(v.at("dims")));
  if (kind == "slice") {
    std::optional<int64_t> end;
    if (v.contains("end") && !v["end"].is_null()) end = v["end"].get<int64_t>();
    return x.slice(v.at("axis"), arg<int64_t>(v, "start", 0), end, arg<int64_t>(v, "step", 1));
  }
  if (kind == "expand") return x.expand(to_shape(v.at("shape")));
  if (kind == "flip") return x.flip(ints(v.at("dims")));
  if (kind == "pad") return x.pad(v.at("axis"), v.at("before").get<int64_t>(), v.at("after").get<int64_t>(), arg(v, "value", 0.0));
  if (kind == "squeeze") return x.squeeze(v.at("axis"));
  if (kind == "unsqueeze") return x.unsqueeze(v.at("axis"));
  if (kind == "reshape") return x.reshape(to_shape(v.at("shape")));
  if (kind == "chain") {  // a list of steps, applied in order
    GraphTensor y = x;
    for (const auto& step : v.at("steps")) y = apply_view(y, step);
    return y;
  }
  fail("unknown view kind '", kind, "'");
}

// Run one case; returns its outputs by name, in order.
std::vector<std::pair<std::string, HostTensor>> run_case(const json& c, const SafetensorsFile& inputs) {
  const std::string id = c.at("id");
  const std::string op = c.at("op");
  auto it = registry().find(op);
  LUMINAL_CHECK(it != registry().end(), "unknown op '", op, "'");
  Graph cx;
  g_graph = &cx;
  DimMap dims;
  if (c.contains("dims"))
    for (auto& [k, v] : c["dims"].items()) {
      dims[k] = v.get<int64_t>();
      cx.set_dim(k, v.get<int64_t>());
    }
  std::vector<std::pair<GraphTensor, std::string>> sources;
  Ins ins;
  for (const auto& in : c.at("inputs")) {
    std::string name = id + ".in." + in.at("name").get<std::string>();
    GraphTensor x = cx.named_tensor(name, to_shape(in.at("shape")), parse_dtype(in.at("dtype").get<std::string>()));
    sources.emplace_back(x, name);
    ins.push_back(apply_view(x, in.contains("view") ? in["view"] : json()));
  }
  json args = c.contains("args") ? c["args"] : json::object();
  Outs outs = it->second(ins, args);
  std::vector<GraphTensor> marked;
  for (const auto& o : outs) marked.push_back(o.output());
  // Default: no rewrite rules, so the program is the op's graph as built (through the
  // lowering/extraction round trip). --search: the full default compile (rules + search).
  CompileOptions options;
  if (g_search) options.search_graph_limit(8).trials(1);  // a small search: enough to exercise rewrites
  else options.rulesets({}).search_graph_limit(1);
  auto rt = cx.compile(ReferenceRuntime{}, options);
  for (auto& [x, name] : sources) rt.set_data(x, inputs.read(name));
  rt.execute(dims);
  std::vector<std::pair<std::string, HostTensor>> result;
  auto collect = [&](const Runtime& r, const std::string& prefix) {
    for (size_t k = 0; k < marked.size(); ++k) {
      HostTensor h = r.get_tensor(marked[k].id());
      h.shape.clear();
      for (const auto& d : marked[k].shape()) h.shape.push_back(d.eval(dims));
      result.emplace_back(prefix + std::to_string(k), std::move(h));
    }
  };
  collect(rt, id + ".");
  for (const auto& [backend, prototype] : g_backends) {
    try {
      std::unique_ptr<Runtime> rt_b = prototype->fresh();
      CompileOptions first_candidate;
      first_candidate.search_graph_limit(1).trials(1);
      cx.compile_into(*rt_b, first_candidate);
      for (auto& [x, name] : sources) rt_b->set_data(x, inputs.read(name));
      rt_b->execute(dims);
      collect(*rt_b, id + "." + backend + ".");
    } catch (const std::exception& e) {
      std::cout << json{{"id", id}, {"backend", backend}, {"backend_error", e.what()}}.dump() << std::endl;
    }
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const char* usage =
      "usage: luminal_op_runner [--search] [--backend cpu|cuda]... cases.json inputs.safetensors outputs.safetensors\n";
  try {
    while (!args.empty() && (args[0] == "--search" || args[0] == "--cpu" || args[0] == "--backend")) {
      if (args[0] == "--search") {
        g_search = true;
      } else {
        std::string name = "cpu";
        if (args[0] == "--backend") {
          if (args.size() < 2) {
            std::cerr << usage;
            return 2;
          }
          name = args[1];
          args.erase(args.begin());
        }
        g_backends.emplace_back(name, make_backend(name));
      }
      args.erase(args.begin());
    }
  } catch (const std::exception& e) {
    std::cerr << "luminal_op_runner: " << e.what() << "\n";
    return 2;
  }
  if (args.size() != 3) {
    std::cerr << usage;
    return 2;
  }
  json cases;
  {
    std::ifstream f(args[0]);
    if (!f) {
      std::cerr << "cannot open " << args[0] << "\n";
      return 2;
    }
    f >> cases;
  }
  SafetensorsFile inputs = SafetensorsFile::open(args[1]);
  json backend_names = json::array();
  for (const auto& b : g_backends) backend_names.push_back(b.first);
  std::cout << json{{"backends", backend_names}}.dump() << std::endl;
  std::map<std::string, HostTensor> outputs;
  int ok = 0, failed = 0;
  for (const auto& c : cases) {
    std::string id = c.value("id", std::string("?"));
    std::cout << json{{"start", id}}.dump() << std::endl;  // flushed: survives an abort
    try {
      json shapes = json::array();
      for (auto& [k, v] : run_case(c, inputs)) {
        shapes.push_back(v.shape);  // safetensors cannot tell a 0-dim tensor from shape [1]
        outputs[k] = std::move(v);
      }
      std::cout << json{{"id", id}, {"shapes", shapes}}.dump() << std::endl;
      ++ok;
    } catch (const Error& e) {
      ++failed;
      std::cout << json{{"id", id}, {"error", e.what()}}.dump() << std::endl;
    } catch (const std::exception& e) {
      ++failed;
      std::cout << json{{"id", id}, {"error", std::string("non-luminal exception: ") + e.what()}}.dump()
                << std::endl;
    }
  }
  write_safetensors(args[2], outputs);
  std::cerr << "luminal_op_runner: " << ok << " cases ran, " << failed << " raised\n";
  return 0;
}
