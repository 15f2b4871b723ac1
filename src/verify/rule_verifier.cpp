#include "rule_verifier.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "luminal/egraph/egraph.hpp"
#include "luminal/error.hpp"
#include "luminal/reference_runtime.hpp"
#include "luminal/search/hlir_egraph.hpp"

namespace luminal::verify {
namespace {

using egraph::Atom;
using egraph::Rule;
using egraph::Value;
using Rng = std::mt19937_64;

constexpr const char* kVerifyRuleset = "verify-only";
constexpr const char* kSymbolicDim = "n";

constexpr OpKind kAllOps[] = {
#define LUMINAL_OP(name, ...) OpKind::name,
#include "luminal/ops.def"
#undef LUMINAL_OP
};

// What an op's payload argument means. Where it sits is read from the constructor's
// declared sorts (the IR signature, src/search/hlir_egraph.cpp), not from a copy of it.
enum class Payload { None, Id, F64, Expr, Axis };

int pick(Rng& rng, int n) { return static_cast<int>(std::uniform_int_distribution<int>(0, n - 1)(rng)); }
bool chance(Rng& rng, double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }

// ---------------------------------------------------------------- the pattern
// One IR constructor atom of the rule's query: (= out (Op dtype shape [payload] in view ...)).
struct PatternAtom {
  OpKind op;
  int out = -1;
  std::vector<int> vars;   // per argument (declared order): the variable, or -1
  std::vector<Value> lits; // per argument: the literal when vars[i] == -1
  Payload payload = Payload::None;  // argument 2 when not None
  size_t first_input() const { return payload == Payload::None ? 2 : 3; }
  size_t num_inputs() const { return (vars.size() - first_input()) / 2; }
};

// The payload of constructor `id` of op `op`: (dtype shape [payload] input view ...).
Payload payload_of(const egraph::EGraph& eg, egraph::OpId id, OpKind op) {
  const auto& args = eg.op(id).args;
  if (args.size() < 3 || eg.sort(args[2]).kind == egraph::ValueKind::Class) return Payload::None;
  switch (eg.sort(args[2]).kind) {
    case egraph::ValueKind::F64: return Payload::F64;
    case egraph::ValueKind::Expr: return Payload::Expr;
    case egraph::ValueKind::I64: return op_category(op) == OpCategory::Reduce ? Payload::Axis : Payload::Id;
    default: return Payload::Id;  // unknown: left to the matcher, never drawn
  }
}

struct Pattern {
  std::vector<PatternAtom> atoms;
  std::map<int, int> defined_by;            // IR variable -> atom
  // (dtype-of X) = D and (shape-of X) = S facts: X -> the variable or literal.
  std::multimap<int, std::pair<int, Value>> dtype_facts, shape_facts;
  std::vector<int> roots;                   // defined IR variables no atom reads
  std::string unsupported;                  // non-empty: cannot be generated (why)
};

Pattern analyse(const egraph::EGraph& eg, const Rule& rule) {
  Pattern p;
  std::map<egraph::OpId, OpKind> kind_of;
  for (OpKind k : kAllOps)
    if (auto id = eg.find_op(op_name(k))) kind_of[*id] = k;
  std::set<int> children;
  for (const Atom& a : rule.atoms) {
    if (a.is_function) {
      const std::string& fn = eg.function(a.id).name;
      if (fn != "dtype-of" && fn != "shape-of") continue;  // other tables: left to the matcher
      if (a.vars.size() != 2 || a.vars[1] < 0) continue;
      auto& facts = fn == "dtype-of" ? p.dtype_facts : p.shape_facts;
      facts.emplace(a.vars[1], std::make_pair(a.vars[0], a.lits.empty() ? Value() : a.lits[0]));
      continue;
    }
    auto k = kind_of.find(a.id);
    if (k == kind_of.end()) {
      p.unsupported = "the pattern uses " + eg.op(a.id).name + ", which the generator does not build";
      return p;
    }
    if (k->second == OpKind::CustomOp || k->second == OpKind::Input) {
      p.unsupported = std::string("the pattern matches ") + std::string(op_name(k->second)) + " nodes";
      return p;
    }
    PatternAtom pa;
    pa.op = k->second;
    pa.payload = payload_of(eg, a.id, pa.op);
    pa.out = a.vars[0];
    for (size_t s = 1; s < a.vars.size(); ++s) {
      pa.vars.push_back(a.vars[s]);
      pa.lits.push_back(s < a.lits.size() ? a.lits[s] : Value());
    }
    if (pa.out < 0 || p.defined_by.count(pa.out)) {
      p.unsupported = "an e-class must hold two different patterns at once";
      return p;
    }
    p.defined_by[pa.out] = static_cast<int>(p.atoms.size());
    for (size_t i = 0; i < pa.num_inputs(); ++i) children.insert(pa.vars[pa.first_input() + 2 * i]);
    p.atoms.push_back(std::move(pa));
  }
  if (p.atoms.empty()) p.unsupported = "the rule has no pattern over IR nodes";
  for (const auto& [v, a] : p.defined_by)
    if (!children.count(v)) p.roots.push_back(v);
  if (p.roots.empty() && p.unsupported.empty()) p.unsupported = "the pattern is cyclic";
  return p;
}

// ---------------------------------------------------------------- random graphs
// Values that break rewrites: signed zeros, infinities, NaN, subnormals, extremes.
std::vector<double> float_specials(DType dt) {
  double tiny, maxv, min_normal;
  switch (dt) {
    case DType::F16: tiny = 5.960464477539063e-8; maxv = 65504; min_normal = 6.103515625e-5; break;
    case DType::BF16: tiny = 9.183549615799121e-41; maxv = 3.3895313892515355e38; min_normal = 1.1754943508222875e-38; break;
    case DType::F64:
      tiny = std::numeric_limits<double>::denorm_min();
      maxv = std::numeric_limits<double>::max();
      min_normal = std::numeric_limits<double>::min();
      break;
    default:
      tiny = std::numeric_limits<float>::denorm_min();
      maxv = std::numeric_limits<float>::max();
      min_normal = std::numeric_limits<float>::min();
  }
  const double inf = std::numeric_limits<double>::infinity();
  return {0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, inf, -inf, std::nan(""), tiny, -tiny, 3 * tiny,
          maxv, -maxv, min_normal, -min_normal, 1e-3, 100.0, -7.0};
}
std::vector<int64_t> int_specials(DType dt) {
  switch (dt) {
    case DType::Bool: return {0, 1};
    case DType::U8: return {0, 1, 2, 127, 128, 254, 255};
    case DType::I8: return {0, 1, -1, 2, -2, 127, -128, 126, -127};
    case DType::I32: return {0, 1, -1, 2, -3, INT32_MAX, INT32_MIN, INT32_MAX - 1, INT32_MIN + 1, 7, -100};
    default: return {0, 1, -1, 2, -3, INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1, 7, -100};
  }
}

HostTensor fill(Rng& rng, DType dt, size_t n, int trial, int64_t index_bound) {
  HostTensor t = HostTensor::zeros(dt, n);
  auto floats = float_specials(dt);
  auto ints = int_specials(dt);
  for (size_t k = 0; k < n; ++k) {
    if (index_bound > 0) {
      t.set_i64(k, std::uniform_int_distribution<int64_t>(0, index_bound - 1)(rng));
      continue;
    }
    bool special = trial == 0 || (trial == 2 && chance(rng, 0.5));
    if (trial == 3) {
      t.set_i64(k, pick(rng, 7) - 3);
    } else if (is_float(dt)) {
      t.set_f64(k, special ? floats[pick(rng, static_cast<int>(floats.size()))]
                           : std::normal_distribution<double>(0, 10)(rng));
    } else {
      t.set_i64(k, special ? ints[pick(rng, static_cast<int>(ints.size()))] : pick(rng, 41) - 20);
    }
  }
  return t;
}

DType random_dtype(Rng& rng, bool float_only) {
  static const DType floats[] = {DType::F32, DType::F32, DType::F16, DType::BF16, DType::F64};
  static const DType any[] = {DType::F32, DType::F32, DType::F16, DType::BF16, DType::F64,
                              DType::I32, DType::I64, DType::I8, DType::U8, DType::Bool};
  return float_only ? floats[pick(rng, 5)] : any[pick(rng, 10)];
}

bool is_static(const Expression& e) { return e.as_constant().has_value(); }

enum class ViewKind { Identity, Flip, Permute, Broadcast, Slice, SliceStep, Pad, PadSlice, Count };

class Generator {
 public:
  Generator(const Pattern& p, const Rule& rule, Rng& rng) : p_(p), rule_(rule), rng_(rng), val_(rule.vars.size()) {}

