// The reference interpreter. Clarity over speed, with one exception: a SumReduce whose
// input is a Mul used nowhere else is evaluated without materialising the product,
// since that pair is how every matmul is spelled and the product is k times larger.
#include "luminal/reference_runtime.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "luminal/error.hpp"

namespace luminal {
namespace {

// Values in a wide lane: double for float dtypes, int64 for the rest.
struct Buffer {
  DType dtype = DType::F32;
  std::vector<double> f;
  std::vector<int64_t> i;

  static Buffer make(DType dt, size_t n) {
    Buffer b;
    b.dtype = dt;
    if (is_float(dt)) b.f.assign(n, 0.0);
    else b.i.assign(n, 0);
    return b;
  }
  size_t size() const { return is_float(dtype) ? f.size() : i.size(); }
  double getf(size_t k) const { return is_float(dtype) ? f[k] : static_cast<double>(i[k]); }
  int64_t geti(size_t k) const {
    if (!is_float(dtype)) return i[k];
    double v = f[k];
    return std::isfinite(v) ? static_cast<int64_t>(v) : 0;
  }
};

Buffer from_host(const HostTensor& t) {
  Buffer b = Buffer::make(t.dtype, t.numel());
  for (size_t k = 0; k < t.numel(); ++k) {
    if (is_float(t.dtype)) b.f[k] = t.get_f64(k);
    else b.i[k] = t.get_i64(k);
  }
  return b;
}

HostTensor to_host(const Buffer& b, std::vector<int64_t> shape) {
  HostTensor t = HostTensor::zeros(b.dtype, b.size(), std::move(shape));
  for (size_t k = 0; k < b.size(); ++k) {
    if (is_float(b.dtype)) t.set_f64(k, b.f[k]);
    else t.set_i64(k, b.i[k]);
  }
  return t;
}

// A view with every expression evaluated: per-dimension offset and validity tables.
struct ResolvedView {
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> offset;
  std::vector<std::vector<uint8_t>> valid;  // empty vector: the whole dim is valid
  int64_t base = 0;
  bool base_valid = true;
  int64_t numel = 1;

  // Physical index of the logical multi-index, or -1 inside padding.
  int64_t phys(const int64_t* idx) const {
    if (!base_valid) return -1;
    int64_t p = base;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (!valid[d].empty() && !valid[d][idx[d]]) return -1;
      p += offset[d][idx[d]];
    }
    return p;
  }
  int64_t phys_flat(int64_t flat, std::vector<int64_t>& scratch) const {
    scratch.resize(sizes.size());
    for (size_t d = sizes.size(); d-- > 0;) {
      scratch[d] = flat % sizes[d];
      flat /= sizes[d];
    }
    return phys(scratch.data());
  }
};

ResolvedView resolve(const ShapeTracker& view, const DimMap& dims) {
  ResolvedView r;
  r.base = view.base_offset().eval(dims);
  r.base_valid = view.base_valid().eval(dims) != 0;
  for (const auto& d : view.dims()) {
    int64_t n = d.size.eval(dims);
    r.sizes.push_back(n);
    r.numel *= n;
    std::vector<int64_t> off(static_cast<size_t>(n));
    std::vector<uint8_t> ok;
    bool all_valid = d.valid == Expression(1);
    if (!all_valid) ok.resize(static_cast<size_t>(n));
    for (int64_t z = 0; z < n; ++z) {
      bool v = all_valid || d.valid.eval(dims, z) != 0;
      if (!all_valid) ok[z] = v;
      off[z] = v ? d.offset.eval(dims, z) : 0;
    }
    r.offset.push_back(std::move(off));
    r.valid.push_back(std::move(ok));
  }
  return r;
}

// Visit every logical multi-index of `sizes` in row-major order.
template <class F>
void for_each_index(const std::vector<int64_t>& sizes, F&& fn) {
  int64_t total = 1;
  for (auto s : sizes) total *= s;
  std::vector<int64_t> idx(sizes.size(), 0);
  for (int64_t flat = 0; flat < total; ++flat) {
    fn(flat, idx.data());
    for (size_t d = sizes.size(); d-- > 0;) {
      if (++idx[d] < sizes[d]) break;
      idx[d] = 0;
    }
  }
}

double floor_mod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
int64_t floor_mod(int64_t a, int64_t b) {
  if (b == 0) fail("Mod: integer modulo by zero");
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

double unary_f(OpKind op, double x) {
  switch (op) {
    case OpKind::Exp2: return std::exp2(x);
    case OpKind::Log2: return std::log2(x);
    case OpKind::Sin: return std::sin(x);
    case OpKind::Sqrt: return std::sqrt(x);
    case OpKind::Recip: return 1.0 / x;
    default: LUMINAL_ASSERT(false, "not a float unary op: ", op_name(op));
  }
  return 0;
}

}  // namespace

struct ReferenceRuntime::State {
  struct Program {
    Graph graph;
    std::vector<NodeId> external_ids;              // program node -> user id
    std::unordered_map<NodeId, NodeId> program_of; // user id -> program node
  };
  std::vector<Program> slots;
  // The user's data, by external id: inputs set with set_tensor, outputs after execute.
  // Shared by every slot, so switching plans copies nothing.
  std::unordered_map<NodeId, Buffer> data;
  // During a run: each program node's value (inputs point into `data`).
  const Program* program = nullptr;
  const ReferenceRuntime* self = nullptr;
  std::vector<const Buffer*> value;
  std::vector<Buffer> owned;

