// Expression, DType, Graph and CompileOptions.
#include <nanobind/operators.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"

namespace luminal::python {

void TiesToGraph::postcall(PyObject** args, size_t nargs, nb::handle ret) {
  auto tie = [](nb::handle t) {
    GraphTensor* gt = nullptr;
    if (!nb::try_cast<GraphTensor*>(t, gt) || gt == nullptr || gt->id() == kNoNode) return;
    nb::handle graph = nb::find(&gt->graph());
    if (graph.is_valid()) nb::keep_alive_obj(t, graph);
  };
  if (!ret.is_valid()) return;
  if (nb::isinstance<nb::tuple>(ret) || nb::isinstance<nb::list>(ret)) {
    for (nb::handle item : ret) tie(item);
  } else {
    tie(ret);
  }
}

void bind_expression(nb::module_& m) {
  nb::class_<Expression>(m, "Expression",
                         "A symbolic integer (a dimension): constants, named variables and their arithmetic. "
                         "Division is floor division, as in Python.")
      .def(nb::init<int64_t>(), "value"_a)
      .def("__init__", [](Expression* e, const std::string& name) { new (e) Expression(Expression::var(name)); },
           "name"_a, "A named variable (a dynamic dim).")
      .def_static("var", &Expression::var, "name"_a)
      .def("is_constant", &Expression::is_constant)
      .def("as_constant", &Expression::as_constant)
      .def("variables", &Expression::variables)
      .def("eval", [](const Expression& e, const DimMap& dims) { return e.eval(dims); }, "dims"_a)
      .def("substitute", [](const Expression& e, const std::string& name, const Expression& v) {
             return e.substitute(name, v);
           }, "name"_a, "value"_a)
      .def("__int__", [](const Expression& e) {
        auto c = e.as_constant();
        LUMINAL_CHECK(c.has_value(), "int(): expression ", e.to_string(), " is not a constant");
        return *c;
      })
      .def("__index__", [](const Expression& e) {
        auto c = e.as_constant();
        LUMINAL_CHECK(c.has_value(), "index: expression ", e.to_string(), " is not a constant");
        return *c;
      })
      .def(nb::self + nb::self).def(nb::self - nb::self).def(nb::self * nb::self)
      .def(-nb::self)
      .def("__floordiv__", [](const Expression& a, const Expression& b) { return a / b; })
      .def("__mod__", [](const Expression& a, const Expression& b) { return a % b; })
      .def("__radd__", [](const Expression& a, int64_t b) { return Expression(b) + a; })
      .def("__rsub__", [](const Expression& a, int64_t b) { return Expression(b) - a; })
      .def("__rmul__", [](const Expression& a, int64_t b) { return Expression(b) * a; })
      .def("__rfloordiv__", [](const Expression& a, int64_t b) { return Expression(b) / a; })
      .def("__eq__", [](const Expression& a, const Expression& b) { return a == b; })
      .def("__ne__", [](const Expression& a, const Expression& b) { return !(a == b); })
      .def("__hash__", &Expression::hash)
      .def("__str__", &Expression::to_string)
      .def("__repr__", [](const Expression& e) { return "Expression(" + e.to_string() + ")"; });
  // Shapes read naturally: [3, "seq", Expression.var("p") + 1].
  nb::implicitly_convertible<int64_t, Expression>();
  nb::implicitly_convertible<std::string, Expression>();

  nb::enum_<DType> dtype(m, "DType", "Element types.");
#define LUMINAL_PY_DTYPE(name, ...) dtype.value(#name, DType::name);
  LUMINAL_DTYPES(LUMINAL_PY_DTYPE)
#undef LUMINAL_PY_DTYPE
  m.def("parse_dtype", [](const std::string& s) { return parse_dtype(s); }, "name"_a,
        "DType from 'F32', 'float32', 'bf16', ... (safetensors and torch spellings).");
  m.def("dtype_bytes", &dtype_bytes, "dtype"_a);
  m.def("dtype_torch_name", [](DType d) { return std::string(dtype_torch_name(d)); }, "dtype"_a);
  m.def("is_float", &is_float, "dtype"_a);
  m.def("promote", &promote, "a"_a, "b"_a, "PyTorch's type promotion of two tensor dtypes.");
}

void bind_graph(nb::module_& m) {
  nb::class_<DimBucket>(m, "DimBucket", "An inclusive range of one dynamic dim, searched at `representative`.")
      .def(nb::init<int64_t, int64_t>(), "min"_a, "max"_a)
      .def("__init__", [](DimBucket* b, int64_t lo, int64_t hi, int64_t rep) {
             new (b) DimBucket(lo, hi);
             b->representative(rep);
           }, "min"_a, "max"_a, "representative"_a)
      .def_ro("min", &DimBucket::min)
      .def_ro("max", &DimBucket::max)
      .def_prop_ro("representative", &DimBucket::rep);

  nb::class_<CompileReport>(m, "CompileReport")
      .def(nb::init<>())
      .def_ro("total_s", &CompileReport::total_s)
      .def_ro("saturate_s", &CompileReport::saturate_s)
      .def_ro("search_s", &CompileReport::search_s)
      .def_ro("candidates", &CompileReport::candidates)
      .def_ro("plans", &CompileReport::plans)
      .def_ro("egraph_nodes", &CompileReport::egraph_nodes)
      .def_ro("block_copies", &CompileReport::block_copies, "Copies of the repeated block (layers) found, 0 if none.")
      .def_ro("block_period", &CompileReport::block_period, "Nodes in one copy of the repeated block.")
      .def_ro("notes", &CompileReport::notes)
      .def("__str__", &CompileReport::to_string);

  nb::class_<CompileOptions>(m, "CompileOptions",
                             "How much search to spend and how to bucket dynamic dims. Keyword arguments "
                             "set fields of the same name.")
      .def("__init__", [](CompileOptions* o, int64_t search_graph_limit, double search_time_limit_s,
                          int generation_size, int mutations, int trials, double profile_timeout_s, uint64_t seed,
                          bool verbose, std::optional<std::vector<std::string>> rulesets,
                          std::optional<int64_t> egraph_node_limit) {
             new (o) CompileOptions();
             o->search_graph_limit(search_graph_limit).generation_size(generation_size).mutations(mutations)
                 .trials(trials).profile_timeout(std::chrono::duration<double>(profile_timeout_s)).seed(seed)
                 .verbose(verbose);
             if (search_time_limit_s > 0) o->search_time_limit(std::chrono::duration<double>(search_time_limit_s));
             if (rulesets) o->rulesets(*rulesets);
             if (egraph_node_limit) o->egraph_node_limit(*egraph_node_limit);
           },
           "search_graph_limit"_a = 100, "search_time_limit_s"_a = 0.0, "generation_size"_a = 10,
           "mutations"_a = 10, "trials"_a = 3, "profile_timeout_s"_a = 1.0, "seed"_a = 0, "verbose"_a = false,
           "rulesets"_a = nb::none(), "egraph_node_limit"_a = nb::none())
      .def_rw("search_graph_limit", &CompileOptions::search_graph_limit_)
      .def_rw("generation_size", &CompileOptions::generation_size_)
      .def_rw("mutations", &CompileOptions::mutations_)
      .def_rw("trials", &CompileOptions::trials_)
      .def_rw("seed", &CompileOptions::seed_)
      .def_rw("verbose", &CompileOptions::verbose_)
      .def_rw("rulesets", &CompileOptions::rulesets_)
      .def_rw("egraph_node_limit", &CompileOptions::egraph_node_limit_)
      .def("dim_buckets", [](CompileOptions& o, const std::string& dim, std::vector<DimBucket> buckets) -> CompileOptions& {
             return o.dim_buckets(dim, std::move(buckets));
           }, "dim"_a, "buckets"_a, nb::rv_policy::reference_internal, "Buckets of one dynamic dim (one plan each).")
      .def_prop_ro("buckets", [](const CompileOptions& o) { return o.dim_buckets_; });

  nb::class_<Graph>(m, "Graph", "A lazy computation graph; tensors are built on it and it compiles into a runtime.")
      .def(nb::init<>())
      .def("tensor", &Graph::tensor, "shape"_a, "dtype"_a = DType::F32, nb::call_policy<TiesToGraph>(),
           "An input tensor. Dims are ints, names of dynamic dims, or Expressions.")
      .def("named_tensor", &Graph::named_tensor, "name"_a, "shape"_a, "dtype"_a = DType::F32,
           nb::call_policy<TiesToGraph>(), "An input tensor with a name (weights are matched by name).")
      .def("constant", &Graph::constant, "value"_a, "dtype"_a = DType::F32, nb::call_policy<TiesToGraph>())
      .def("arange", nb::overload_cast<const Expression&, DType>(&Graph::arange), "n"_a, "dtype"_a = DType::I32,
           nb::call_policy<TiesToGraph>())
      .def("arange", nb::overload_cast<double, double, double, DType>(&Graph::arange), "start"_a, "end"_a,
           "step"_a = 1.0, "dtype"_a = DType::F32, nb::call_policy<TiesToGraph>())
      .def("full", [](Graph& g, const Shape& shape, double value, DType dtype) { return full(g, shape, value, dtype); },
           "shape"_a, "value"_a, "dtype"_a = DType::F32, nb::call_policy<TiesToGraph>())
      .def("zeros", [](Graph& g, const Shape& shape, DType dtype) { return zeros(g, shape, dtype); }, "shape"_a,
           "dtype"_a = DType::F32, nb::call_policy<TiesToGraph>())
      .def("ones", [](Graph& g, const Shape& shape, DType dtype) { return ones(g, shape, dtype); }, "shape"_a,
           "dtype"_a = DType::F32, nb::call_policy<TiesToGraph>())
      .def("eye", [](Graph& g, const Expression& n, std::optional<Expression> m, DType dtype) { return eye(g, n, m, dtype); },
           "n"_a, "m"_a = nb::none(), "dtype"_a = DType::F32, nb::call_policy<TiesToGraph>())
      .def("linspace", [](Graph& g, double start, double end, int64_t steps, DType dtype) {
             return linspace(g, start, end, steps, dtype);
           }, "start"_a, "end"_a, "steps"_a, "dtype"_a = DType::F32, nb::call_policy<TiesToGraph>())
      .def("rand", [](Graph& g, const Shape& shape, uint64_t seed, DType dtype, const std::optional<GraphTensor>& offset) {
             return offset ? rand(g, shape, seed, *offset, dtype) : rand(g, shape, seed, dtype);
           }, "shape"_a, "seed"_a = 0, "dtype"_a = DType::F32, "offset"_a = nb::none(), nb::call_policy<TiesToGraph>(),
           "Uniform [0, 1): a counter-based hash of the element index and the seed (the same on every runtime); "
           "`offset` (an I64 scalar tensor, e.g. an input fed per run) shifts the counters.")
      .def("randn", [](Graph& g, const Shape& shape, uint64_t seed, DType dtype, const std::optional<GraphTensor>& offset) {
             return offset ? randn(g, shape, seed, *offset, dtype) : randn(g, shape, seed, dtype);
           }, "shape"_a, "seed"_a = 0, "dtype"_a = DType::F32, "offset"_a = nb::none(), nb::call_policy<TiesToGraph>(),
           "Standard normal (Box-Muller on the same counter-based hash as rand), `offset` as rand.")
      .def("iota", &Graph::iota, "value"_a, "shape"_a, "dtype"_a = DType::I32, nb::call_policy<TiesToGraph>(),
           "Element at flat index z is value(z); Expression.var('z') is the index.")
      .def("update", &Graph::update, "state"_a, "value"_a, nb::call_policy<TiesToGraph>(),
           "After each execute the persisted input `state` holds `value` (KV caches).")
      .def("set_dim", &Graph::set_dim, "name"_a, "value"_a, "Representative value of a dynamic dim for search.")
      .def_prop_ro("dim_map", [](const Graph& g) { return std::map<std::string, int64_t>(g.dim_map().begin(), g.dim_map().end()); })
      .def("__len__", &Graph::size)
      .def("inputs", &Graph::inputs, "Input node ids in creation order.")
      .def("outputs", &Graph::outputs, "Output node ids in creation order.")
      .def("input_label", [](const Graph& g, NodeId id) { return g.node(id).label; }, "node"_a)
      .def("find_input", [](const Graph& g, const std::string& label) -> std::optional<NodeId> {
             NodeId id = g.find_input(label);
             if (id == kNoNode) return std::nullopt;
             return id;
           }, "label"_a)
      .def("to_dot", &Graph::to_dot);
}

}  // namespace luminal::python
