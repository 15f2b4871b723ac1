// Every Unary/Binary/Reduce op of ops.def, Cast between all dtypes, Gather, Iota,
// Constant and Scatter: lower -> emit C++ -> compile -> run, against the reference, with
// varied views (permute, broadcast, pad, slice with step, flip) and a symbolic dim.
#include "harness.hpp"

namespace luminal::kernel::testing {
namespace {

constexpr OpKind kAllOps[] = {
#define LUMINAL_OP(name, ...) OpKind::name,
#include "luminal/ops.def"
#undef LUMINAL_OP
};

const Expression kSeq = Expression::var("seq");
const std::vector<DimMap> kSeqDims = {{{"seq", 3}}, {{"seq", 6}}};

std::vector<DType> dtypes_of(OpKind op) {
  if (op_category(op) == OpCategory::Unary && op != OpKind::Cast) return {DType::F32, DType::F16, DType::BF16, DType::F64};
  return {std::begin(kAllDTypes), std::end(kAllDTypes)};
}

Region region_of(Graph g, NodeId result) {
  add_output(g, result);
  return Region{std::move(g)};
}

// Region for `op` applied to inputs read through views `a` (and `b`), logical [rows, 5].
Region op_region(OpKind op, DType in_dt, DType out_dt, ViewKind a, ViewKind b, const Expression& rows, int axis = 1) {
  Graph g;
  const int64_t cols = 5;
  std::vector<NodeInput> ins = {viewed_input(g, in_dt, a, rows, cols)};
  if (op_category(op) == OpCategory::Binary) ins.push_back(viewed_input(g, in_dt, b, rows, cols));
  Shape shape = {rows, cols};
  if (op_category(op) == OpCategory::Reduce) shape.erase(shape.begin() + axis);
  return region_of(g, add_op(g, op, out_dt, shape, std::move(ins), op_category(op) == OpCategory::Reduce ? axis : -1));
}

// Nonzero divisors for integer Mod (input 1); everything else varied.
auto mod_safe_data(OpKind op) {
  return [op](size_t input, DType dt, size_t n, std::mt19937& rng) {
    return random_tensor(dt, n, rng, op == OpKind::Mod && !is_float(dt) && input == 1);
  };
}

TEST(KernelOps, EveryOpOfTheTableEveryDtypeAndView) {
  Batch batch;
  size_t cycle = 0;
  auto next_view = [&] { return kViewKinds[cycle++ % std::size(kViewKinds)]; };
  for (OpKind op : kAllOps) {
    OpCategory cat = op_category(op);
    if (op == OpKind::Cast || (cat != OpCategory::Unary && cat != OpCategory::Binary && cat != OpCategory::Reduce)) continue;
    for (DType dt : dtypes_of(op)) {
      DType out = op == OpKind::LessThan ? DType::Bool : dt;
      // F32 sees every view kind; other dtypes two of them each, cycling.
      std::vector<ViewKind> views;
      if (dt == DType::F32) views.assign(std::begin(kViewKinds), std::end(kViewKinds));
      else views = {next_view(), next_view()};
      for (ViewKind a : views) {
        ViewKind b = next_view();
        bool int_mod = op == OpKind::Mod && !is_float(dt);
        if (int_mod && b == ViewKind::Padded) b = ViewKind::Contiguous;  // padding would divide by zero
        std::string name = std::string(op_name(op)) + " " + std::string(dtype_name(dt)) + " " + view_name(a) + "/" + view_name(b);
        for (int axis : {0, 1}) {
          if (cat != OpCategory::Reduce && axis == 0) continue;
          batch.add(name + " axis " + std::to_string(axis), op_region(op, dt, out, a, b, 7, axis), {{}}, mod_safe_data(op));
        }
      }
      // A symbolic row count, run with two values by the same compiled kernel.
      batch.add(std::string(op_name(op)) + " " + std::string(dtype_name(dt)) + " seq",
                op_region(op, dt, out, ViewKind::Permute, ViewKind::Sliced, kSeq, 0), kSeqDims, mod_safe_data(op));
    }
  }
  EXPECT_GT(batch.size(), 100u);
  batch.run(test_compiler());
}

TEST(KernelOps, CastBetweenEveryPairOfDtypes) {
  Batch batch;
  size_t cycle = 0;
  for (DType from : kAllDTypes)
    for (DType to : kAllDTypes) {
      ViewKind v = kViewKinds[cycle++ % std::size(kViewKinds)];
      Expression rows = cycle % 4 == 0 ? kSeq : Expression(7);
      batch.add("Cast " + std::string(dtype_name(from)) + "->" + std::string(dtype_name(to)) + " " + view_name(v),
                op_region(OpKind::Cast, from, to, v, v, rows), cycle % 4 == 0 ? kSeqDims : std::vector<DimMap>{{}});
    }
  batch.run(test_compiler());
}

TEST(KernelOps, GatherIotaConstant) {
  Batch batch;
  for (DType dt : kAllDTypes) {
    for (DType index_dt : {DType::I32, DType::I64}) {
      // Gather rows of a permuted [4, 6] table (24 elements) by [seq, 3] indexes.
      Graph g;
      NodeInput idx{add_input(g, index_dt, {kSeq, 3}), ShapeTracker::contiguous({kSeq, 3})};
      int axes[] = {1, 0};
      NodeInput data{add_input(g, dt, {6, 4}), ShapeTracker::contiguous({6, 4}).permute(axes)};
      NodeId gather = add_op(g, OpKind::Gather, dt, {kSeq, 3}, {idx, data});
      batch.add("Gather " + std::string(dtype_name(dt)) + " by " + std::string(dtype_name(index_dt)), region_of(g, gather),
                kSeqDims, [](size_t input, DType t, size_t n, std::mt19937& rng) {
                  if (input != 0) return random_tensor(t, n, rng);
                  HostTensor h = HostTensor::zeros(t, n);
                  for (size_t i = 0; i < n; ++i) h.set_i64(i, static_cast<int64_t>((i * 7 + rng() % 3) % 24));
                  return h;
                });
    }
    // A constant broadcast into an Add with an input.
    Graph g;
    Node c;
    c.op = OpKind::Constant;
    c.dtype = dt;
    c.constant = dt == DType::Bool ? 1.0 : -2.75;
    NodeId cid = g.add_node(c);
    NodeInput x{add_input(g, dt, {kSeq, 5}), ShapeTracker::contiguous({kSeq, 5})};
    NodeInput cb{cid, ShapeTracker::contiguous({}).insert_broadcast(0, kSeq).insert_broadcast(1, 5)};
    batch.add("Constant " + std::string(dtype_name(dt)), region_of(g, add_op(g, OpKind::Add, dt, {kSeq, 5}, {x, cb})), kSeqDims);
  }
  for (DType dt : {DType::I32, DType::I64, DType::I8, DType::U8, DType::Bool}) {
    Graph g;
    Node n;
    n.op = OpKind::Iota;
    n.dtype = dt;
    n.shape = {kSeq, 5};
    n.iota_expr = (Expression::index() * 37 + kSeq * 3) % 23 - 7;
    batch.add("Iota " + std::string(dtype_name(dt)), region_of(g, g.add_node(n)), kSeqDims);
  }
  for (double v : {std::nan(""), -std::numeric_limits<double>::infinity(), -0.0}) {
    Graph g;
    Node c;
    c.op = OpKind::Constant;
    c.dtype = DType::F32;
    c.constant = v;
    NodeId cid = g.add_node(c);
    add_op(g, OpKind::Output, DType::F32, {3, 2}, {{cid, ShapeTracker::contiguous({}).insert_broadcast(0, 3).insert_broadcast(1, 2)}});
    batch.add("Constant F32 " + std::to_string(v), Region{g});
  }
  batch.run(test_compiler());
}

TEST(KernelOps, ScatterCopiesDestThenWritesSource) {
  Batch batch;
  for (DType dt : {DType::F32, DType::I8, DType::BF16}) {
    Graph g;
    NodeInput dest{add_input(g, dt, {kSeq, 4}), ShapeTracker::contiguous({kSeq, 4})};
    NodeInput idx{add_input(g, DType::I64, {3}), ShapeTracker::contiguous({3})};
    NodeInput src{add_input(g, dt, {3}), ShapeTracker::contiguous({3}).flip(0)};
    NodeId s = add_op(g, OpKind::Scatter, dt, {kSeq, 4}, {dest, idx, src});
    Region r = region_of(g, s);
    auto k = lower(r);
    ASSERT_TRUE(k);
    EXPECT_EQ(k->geometry, Geometry::SingleBlock);
    batch.add("Scatter " + std::string(dtype_name(dt)), r, kSeqDims, [](size_t input, DType t, size_t n, std::mt19937& rng) {
      if (input != 1) return random_tensor(t, n, rng);
      HostTensor h = HostTensor::zeros(t, n);
      for (size_t i = 0; i < n; ++i) h.set_i64(i, static_cast<int64_t>(i * 4 + 1));  // distinct, in range for seq >= 3
      return h;
    });
  }
  batch.run(test_compiler());
}

// Integer modulo by zero and out-of-range gathers set the error slot instead of crashing.
TEST(KernelOps, RuntimeErrorsSetTheErrorSlot) {
  auto run = [](const Region& r, std::vector<HostTensor> inputs, DType out, size_t n) {
    auto k = lower(r);
    EXPECT_TRUE(k);
    auto lib = test_compiler().compile(emit_cpp(*k, "err_kernel"));
    HostTensor got = HostTensor::zeros(out, n);
    int32_t error[kErrorWords] = {};
    std::vector<void*> buffers;
    for (auto& t : inputs) buffers.push_back(t.bytes.data());
    buffers.push_back(got.bytes.data());
    buffers.push_back(error);
    lib->function<KernelFn>("err_kernel")(buffers.data(), nullptr, 0, k->extent.eval({}));
    return error[0];
  };
  {
    Region r = op_region(OpKind::Mod, DType::I32, DType::I32, ViewKind::Contiguous, ViewKind::Contiguous, 7);
    std::mt19937 rng(1);
    HostTensor b = random_tensor(DType::I32, 35, rng, true);
    EXPECT_EQ(run(r, {random_tensor(DType::I32, 35, rng), b}, DType::I32, 35), 0);
    b.set_i64(17, 0);
    EXPECT_EQ(run(r, {random_tensor(DType::I32, 35, rng), b}, DType::I32, 35),
              static_cast<int32_t>(KernelError::IntegerModByZero));
  }
  {
    Graph g;
    NodeInput idx{add_input(g, DType::I32, {4}), ShapeTracker::contiguous({4})};
    NodeInput data{add_input(g, DType::F32, {5}), ShapeTracker::contiguous({5})};
    Region r = region_of(g, add_op(g, OpKind::Gather, DType::F32, {4}, {idx, data}));
    std::vector<int32_t> ok = {0, 4, 2, 1}, bad = {0, 5, 2, 1}, negative = {0, -1, 2, 1};
    HostTensor values = HostTensor::from(std::span<const float>(std::vector<float>{1, 2, 3, 4, 5}), DType::F32);
    EXPECT_EQ(run(r, {HostTensor::from(std::span<const int32_t>(ok), DType::I32), values}, DType::F32, 4), 0);
    EXPECT_EQ(run(r, {HostTensor::from(std::span<const int32_t>(bad), DType::I32), values}, DType::F32, 4),
              static_cast<int32_t>(KernelError::GatherOutOfRange));
    EXPECT_EQ(run(r, {HostTensor::from(std::span<const int32_t>(negative), DType::I32), values}, DType::F32, 4),
              static_cast<int32_t>(KernelError::GatherOutOfRange));
  }
}

// A Gather/Scatter carrying the user's axis checks each index along that axis (an index
// past its axis that lands in the next row is an error), and the error record names the
// index and its position as the reference runtime does.
TEST(KernelOps, IndexesAreCheckedAlongTheirAxis) {
  struct Result {
    int32_t code;
    std::string message;
  };
  auto run = [](const Region& r, std::vector<HostTensor> inputs, DType out, size_t n, std::string_view user_op) {
    auto k = lower(r);
    EXPECT_TRUE(k);
    auto lib = test_compiler().compile(emit_cpp(*k, "axis_err_kernel"));
    HostTensor got = HostTensor::zeros(out, n);
    int32_t error[kErrorWords] = {};
    std::vector<void*> buffers;
    for (auto& t : inputs) buffers.push_back(t.bytes.data());
    buffers.push_back(got.bytes.data());
    buffers.push_back(error);
    const int64_t extent = k->extent.eval({});
    lib->function<KernelFn>("axis_err_kernel")(buffers.data(), nullptr, 0, extent / 2);
    lib->function<KernelFn>("axis_err_kernel")(buffers.data(), nullptr, extent / 2, extent);
    return Result{error[0], error[0] ? describe_error(*k, error, {}, user_op) : ""};
  };
  auto ints = [](std::vector<int32_t> v) { return HostTensor::from(std::span<const int32_t>(v), DType::I32); };
  std::vector<float> table(6);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i) * 1.5f - 4.f;
  HostTensor data = HostTensor::from(std::span<const float>(table), DType::F32);
  // gather(1, index) on data (3, 2) with index (3, 1): the flat index is row * 2 + index.
  Graph g;
  NodeInput idx{add_input(g, DType::I32, {3, 1}), ShapeTracker::contiguous({3, 1})};
  NodeInput dat{add_input(g, DType::F32, {3, 2}), ShapeTracker::contiguous({3, 2})};
  Region r = region_of(g, add_op(g, OpKind::Gather, DType::F32, {3, 1}, {idx, dat}, 1));
  // Flat indexes for user indexes {1, 2, 0}: 1, 4, 4. Flat 4 is inside the tensor (row 2),
  // but user index 2 at position [1, 0] is past dimension 1 of size 2.
  Result bad = run(r, {ints({1, 4, 4}), data}, DType::F32, 3, "gather");
  EXPECT_EQ(bad.code, static_cast<int32_t>(KernelError::GatherOutOfRange));
  EXPECT_EQ(bad.message, "gather: index 2 is out of range for dimension 1 of size 2 (at position [1, 0] of the index)");
  EXPECT_EQ(run(r, {ints({1, 2, 4}), data}, DType::F32, 3, "gather").code, 0);
  Result negative = run(r, {ints({1, 2, 3}), data}, DType::F32, 3, "");
  EXPECT_EQ(negative.message, "gather: index -1 is out of range for dimension 1 of size 2 (at position [2, 0] of the index)");
  // Without an axis only the flat range is checked.
  Graph flat;
  NodeInput fidx{add_input(flat, DType::I32, {3}), ShapeTracker::contiguous({3})};
  NodeInput fdat{add_input(flat, DType::F32, {6}), ShapeTracker::contiguous({6})};
  Region rf = region_of(flat, add_op(flat, OpKind::Gather, DType::F32, {3}, {fidx, fdat}));
  EXPECT_EQ(run(rf, {ints({1, 5, 4}), data}, DType::F32, 3, "").code, 0);
  EXPECT_EQ(run(rf, {ints({1, 6, 4}), data}, DType::F32, 3, "").message, "gather: internal index 6 out of range [0, 6)");
  // scatter(1, index, src) into dest (3, 2) with index (2, 2): flat = row * 2 + index.
  Graph gs;
  NodeInput dest{add_input(gs, DType::F32, {3, 2}), ShapeTracker::contiguous({3, 2})};
  NodeInput sidx{add_input(gs, DType::I32, {2, 2}), ShapeTracker::contiguous({2, 2})};
  NodeInput src{add_input(gs, DType::F32, {2, 2}), ShapeTracker::contiguous({2, 2})};
  Region rs = region_of(gs, add_op(gs, OpKind::Scatter, DType::F32, {3, 2}, {dest, sidx, src}, 1));
  HostTensor s4 = HostTensor::from(std::span<const float>(std::vector<float>{-1, -2, -3, -4}), DType::F32);
  Result sbad = run(rs, {data, ints({1, 0, 4, 3}), s4}, DType::F32, 6, "scatter");  // user index 2 at [1, 0]
  EXPECT_EQ(sbad.message, "scatter: index 2 is out of range for dimension 1 of size 2 (at position [1, 0] of the index)");
  EXPECT_EQ(run(rs, {data, ints({1, 0, 2, 3}), s4}, DType::F32, 6, "scatter").code, 0);
}

}  // namespace
}  // namespace luminal::kernel::testing