  // A graph where the pattern is laid out (not necessarily matching: guards decide).
  std::optional<Graph> generate(DimMap& dims) {
    dims_ = {{kSymbolicDim, std::vector<int64_t>{1, 3, 4}[pick(rng_, 3)]}};
    std::vector<int> queue;
    for (int r : p_.roots) queue.push_back(r);
    std::set<int> visited;
    while (!queue.empty()) {
      int x = queue.front();
      queue.erase(queue.begin());
      if (visited.count(x)) continue;
      visited.insert(x);
      const PatternAtom& a = p_.atoms[p_.defined_by.at(x)];
      if (!lay_out(a, queue)) return std::nullopt;
    }
    Graph g;
    std::map<int, NodeId> built;
    try {
      for (int r : p_.roots) {
        NodeId id = build(g, r, built);
        if (id == kNoNode) return std::nullopt;
        Node out;
        out.op = OpKind::Output;
        out.dtype = g.node(id).dtype;
        out.shape = g.node(id).shape;
        out.inputs = {{id, ShapeTracker::contiguous(out.shape)}};
        g.add_node(std::move(out));
      }
    } catch (const Error&) {
      return std::nullopt;  // an inconsistent layout; try another
    }
    dims = dims_;
    index_bounds = index_bounds_of_;
    return g;
  }