  const Buffer& input_value(const Node& n, size_t k) const { return *value[n.inputs[k].node]; }

  // Read element `k` of the view `v` of buffer `b` (0 inside padding).
  static double readf(const Buffer& b, int64_t p) { return p < 0 ? 0.0 : b.getf(static_cast<size_t>(p)); }
  static int64_t readi(const Buffer& b, int64_t p) { return p < 0 ? 0 : b.geti(static_cast<size_t>(p)); }

  void check_in_bounds(const Buffer& b, const ResolvedView& v, const Node& n, size_t which) const {
    if (v.numel == 0 || !v.base_valid) return;  // nothing read, or all of it padding
    int64_t hi = v.base, lo = v.base;
    for (size_t d = 0; d < v.sizes.size(); ++d) {
      int64_t dmin = std::numeric_limits<int64_t>::max(), dmax = std::numeric_limits<int64_t>::min();
      for (size_t z = 0; z < v.offset[d].size(); ++z) {
        if (!v.valid[d].empty() && !v.valid[d][z]) continue;
        dmin = std::min(dmin, v.offset[d][z]);
        dmax = std::max(dmax, v.offset[d][z]);
      }
      if (dmin > dmax) return;  // all padding
      lo += dmin;
      hi += dmax;
    }
    LUMINAL_CHECK(lo >= 0 && hi < static_cast<int64_t>(b.size()), op_name(n.op),
                  n.user_op.empty() ? "" : " (in " + n.user_op + ")", " input ", which,
                  " reads elements [", lo, ", ", hi, "] of a buffer of ", b.size(),
                  " elements; the view does not fit its source (check shapes and dims)");
  }