  std::map<NodeId, int64_t> index_bounds;  // Input node -> exclusive bound of its values

 private:
  // ---- variable values ----
  std::optional<Value> get(int var, const Value& lit) const { return var < 0 ? std::optional<Value>(lit) : val_[var]; }
  bool unify(int var, const Value& lit, const Value& v) {
    if (var < 0) return lit == v;
    if (val_[var]) return *val_[var] == v;
    val_[var] = v;
    return true;
  }

  std::optional<Shape> shape_of(int x) const {
    if (auto it = p_.defined_by.find(x); it != p_.defined_by.end()) {
      const PatternAtom& a = p_.atoms[it->second];
      if (auto v = get(a.vars[1], a.lits[1])) return to_shape(*v);
    }
    for (auto [it, end] = p_.shape_facts.equal_range(x); it != end; ++it)
      if (auto v = get(it->second.first, it->second.second)) return to_shape(*v);
    if (auto it = leaf_shape_.find(x); it != leaf_shape_.end()) return it->second;
    return std::nullopt;
  }
  bool set_shape(int x, const Shape& s) {
    Value v = Value::expr_list(s);
    if (auto it = p_.defined_by.find(x); it != p_.defined_by.end()) {
      const PatternAtom& a = p_.atoms[it->second];
      if (!unify(a.vars[1], a.lits[1], v)) return false;
    } else {
      auto [at, fresh] = leaf_shape_.emplace(x, s);
      if (!fresh && at->second != s) return false;
    }
    for (auto [it, end] = p_.shape_facts.equal_range(x); it != end; ++it)
      if (!unify(it->second.first, it->second.second, v)) return false;
    return true;
  }
  std::optional<DType> dtype_of(int x) const {
    if (auto it = p_.defined_by.find(x); it != p_.defined_by.end()) {
      const PatternAtom& a = p_.atoms[it->second];
      if (auto v = get(a.vars[0], a.lits[0])) return parse_dtype(v->as_string());
    }
    for (auto [it, end] = p_.dtype_facts.equal_range(x); it != end; ++it)
      if (auto v = get(it->second.first, it->second.second)) return parse_dtype(v->as_string());
    if (auto it = leaf_dtype_.find(x); it != leaf_dtype_.end()) return it->second;
    return std::nullopt;
  }
  bool set_dtype(int x, DType dt) {
    Value v = Value::string(dtype_name(dt));
    if (auto it = p_.defined_by.find(x); it != p_.defined_by.end()) {
      const PatternAtom& a = p_.atoms[it->second];
      if (!unify(a.vars[0], a.lits[0], v)) return false;
    } else {
      auto [at, fresh] = leaf_dtype_.emplace(x, dt);
      if (!fresh && at->second != dt) return false;
    }
    for (auto [it, end] = p_.dtype_facts.equal_range(x); it != end; ++it)
      if (!unify(it->second.first, it->second.second, v)) return false;
    return true;
  }
  static Shape to_shape(const Value& v) {
    auto l = v.as_expr_list();
    return Shape(l.begin(), l.end());
  }

  // ---- shapes and views ----
  Expression random_dim() {
    if (chance(rng_, 0.2)) return Expression::var(kSymbolicDim);
    return std::vector<int>{1, 2, 3, 4, 5, 3}[pick(rng_, 6)];
  }
  Shape random_shape() {
    static const int ranks[] = {0, 1, 1, 2, 2, 2, 3, 3};
    Shape s(static_cast<size_t>(ranks[pick(rng_, 8)]));
    for (auto& d : s) d = random_dim();
    return s;
  }