  Buffer eval_node(NodeId id, const DimMap& dims);
  // RefSumMul: SumReduce over `axis` of the product a*b (rounded to the product's dtype),
  // evaluated without materialising the product, which is k times larger than the result.
  Buffer eval_sum_of_mul(const Node& n, const DimMap& dims);
};

ReferenceRuntime::ReferenceRuntime() : state_(std::make_unique<State>()) {}
ReferenceRuntime::~ReferenceRuntime() = default;
ReferenceRuntime::ReferenceRuntime(ReferenceRuntime&&) noexcept = default;
ReferenceRuntime& ReferenceRuntime::operator=(ReferenceRuntime&&) noexcept = default;

std::vector<std::string> ReferenceRuntime::rule_files() const {
  return {std::string(LUMINAL_SOURCE_DIR) + "/src/core/reference.egg"};
}

std::vector<RuleStage> ReferenceRuntime::rule_stages(const CompileOptions& o) const {
  auto stages = Runtime::rule_stages(o);
  stages.front().rulesets.push_back("reference");
  return stages;
}

void ReferenceRuntime::load_program(size_t slot, const Graph& program, std::vector<NodeId> external_ids) {
  LUMINAL_ASSERT(external_ids.size() == program.size(), "external id table size");
  auto& s = *state_;
  if (s.slots.size() <= slot) s.slots.resize(slot + 1);
  State::Program& p = s.slots[slot];
  p.graph = program;
  p.external_ids = std::move(external_ids);
  p.program_of.clear();
  for (NodeId i = 0; i < program.size(); ++i) {
    const Node& n = p.graph.node(i);
    for (const auto& in : n.inputs) LUMINAL_ASSERT(in.node < i, "program is not in topological order at node ", i);
    if ((n.op == OpKind::Input || n.op == OpKind::Output) && p.external_ids[i] != kNoNode)
      p.program_of[p.external_ids[i]] = i;
  }
}

void ReferenceRuntime::set_tensor(NodeId input, HostTensor data) {
  auto& s = *state_;
  const Node* n = nullptr;
  for (const auto& p : s.slots)
    if (auto it = p.program_of.find(input); it != p.program_of.end()) {
      n = &p.graph.node(it->second);
      break;
    }
  LUMINAL_CHECK(n != nullptr, "tensor ", input, " is not an input or output of the loaded program");
  LUMINAL_CHECK(n->op == OpKind::Input, "set_data: tensor ", input, " is not an input");
  s.data[input] = from_host(data.cast(n->dtype));
}

bool ReferenceRuntime::has_tensor(NodeId node) const { return state_->data.count(node) > 0; }

HostTensor ReferenceRuntime::get_tensor(NodeId node) const {
  auto& s = *state_;
  const Node* n = nullptr;
  for (const auto& p : s.slots)
    if (auto it = p.program_of.find(node); it != p.program_of.end()) {
      n = &p.graph.node(it->second);
      break;
    }
  LUMINAL_CHECK(n != nullptr, "tensor ", node, " is not an input or output of the loaded program");
  auto it = s.data.find(node);
  LUMINAL_CHECK(it != s.data.end(), "tensor ", node, " ('", n->label, "') has no data: ",
                n->op == OpKind::Output ? "execute has not run" : "it was never set, or a previous execute consumed it (persist() keeps it)");
  return to_host(it->second, {});
}

Buffer ReferenceRuntime::State::eval_sum_of_mul(const Node& n, const DimMap& dims) {
  const Buffer& a = input_value(n, 0);
  const Buffer& b = input_value(n, 1);
  const int axis = static_cast<int>(n.backend->i64(0));
  const DType mul_dtype = n.backend->dtype(1);
  ResolvedView va = resolve(n.inputs[0].view, dims), vb = resolve(n.inputs[1].view, dims);
  check_in_bounds(a, va, n, 0);
  check_in_bounds(b, vb, n, 1);
  LUMINAL_ASSERT(axis >= 0 && static_cast<size_t>(axis) < va.sizes.size(), "RefSumMul axis");
  int64_t k = va.sizes[axis];
  std::vector<int64_t> out_sizes = va.sizes;
  out_sizes.erase(out_sizes.begin() + axis);
  int64_t total = 1;
  for (auto x : out_sizes) total *= x;
  Buffer out = Buffer::make(n.dtype, static_cast<size_t>(total));
  bool fl = is_float(n.dtype);
  bool no_padding = va.base_valid && vb.base_valid &&
                    std::all_of(va.valid.begin(), va.valid.end(), [](const auto& v) { return v.empty(); }) &&
                    std::all_of(vb.valid.begin(), vb.valid.end(), [](const auto& v) { return v.empty(); });
  // Each operand's offset is a base (the output index) plus one table lookup along the
  // reduced axis; with padding, elements outside read 0.
  for_each_index(out_sizes, [&](int64_t flat, const int64_t* idx) {
    int64_t base_a = va.base, base_b = vb.base;
    bool valid_a = va.base_valid, valid_b = vb.base_valid;
    for (size_t d = 0, j = 0; d < va.sizes.size(); ++d) {
      if (static_cast<int>(d) == axis) continue;
      base_a += va.offset[d][idx[j]];
      base_b += vb.offset[d][idx[j]];
      valid_a = valid_a && (va.valid[d].empty() || va.valid[d][idx[j]]);
      valid_b = valid_b && (vb.valid[d].empty() || vb.valid[d][idx[j]]);
      ++j;
    }
    const int64_t* oa = va.offset[axis].data();
    const int64_t* ob = vb.offset[axis].data();
    if (fl && no_padding && is_float(a.dtype)) {
      const double* pa = a.f.data();
      const double* pb = b.f.data();
      double acc = 0;
      if (mul_dtype == DType::F32) {
        for (int64_t z = 0; z < k; ++z)
          acc += static_cast<double>(static_cast<float>(pa[base_a + oa[z]] * pb[base_b + ob[z]]));
      } else {
        for (int64_t z = 0; z < k; ++z) acc += round_to_float_dtype(pa[base_a + oa[z]] * pb[base_b + ob[z]], mul_dtype);
      }
      out.f[flat] = round_to_float_dtype(acc, n.dtype);
      return;
    }
    double accf = 0;
    int64_t acci = 0;
    for (int64_t z = 0; z < k; ++z) {
      bool in_a = valid_a && (va.valid[axis].empty() || va.valid[axis][z]);
      bool in_b = valid_b && (vb.valid[axis].empty() || vb.valid[axis][z]);
      int64_t pa = in_a ? base_a + oa[z] : -1, pb = in_b ? base_b + ob[z] : -1;
      if (fl) accf += round_to_float_dtype(readf(a, pa) * readf(b, pb), mul_dtype);
      else {  // integers wrap (in uint64: signed overflow would be undefined)
        int64_t prod = wrap_to_int_dtype(static_cast<int64_t>(static_cast<uint64_t>(readi(a, pa)) * static_cast<uint64_t>(readi(b, pb))), mul_dtype);
        acci = static_cast<int64_t>(static_cast<uint64_t>(acci) + static_cast<uint64_t>(prod));
      }
    }
    if (fl) out.f[flat] = round_to_float_dtype(accf, n.dtype);
    else out.i[flat] = wrap_to_int_dtype(acci, n.dtype);
  });
  return out;
}

Buffer ReferenceRuntime::State::eval_node(NodeId id, const DimMap& dims) {
  const Node& n = program->graph.node(id);
  if (n.op == OpKind::BackendOp && n.backend->name == "RefSumMul") return eval_sum_of_mul(n, dims);
  std::vector<int64_t> out_sizes;
  int64_t out_numel = 1;
  for (const auto& d : n.shape) {
    out_sizes.push_back(d.eval(dims));
    out_numel *= out_sizes.back();
  }
  const bool fl = is_float(n.dtype);
  auto input = [&](size_t k) -> const Buffer& { return input_value(n, k); };
  std::vector<ResolvedView> views;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    views.push_back(resolve(n.inputs[k].view, dims));
    check_in_bounds(input(k), views.back(), n, k);
  }
  Buffer out = Buffer::make(n.dtype, static_cast<size_t>(out_numel));