  // A producer shape from which a `kind` view can read `vs`.
  std::optional<Shape> producer_for(const Shape& vs, ViewKind kind) {
    Shape p = vs;
    std::vector<int> static_dims;
    for (size_t d = 0; d < vs.size(); ++d)
      if (is_static(vs[d])) static_dims.push_back(static_cast<int>(d));
    switch (kind) {
      case ViewKind::Identity:
      case ViewKind::Flip:
      case ViewKind::PadSlice: return p;
      case ViewKind::Permute: std::shuffle(p.begin(), p.end(), rng_); return p;
      case ViewKind::Broadcast: {
        if (vs.empty()) return std::nullopt;
        Shape q;
        for (const auto& d : vs)
          if (chance(rng_, 0.5)) q.push_back(chance(rng_, 0.3) ? Expression(1) : d);
        return q;
      }
      case ViewKind::Slice:
      case ViewKind::SliceStep: {
        if (static_dims.empty()) return std::nullopt;
        int d = static_dims[pick(rng_, static_cast<int>(static_dims.size()))];
        int64_t n = *vs[d].as_constant();
        p[d] = kind == ViewKind::Slice ? n + pick(rng_, 3) + 1 : 2 * n + pick(rng_, 2);
        return p;
      }
      case ViewKind::Pad: {
        std::vector<int> padded;
        for (int d : static_dims)
          if (*vs[d].as_constant() >= 2) padded.push_back(d);
        if (padded.empty()) return std::nullopt;
        int d = padded[pick(rng_, static_cast<int>(padded.size()))];
        p[d] = 1 + pick(rng_, static_cast<int>(*vs[d].as_constant()) - 1);
        return p;
      }
      default: return std::nullopt;
    }
  }

  // A view of a contiguous buffer of shape `p` whose shape is `vs`, of a random kind
  // that fits; nullopt when none does.
  std::optional<ShapeTracker> view_from(const Shape& p, const Shape& vs, ViewKind hint) {
    ShapeTracker base = ShapeTracker::contiguous(p);
    std::vector<ShapeTracker> options;
    auto add = [&](std::optional<ShapeTracker> v, int weight) {
      if (v && v->shape() == vs)
        for (int w = 0; w < weight; ++w) options.push_back(*v);
    };
    try {
      if (p == vs) {
        add(base, hint == ViewKind::Identity ? 6 : 2);
        if (!vs.empty()) {
          int d = pick(rng_, static_cast<int>(vs.size()));
          add(base.flip(d), hint == ViewKind::Flip ? 4 : 1);
          add(base.pad(d, 1, 2).slice(d, 1, vs[d] + 1), hint == ViewKind::PadSlice ? 4 : 1);
        }
      }
      if (p.size() == vs.size() && p != vs) {
        // Permutation: new dim i reads old dim perm[i].
        std::vector<int> perm;
        std::vector<bool> used(p.size(), false);
        for (const auto& want : vs)
          for (size_t j = 0; j < p.size(); ++j)
            if (!used[j] && p[j] == want) {
              used[j] = true;
              perm.push_back(static_cast<int>(j));
              break;
            }
        if (perm.size() == p.size()) add(base.permute(perm), 4);
        // Slices (with steps) and pads, dim by dim.
        std::optional<ShapeTracker> sliced = base, padded = base;
        for (size_t d = 0; d < p.size() && (sliced || padded); ++d) {
          if (p[d] == vs[d]) continue;
          auto a = p[d].as_constant(), b = vs[d].as_constant();
          if (!a || !b) {
            sliced = padded = std::nullopt;
            break;
          }
          int dd = static_cast<int>(d);
          if (sliced && *a > *b) {
            if (*a >= 2 * *b - 1 && *b > 0 && chance(rng_, 0.6)) {
              int64_t start = *a >= 2 * *b ? pick(rng_, 2) : 0;
              sliced = sliced->slice(dd, start, start + 2 * *b - 1, 2);
            } else {
              int64_t start = pick(rng_, static_cast<int>(*a - *b + 1));
              sliced = sliced->slice(dd, start, start + *b);
            }
          } else {
            sliced = std::nullopt;
          }
          if (padded && *a < *b) {
            int64_t before = pick(rng_, static_cast<int>(*b - *a + 1));
            padded = padded->pad(dd, before, *b - *a - before);
          } else {
            padded = std::nullopt;
          }
        }
        add(sliced, 4);
        add(padded, 4);
      }
      // Broadcast: p is vs with some dims deleted (or kept as 1).
      if (p.size() <= vs.size()) {
        std::optional<ShapeTracker> b = base;
        size_t j = 0;
        for (size_t d = 0; d < vs.size() && b; ++d) {
          if (j < p.size() && p[j] == vs[d]) {
            ++j;
          } else if (j < p.size() && p[j] == Expression(1)) {
            b = b->expand_dim(static_cast<int>(d), vs[d]);
            ++j;
          } else {
            b = b->insert_broadcast(static_cast<int>(d), vs[d]);
          }
        }
        if (j == p.size()) add(b, hint == ViewKind::Broadcast ? 4 : 2);
        // Broadcast to a shape one smaller in a static dim, then pad it back: a scalar
        // read as a value inside and as 0 in the padding (how concat places pieces).
        std::vector<int> shrinkable;
        for (size_t d = 0; d < vs.size() && p.empty(); ++d)
          if (auto n = vs[d].as_constant(); n && *n >= 2) shrinkable.push_back(static_cast<int>(d));
        if (!shrinkable.empty()) {
          int d = shrinkable[pick(rng_, static_cast<int>(shrinkable.size()))];
          std::optional<ShapeTracker> bp = base;
          for (size_t k = 0; k < vs.size(); ++k)
            bp = bp->insert_broadcast(static_cast<int>(k), static_cast<int>(k) == d ? vs[k] - 1 : vs[k]);
          int64_t before = pick(rng_, 2);
          add(bp->pad(d, before, 1 - before), 2);
        }
      }
    } catch (const Error&) {
      // a view operation refused these shapes: fewer options
    }
    if (options.empty()) return std::nullopt;
    return options[pick(rng_, static_cast<int>(options.size()))];
  }

  // ---- laying out one atom: its dtype, shape, payload, and every input edge ----
  bool lay_out(const PatternAtom& a, std::vector<int>& queue) {
    const OpCategory cat = op_category(a.op);
    const bool float_only = cat == OpCategory::Unary && a.op != OpKind::Cast;
    if (!dtype_of(a.out)) {
      DType dt = a.op == OpKind::LessThan ? DType::Bool
                 : a.op == OpKind::Iota   ? (chance(rng_, 0.5) ? DType::I32 : DType::I64)
                                          : random_dtype(rng_, float_only);
      if (!set_dtype(a.out, dt)) return false;
    }
    DType dt = *dtype_of(a.out);
    if (!shape_of(a.out) && !set_shape(a.out, a.op == OpKind::Constant ? Shape{} : random_shape())) return false;
    Shape s = *shape_of(a.out);
    if (a.op == OpKind::Constant && !s.empty()) return false;  // the reference reads element 0 only
    // Payload: a literal or an already bound variable stays; a free one is drawn.
    int axis = 0;
    const bool free_payload = a.payload != Payload::None && !get(a.vars[2], a.lits[2]);
    switch (a.payload) {
      case Payload::F64:
        if (free_payload) {
          auto specials = float_specials(is_float(dt) ? dt : DType::F64);
          double c = chance(rng_, 0.5) ? specials[pick(rng_, static_cast<int>(specials.size()))] : pick(rng_, 9) - 4;
          if (!is_float(dt)) c = std::trunc(std::isfinite(c) ? std::clamp(c, -300.0, 300.0) : 2.0);
          val_[a.vars[2]] = Value::f64(c);
        }
        break;
      case Payload::Axis:
        if (free_payload) val_[a.vars[2]] = Value::i64(pick(rng_, static_cast<int>(s.size()) + 1));
        axis = static_cast<int>(get(a.vars[2], a.lits[2])->as_i64());
        if (axis < 0 || axis > static_cast<int>(s.size())) return false;
        break;
      case Payload::Expr:
        if (free_payload) {
          Expression z = Expression::index();
          std::vector<Expression> exprs = {z, z * 2, z % 3, z / 2 + 1, z * z};
          val_[a.vars[2]] = Value::expr(exprs[pick(rng_, 5)]);
        }
        break;
      default: break;
    }
    // Gather's data and Scatter's index/source views have a shape of their own.
    Shape free_shape = random_shape();
    if (a.op == OpKind::Gather && free_shape.empty()) free_shape = {random_dim()};
    DType compare_dtype = random_dtype(rng_, false);  // LessThan's operands
    for (size_t k = 0; k < a.num_inputs(); ++k) {
      int child = a.vars[a.first_input() + 2 * k];
      int view_var = a.vars[a.first_input() + 2 * k + 1];
      const Value& view_lit = a.lits[a.first_input() + 2 * k + 1];
      if (child < 0) return false;
      // The view's shape, and the dtype the producer must have.
      Shape vs = s;
      DType want = dt;
      bool is_index = false;
      switch (a.op) {
        case OpKind::Cast: want = random_dtype(rng_, false); break;
        case OpKind::LessThan: want = compare_dtype; break;
        case OpKind::SumReduce:
        case OpKind::MaxReduce: vs.insert(vs.begin() + axis, random_dim()); break;
        case OpKind::Gather:
          if (k == 0) is_index = true;
          else vs = free_shape;
          break;
        case OpKind::Scatter:
          if (k > 0) vs = free_shape;
          is_index = k == 1;
          break;
        default: break;
      }
      if (is_index) want = chance(rng_, 0.5) ? DType::I32 : DType::I64;
      if (!dtype_of(child) && !set_dtype(child, want)) return false;
      if (is_index) index_users_[child] = {a.op, free_shape, s};
      // The producer's shape: given, or chosen for a random view kind.
      ViewKind kind = static_cast<ViewKind>(pick(rng_, static_cast<int>(ViewKind::Count)));
      if (chance(rng_, 0.35)) kind = ViewKind::Identity;
      bool is_constant = p_.defined_by.count(child) && p_.atoms[p_.defined_by.at(child)].op == OpKind::Constant;
      if (is_constant && !shape_of(child) && !set_shape(child, {})) return false;
      if (!shape_of(child)) {
        auto ps = producer_for(vs, kind);
        if (!ps) {
          kind = ViewKind::Identity;
          ps = vs;
        }
        if (!set_shape(child, *ps)) return false;
      }
      Shape ps = *shape_of(child);
      std::optional<ShapeTracker> view;
      if (auto given = get(view_var, view_lit)) {
        view = search::decode_view(*given);
        if (view->shape() != vs) return false;
      } else {
        view = view_from(ps, vs, kind);
        if (!view || !unify(view_var, view_lit, search::encode_view(*view))) return false;
      }
      if (p_.defined_by.count(child)) queue.push_back(child);
    }
    return true;
  }