  switch (op_category(n.op)) {
    case OpCategory::Source:
      if (n.op == OpKind::Constant) {
        if (fl) out.f[0] = round_to_float_dtype(n.constant, n.dtype);
        else out.i[0] = wrap_to_int_dtype(static_cast<int64_t>(n.constant), n.dtype);
      } else if (n.op == OpKind::Iota) {
        for (int64_t z = 0; z < out_numel; ++z) {
          int64_t v = n.iota_expr.eval(dims, z);
          if (fl) out.f[z] = round_to_float_dtype(static_cast<double>(v), n.dtype);
          else out.i[z] = wrap_to_int_dtype(v, n.dtype);
        }
      }
      break;
    case OpCategory::Unary: {
      const Buffer& x = input(0);
      bool in_fl = is_float(x.dtype);
      for_each_index(out_sizes, [&](int64_t flat, const int64_t* idx) {
        int64_t p = views[0].phys(idx);
        if (n.op == OpKind::Cast) {
          if (fl) out.f[flat] = round_to_float_dtype(in_fl ? readf(x, p) : static_cast<double>(readi(x, p)), n.dtype);
          else if (n.dtype == DType::Bool) out.i[flat] = in_fl ? readf(x, p) != 0.0 : readi(x, p) != 0;
          else out.i[flat] = wrap_to_int_dtype(readi(x, p), n.dtype);
        } else {
          out.f[flat] = round_to_float_dtype(unary_f(n.op, readf(x, p)), n.dtype);
        }
      });
      break;
    }
    case OpCategory::Binary: {
      const Buffer& a = input(0);
      const Buffer& b = input(1);
      bool in_fl = is_float(a.dtype);
      DType in_dt = a.dtype;
      for_each_index(out_sizes, [&](int64_t flat, const int64_t* idx) {
        int64_t pa = views[0].phys(idx), pb = views[1].phys(idx);
        if (in_fl) {
          double x = readf(a, pa), y = readf(b, pb), r = 0;
          switch (n.op) {
            case OpKind::Add: r = x + y; break;
            case OpKind::Mul: r = x * y; break;
            case OpKind::Mod: r = floor_mod(x, y); break;
            case OpKind::LessThan: out.i[flat] = x < y; return;
            default: LUMINAL_ASSERT(false, "binary op");
          }
          out.f[flat] = round_to_float_dtype(r, in_dt);
        } else {
          int64_t x = readi(a, pa), y = readi(b, pb), r = 0;
          switch (n.op) {
            case OpKind::Add: r = static_cast<int64_t>(static_cast<uint64_t>(x) + static_cast<uint64_t>(y)); break;
            case OpKind::Mul: r = static_cast<int64_t>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y)); break;
            case OpKind::Mod:
              LUMINAL_CHECK(y != 0, n.user_op.empty() ? "Mod" : n.user_op, ": integer division by zero");
              r = floor_mod(x, y);
              break;
            case OpKind::LessThan: out.i[flat] = x < y; return;
            default: LUMINAL_ASSERT(false, "binary op");
          }
          out.i[flat] = wrap_to_int_dtype(r, in_dt);
        }
      });
      break;
    }
    case OpCategory::Reduce: {
      const Buffer& x = input(0);
      const ResolvedView& v = views[0];
      int axis = n.axis;
      int64_t k = v.sizes[axis];
      std::vector<int64_t> full(v.sizes.size());
      bool is_sum = n.op == OpKind::SumReduce;
      for_each_index(out_sizes, [&](int64_t flat, const int64_t* idx) {
        for (size_t d = 0, j = 0; d < full.size(); ++d) full[d] = static_cast<int>(d) == axis ? 0 : idx[j++];
        if (fl) {
          double acc = is_sum ? 0.0 : -std::numeric_limits<double>::infinity();
          for (int64_t z = 0; z < k; ++z) {
            full[axis] = z;
            double val = readf(x, v.phys(full.data()));
            if (is_sum) acc += val;
            else if (std::isnan(val) || val > acc || std::isnan(acc)) acc = std::isnan(acc) ? acc : val;
          }
          out.f[flat] = round_to_float_dtype(acc, n.dtype);
        } else {
          int64_t acc = is_sum ? 0 : std::numeric_limits<int64_t>::min();
          for (int64_t z = 0; z < k; ++z) {
            full[axis] = z;
            int64_t val = readi(x, v.phys(full.data()));
            acc = is_sum ? static_cast<int64_t>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(val))
                         : std::max(acc, val);
          }
          out.i[flat] = wrap_to_int_dtype(acc, n.dtype);
        }
      });
      break;
    }
    case OpCategory::Index: {
      // A Gather or Scatter made from a user's index along `axis` (Node::axis >= 0) has
      // flat index base(position) + i * stride[axis], where base sums the other
      // coordinates of the position; i must lie in [0, size of that axis). Checking i
      // itself catches an index past its own axis that still lands inside the tensor.
      std::vector<int64_t> scratch;
      const char* who = n.user_op.empty() ? (n.op == OpKind::Gather ? "gather" : "scatter") : n.user_op.c_str();
      auto check_axis_index = [&](int64_t target, const std::vector<int64_t>& sizes, const int64_t* pos,
                                  const std::vector<int64_t>& pos_sizes) {
        if (n.axis < 0 || n.axis >= static_cast<int>(sizes.size()) || pos_sizes.size() != sizes.size()) return;
        const size_t axis = static_cast<size_t>(n.axis);
        int64_t stride = 1, base = 0, axis_stride = 0;
        for (size_t d = sizes.size(); d-- > 0;) {
          if (d == axis) axis_stride = stride;
          else base += pos[d] * stride;
          stride *= sizes[d];
        }
        if (axis_stride == 0 || (target - base) % axis_stride != 0) return;
        int64_t i = (target - base) / axis_stride;
        if (i >= 0 && i < sizes[axis]) return;
        // index_select and embedding take a 1-D index: its position is the coordinate
        // along the axis; gather and scatter report the whole position.
        std::string at;
        if (n.user_op == "index_select" || n.user_op == "embedding") {
          at = std::to_string(pos[axis]);
        } else {
          at = "[";
          for (size_t d = 0; d < pos_sizes.size(); ++d) at += (d ? ", " : "") + std::to_string(pos[d]);
          at += "]";
        }
        fail(who, ": index ", i, " is out of range for dimension ", n.axis, " of size ", sizes[axis],
             " (at position ", at, " of the index)");
      };
      if (n.op == OpKind::Gather) {
        const Buffer& ix = input(0);
        const Buffer& data = input(1);
        const ResolvedView& dv = views[1];
        for_each_index(out_sizes, [&](int64_t flat, const int64_t* idx) {
          int64_t target = readi(ix, views[0].phys(idx));
          check_axis_index(target, dv.sizes, idx, out_sizes);
          LUMINAL_CHECK(target >= 0 && target < dv.numel, who, ": internal index ", target, " out of range [0, ",
                        dv.numel, ")");
          int64_t p = dv.phys_flat(target, scratch);
          if (fl) out.f[flat] = readf(data, p);
          else out.i[flat] = readi(data, p);
        });
      } else {
        const Buffer& dest = input(0);
        const Buffer& ix = input(1);
        const Buffer& src = input(2);
        for_each_index(out_sizes, [&](int64_t flat, const int64_t* idx) {
          int64_t p = views[0].phys(idx);
          if (fl) out.f[flat] = readf(dest, p);
          else out.i[flat] = readi(dest, p);
        });
        for_each_index(views[1].sizes, [&](int64_t, const int64_t* idx) {
          int64_t target = readi(ix, views[1].phys(idx));
          check_axis_index(target, out_sizes, idx, views[1].sizes);
          LUMINAL_CHECK(target >= 0 && target < out_numel, who, ": internal index ", target, " out of range [0, ",
                        out_numel, ")");
          int64_t p = views[2].phys(idx);
          if (fl) out.f[target] = readf(src, p);
          else out.i[target] = readi(src, p);
        });
      }
      break;
    }
    case OpCategory::Special:
      if (n.op == OpKind::Output) {
        const Buffer& x = input(0);
        for_each_index(out_sizes, [&](int64_t flat, const int64_t* idx) {
          int64_t p = views[0].phys(idx);
          if (fl) out.f[flat] = readf(x, p);
          else out.i[flat] = readi(x, p);
        });
      } else {  // CustomOp and other backend ops: hand them contiguous host tensors
        std::vector<HostTensor> ins;
        for (size_t k = 0; k < n.inputs.size(); ++k) {
          const Buffer& x = input(k);
          Buffer c = Buffer::make(x.dtype, static_cast<size_t>(views[k].numel));
          for_each_index(views[k].sizes, [&](int64_t flat, const int64_t* idx) {
            int64_t p = views[k].phys(idx);
            if (is_float(x.dtype)) c.f[flat] = readf(x, p);
            else c.i[flat] = readi(x, p);
          });
          ins.push_back(to_host(c, views[k].sizes));
        }
        HostTensor r = n.op == OpKind::BackendOp ? self->run_backend_op(n, ins, out_sizes, dims)
                                                 : n.custom->execute_reference(ins, out_sizes, n.dtype);
        LUMINAL_CHECK(r.numel() == static_cast<size_t>(out_numel) && r.dtype == n.dtype,
                      n.op == OpKind::BackendOp ? "backend op '" + n.backend->name : "custom op '" + n.label,
                      "' returned ", r.numel(), " ", dtype_name(r.dtype), " elements, expected ", out_numel, " ",
                      dtype_name(n.dtype));
        out = from_host(r);
      }
      break;
  }
  return out;
}