  // ---- building the HLIR graph bottom-up ----
  NodeId build(Graph& g, int x, std::map<int, NodeId>& built) {
    if (auto it = built.find(x); it != built.end()) return it->second;
    auto dt = dtype_of(x);
    auto sh = shape_of(x);
    if (!dt || !sh) return kNoNode;
    Node n;
    n.dtype = *dt;
    n.shape = *sh;
    auto def = p_.defined_by.find(x);
    if (def == p_.defined_by.end()) {
      n.op = OpKind::Input;
      n.label = rule_.vars[x].name;
      NodeId id = g.add_node(std::move(n));
      if (auto u = index_users_.find(x); u != index_users_.end()) {
        // Index values stay in range, or every run would only test the error path.
        const auto& [op, free_shape, out_shape] = u->second;
        Expression bound = product(op == OpKind::Gather ? free_shape : out_shape);
        index_bounds_of_[id] = std::max<int64_t>(1, bound.eval(dims_));
      }
      return built[x] = id;
    }
    const PatternAtom& a = p_.atoms[def->second];
    n.op = a.op;
    switch (a.payload) {
      case Payload::F64: n.constant = get(a.vars[2], a.lits[2])->as_f64(); break;
      case Payload::Axis: n.axis = static_cast<int>(get(a.vars[2], a.lits[2])->as_i64()); break;
      case Payload::Expr: n.iota_expr = get(a.vars[2], a.lits[2])->as_expr(); break;
      default: break;
    }
    for (size_t k = 0; k < a.num_inputs(); ++k) {
      NodeId in = build(g, a.vars[a.first_input() + 2 * k], built);
      if (in == kNoNode) return kNoNode;
      auto view = get(a.vars[a.first_input() + 2 * k + 1], a.lits[a.first_input() + 2 * k + 1]);
      if (!view) return kNoNode;
      n.inputs.push_back({in, search::decode_view(*view)});
    }
    return built[x] = g.add_node(std::move(n));
  }