HostTensor ReferenceRuntime::run_backend_op(const Node& n, std::span<const HostTensor>, const std::vector<int64_t>&,
                                            const DimMap&) const {
  fail("reference runtime: backend op '", n.backend->name, "' is not one of its own ops (was the program extracted for another backend?)");
}

void ReferenceRuntime::run(size_t slot, const DimMap& dims) {
  auto& s = *state_;
  LUMINAL_CHECK(slot < s.slots.size() && s.slots[slot].graph.size() > 0, "execute: no program loaded (compile first)");
  const State::Program& p = s.slots[slot];
  const Graph& g = p.graph;
  // Every dim the program mentions must have a value.
  for (NodeId i = 0; i < g.size(); ++i) {
    for (const auto& d : g.node(i).shape)
      for (const auto& v : d.variables())
        LUMINAL_CHECK(v == Expression::kIndexName || dims.count(v), "execute: dimension '", v,
                      "' has no value; set it with Graph::set_dim or pass it in the dim map");
  }
  s.program = &p;
  s.self = this;
  s.value.assign(g.size(), nullptr);
  s.owned.assign(g.size(), Buffer{});
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.op == OpKind::Input) {
      auto it = s.data.find(p.external_ids[i]);
      LUMINAL_CHECK(it != s.data.end(), "execute: input '", n.label,
                    "' has no data (never set, or consumed by a previous execute; persist() keeps it)");
      int64_t expect = product(n.shape).eval(dims);
      LUMINAL_CHECK(static_cast<int64_t>(it->second.size()) == expect, "execute: input '", n.label, "' has ",
                    it->second.size(), " elements but its shape ", to_string(n.shape), " needs ", expect);
      s.value[i] = &it->second;
      continue;
    }
    check_deadline();
    s.owned[i] = s.eval_node(i, dims);
    s.value[i] = &s.owned[i];
  }
  // Outputs become the user's data; state updates land in their inputs; inputs that do
  // not persist are consumed.
  std::vector<std::pair<NodeId, Buffer>> results;
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.op != OpKind::Output) continue;
    if (p.external_ids[i] != kNoNode) results.emplace_back(p.external_ids[i], s.owned[i]);
    if (n.updates != kNoNode) results.emplace_back(p.external_ids[n.updates], std::move(s.owned[i]));  // a program node id
  }
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.op == OpKind::Input && !n.persist) s.data.erase(p.external_ids[i]);
  }
  for (auto& [ext, buf] : results) s.data[ext] = std::move(buf);
  s.value.clear();
  s.owned.clear();
  s.program = nullptr;
}

}  // namespace luminal