  struct IndexUse {
    OpKind op;
    Shape free_shape, out_shape;
  };
  const Pattern& p_;
  const Rule& rule_;
  Rng& rng_;
  std::vector<std::optional<Value>> val_;
  std::map<int, Shape> leaf_shape_;
  std::map<int, DType> leaf_dtype_;
  std::map<int, IndexUse> index_users_;
  std::map<NodeId, int64_t> index_bounds_of_;
  DimMap dims_;
};

// ---------------------------------------------------------------- running and comparing
std::string value_text(double v) {
  if (std::isnan(v)) return "nan";
  if (v == 0) return std::signbit(v) ? "-0" : "0";
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

std::string describe(const Graph& g) {
  std::ostringstream os;
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    os << "    %" << i << " = " << op_name(n.op) << " " << dtype_name(n.dtype) << " " << to_string(n.shape);
    if (n.op == OpKind::Constant) os << " value " << value_text(n.constant);
    if (n.op == OpKind::SumReduce || n.op == OpKind::MaxReduce) os << " axis " << n.axis;
    if (n.op == OpKind::Iota) os << " iota " << n.iota_expr;
    for (const auto& in : n.inputs) {
      os << " %" << in.node;
      if (!in.view.is_contiguous()) {
        os << "[view " << to_string(in.view.shape()) << ": index " << in.view.index_expression();
        if (in.view.has_padding()) os << ", valid " << in.view.valid_expression();
        os << "]";
      }
    }
    os << "\n";
  }
  return os.str();
}

std::string tensor_text(const HostTensor& t) {
  std::ostringstream os;
  os << "[";
  for (size_t k = 0; k < t.numel() && k < 24; ++k)
    os << (k ? ", " : "") << (is_float(t.dtype) ? value_text(t.get_f64(k)) : std::to_string(t.get_i64(k)));
  if (t.numel() > 24) os << ", ...";
  os << "]";
  return os.str();
}

// First element where `got` differs from `want`, or -1.
int64_t first_difference(const HostTensor& want, const HostTensor& got, double tolerance) {
  if (want.numel() != got.numel()) return 0;
  for (size_t k = 0; k < want.numel(); ++k) {
    if (!is_float(want.dtype)) {
      if (want.get_i64(k) != got.get_i64(k)) return static_cast<int64_t>(k);
      continue;
    }
    double a = want.get_f64(k), b = got.get_f64(k);
    if (std::isnan(a) && std::isnan(b)) continue;
    if (a == b && std::signbit(a) == std::signbit(b)) continue;
    if (a == 0 && b == 0) return static_cast<int64_t>(k);  // a zero of the other sign
    if (tolerance > 0 && std::isfinite(a) && std::isfinite(b) &&
        std::abs(a - b) <= tolerance * std::max(1.0, std::abs(a)))
      continue;
    return static_cast<int64_t>(k);
  }
  return -1;
}

struct Run {
  std::map<NodeId, HostTensor> outputs;  // by source Output node
  std::string error;
};

Run execute(const Runtime& kind, const Graph& program, const std::vector<NodeId>& io_of, const Graph& source,
            const std::map<NodeId, HostTensor>& inputs, const DimMap& dims) {
  Run r;
  try {
    std::unique_ptr<Runtime> rt = kind.fresh();
    rt->load(program, io_of);
    std::set<NodeId> present(io_of.begin(), io_of.end());
    for (const auto& [id, t] : inputs)
      if (present.count(id)) rt->set_tensor(id, t);
    rt->execute(dims);
    for (NodeId i = 0; i < source.size(); ++i)
      if (source.node(i).op == OpKind::Output) r.outputs[i] = rt->get_tensor(i);
  } catch (const std::exception& e) {
    r.error = e.what();
    if (r.error.empty()) r.error = "an exception without a message";
  }
  return r;
}

struct Verifier {
  const std::vector<std::string>& files;
  const Runtime& target;
  const VerifyOptions& o;
  ReferenceRuntime reference;

  // Lowered as a compile for `target` lowers it: its host primitives registered, its
  // backend ops validated.
  search::LoweredGraph load(const Graph& g) const {
    search::LoweredGraph lowered =
        search::lower_to_egraph(g, [this](egraph::EGraph& eg) { target.register_primitives(eg); });
    search::load_rule_files(lowered, files);
    return lowered;
  }

  RuleResult verify(size_t index, const Rule& rule, const Pattern& pattern, Rng& rng) {
    RuleResult res;
    res.name = rule.name;
    res.ruleset = rule.ruleset.empty() ? "(default)" : rule.ruleset;
    res.location = rule.loc.to_string();
    res.disabled = rule.disabled;
    res.tolerance = rule.tolerance;
    if (!pattern.unsupported.empty()) {
      res.detail = pattern.unsupported;
      return res;
    }
    int laid_out = 0, threw = 0;
    for (int attempt = 0; attempt < o.max_attempts && res.instances < o.instances; ++attempt) {
      Generator gen(pattern, rule, rng);
      DimMap dims;
      std::optional<Graph> g = gen.generate(dims);
      if (!g) continue;
      ++laid_out;
      // Grow the e-graph with this rule alone, once.
      search::LoweredGraph lowered = load(*g);
      egraph::EGraph& eg = *lowered.egraph;
      Rule only = eg.rules()[index];
      only.ruleset = kVerifyRuleset;
      only.disabled.clear();
      eg.declare_ruleset(kVerifyRuleset);
      eg.add_rule(std::move(only));
      egraph::RunOptions run;
      run.iteration_limit = 1;
      eg.run(egraph::Schedule::run(kVerifyRuleset, 1), run);
      search::ChoiceSpace space = search::choice_space(lowered);
      if (space.slots.empty()) {  // the rule did not fire here
        if (std::getenv("LUMINAL_VERIFY_DEBUG")) std::fprintf(stderr, "no fire:\n%s", describe(*g).c_str());
        continue;
      }
      ++res.instances;
      if (std::getenv("LUMINAL_VERIFY_DEBUG")) std::fprintf(stderr, "instance:\n%s", describe(*g).c_str());
      // Every alternative program (all of them when few, else a random sample).
      std::vector<std::vector<uint32_t>> genomes;
      double total = 1;
      for (const auto& opts : space.options) total *= static_cast<double>(opts.size());
      if (total <= o.max_programs) {
        std::vector<uint32_t> genome(space.slots.size(), 0);
        for (;;) {
          genomes.push_back(genome);
          size_t s = 0;
          for (; s < genome.size(); ++s) {
            if (++genome[s] < space.options[s].size()) break;
            genome[s] = 0;
          }
          if (s == genome.size()) break;
        }
      } else {
        for (int k = 0; k < o.max_programs; ++k) {
          std::vector<uint32_t> genome;
          for (const auto& opts : space.options) genome.push_back(static_cast<uint32_t>(pick(rng, static_cast<int>(opts.size()))));
          genomes.push_back(genome);
        }
      }
      std::vector<search::Extracted> programs;
      for (const auto& genome : genomes)
        if (auto p = search::extract(lowered, space, genome)) programs.push_back(std::move(*p));
      res.programs += static_cast<int>(programs.size());
      std::vector<NodeId> identity(g->size());
      for (NodeId i = 0; i < g->size(); ++i) identity[i] = i;
      for (int trial = 0; trial < o.data_trials; ++trial) {
        std::map<NodeId, HostTensor> inputs;
        for (NodeId i = 0; i < g->size(); ++i) {
          const Node& n = g->node(i);
          if (n.op != OpKind::Input) continue;
          auto bound = gen.index_bounds.find(i);
          inputs[i] = fill(rng, n.dtype, static_cast<size_t>(product(n.shape).eval(dims)), trial,
                           bound == gen.index_bounds.end() ? 0 : bound->second);
        }
        Run want = execute(reference, *g, identity, *g, inputs, dims);
        if (!want.error.empty()) {
          ++threw;  // the original itself is an error on this data: nothing to compare
          continue;
        }
        for (const auto& p : programs) {
          Run got = execute(target, p.program, p.io_of, *g, inputs, dims);
          ++res.comparisons;
          std::string why;
          if (!got.error.empty()) {
            why = "the rewritten program throws: " + got.error;
          } else {
            for (const auto& [out, t] : want.outputs) {
              int64_t k = first_difference(t, got.outputs.at(out), std::max(rule.tolerance, target.numeric_tolerance()));
              if (k < 0) continue;
              why = "output %" + std::to_string(out) + " element " + std::to_string(k) + ": expected " +
                    (is_float(t.dtype) ? value_text(t.get_f64(k)) : std::to_string(t.get_i64(k))) + ", got " +
                    (is_float(t.dtype) ? value_text(got.outputs.at(out).get_f64(k))
                                       : std::to_string(got.outputs.at(out).get_i64(k)));
              break;
            }
          }
          if (why.empty()) continue;
          std::ostringstream os;
          os << why << "\n  original:\n" << describe(*g) << "  rewritten:\n" << describe(p.program);
          os << "  dims: n=" << dims.at(kSymbolicDim) << "\n  inputs:";
          for (const auto& [id, t] : inputs) os << " %" << id << "=" << tensor_text(t);
          res.status = Status::Unsound;
          res.detail = os.str();
          return res;
        }
      }
    }
    if (res.comparisons > 0) {
      res.status = Status::Sound;
    } else {
      std::ostringstream os;
      os << "never fired: " << laid_out << " of " << o.max_attempts << " random graphs laid the pattern out, "
         << res.instances << " made it fire";
      if (threw) os << ", " << threw << " input fillings made the original program throw";
      res.detail = os.str();
    }
    return res;
  }
};

}  // namespace

const char* status_name(Status s) {
  switch (s) {
    case Status::Sound: return "sound";
    case Status::Unsound: return "UNSOUND";
    case Status::Untested: return "untested";
  }
  return "?";
}

std::vector<RuleResult> verify_rule_files(const std::vector<std::string>& rule_files, const Runtime& target,
                                          const VerifyOptions& options) {
  Verifier v{rule_files, target, options, {}};
  Graph empty;
  search::LoweredGraph meta = v.load(empty);
  std::vector<RuleResult> out;
  const auto& rules = meta.egraph->rules();
  for (size_t i = 0; i < rules.size(); ++i) {
    const Rule& rule = rules[i];
    if (!options.only.empty() && std::find(options.only.begin(), options.only.end(), rule.name) == options.only.end())
      continue;
    Rng rng(options.seed * 0x9E3779B97F4A7C15ull + i);
    out.push_back(v.verify(i, rule, analyse(*meta.egraph, rule), rng));
  }
  return out;
}

std::string format_report(const std::vector<RuleResult>& results) {
  std::ostringstream os;
  for (const auto& r : results) {
    os << status_name(r.status) << "  " << r.name << "  [" << r.ruleset;
    if (!r.disabled.empty()) os << ", disabled";
    if (r.tolerance > 0) os << ", tolerance " << r.tolerance;
    os << "]  " << r.instances << " graphs, " << r.programs << " programs, " << r.comparisons << " runs  ("
       << r.location << ")\n";
    if (!r.detail.empty()) os << "  " << r.detail << "\n";
  }
  return os.str();
}

}  // namespace luminal::verify
