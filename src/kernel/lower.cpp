// Lowering a Region to the loop-nest IR, and the IR printer.
//
// Every value is a function of an index: the value of node n at flat element `idx`
// of n's (contiguous) buffer. An edge read through a view composes the view's index
// expression, so elementwise producers are recomputed at the consumer's index and no
// intermediate buffer exists. A reduction is placed in the outermost loop whose
// variables its index uses: per row (kept in a local, computed once per row) or
// inside another reduction's loop. A reduction whose index depends on the column, or
// that several rows would recompute, is refused; `lower` then tries the next
// row/column split of the output and gives up when none works.
#include <algorithm>
#include <bit>
#include <map>
#include <set>
#include <sstream>

#include "luminal/error.hpp"
#include "luminal/kernel/kernel.hpp"

namespace luminal::kernel {
namespace {

struct Refuse {};  // the region cannot be one kernel with this split

std::string value_var(int v) { return "$v" + std::to_string(v); }
std::string loop_var(int k) { return "$r" + std::to_string(k); }

Expression and_expr(const Expression& a, const Expression& b) {
  if (a == Expression(1)) return b;
  if (b == Expression(1)) return a;
  return logical_and(a, b);
}

bool is_loop_or_value_var(const std::string& name) { return !name.empty() && name[0] == '$'; }

class Lowerer {
 public:
  Lowerer(const Graph& g, Expression rows, Expression cols, std::vector<DimMap> samples)
      : g_(g), rows_(rows), cols_(cols), samples_(std::move(samples)) {
    int k = 0;
    for (NodeId i : g.inputs()) slot_[i] = k++;
    output_slot_ = k;
    find_duplicates();
  }

  // Lower the whole output as one phase: per row, per col, store.
  Phase lower_output(NodeId out) {
    open_block(std::string(kRowVar), rows_);
    open_block(std::string(kColVar), cols_);
    Expression row = Expression::var(kRowVar), col = Expression::var(kColVar);
    Expression idx = cols_ == Expression(1) ? row : row * cols_ + col;
    int v = input_value(out, 0, idx, 1);
    Stmt st;
    st.kind = StmtKind::Store;
    st.dtype = g_.node(out).dtype;
    st.buffer = output_slot_;
    st.index = idx;
    st.args = {v};
    blocks_.back().stmts.push_back(std::move(st));
    unstash_columns(blocks_[1]);
    Phase p;
    p.rows = rows_;
    p.cols = cols_;
    p.col_body = std::move(blocks_[1].stmts);
    p.row_body = std::move(blocks_[0].stmts);
    place_stashes(p.row_body);
    p.scratch = scratch_;
    return p;
  }

  // The two phases of a Scatter result: copy dest, then write src at the indexes.
  std::vector<Phase> lower_scatter(NodeId scatter) {
    const Node& n = g_.node(scatter);
    Expression row = Expression::var(kRowVar);
    std::vector<Phase> phases(2);
    for (int which = 0; which < 2; ++which) {
      blocks_.clear();
      // The row variable runs over each phase's own elements (dest's, then src's): its
      // block's extent is the range index simplification assumes. The region's 1 x 1 split
      // let a fused producer's views fold as if every element were the first (a RoPE's
      // concat read only its first half: docs/LESSONS.md).
      open_block(std::string(kRowVar), which == 0 ? product(n.shape) : product(n.inputs[1].view.shape()));
      open_block(std::string(kColVar), cols_);
      Stmt st;
      st.kind = StmtKind::Store;
      st.dtype = n.dtype;
      st.buffer = output_slot_;
      if (which == 0) {
        st.index = row;
        st.args = {input_value(scatter, 0, row, 1)};
        phases[0].rows = product(n.shape);
        const NodeInput& dest = n.inputs[0];
        if (g_.node(dest.node).op == OpKind::Input && g_.node(dest.node).dtype == n.dtype &&
            dest.view.is_contiguous() && dest.view.shape() == n.shape)
          phases[0].copies_input = slot_.at(dest.node);
      } else {
        int target = input_value(scatter, 1, row, 1);
        int bound = emit_bound(target, n, n.shape, n.inputs[1].view.shape(), row, 1, KernelError::ScatterOutOfRange);
        st.index = Expression::var(value_var(bound));
        st.args = {input_value(scatter, 2, row, 1)};
        Shape src = n.inputs[1].view.shape();
        phases[1].rows = product(src);
      }
      blocks_.back().stmts.push_back(std::move(st));
      phases[which].col_body = std::move(blocks_[1].stmts);
      phases[which].row_body = std::move(blocks_[0].stmts);
    }
    return phases;
  }

  const std::vector<BoundSite>& sites() const { return sites_; }

 private:
  // Structurally identical nodes compute one value: an extracted program can hold several
  // copies of a subexpression (softmax's max, once per consumer; layer norm's mean, three
  // times), and fused into one region each copy would be its own loop over the row. Values
  // are memoised under the first copy (canon_), so every copy is computed once. Nodes are
  // in creation order, so inputs come first; Inputs are distinct buffers and never merge.
  void find_duplicates() {
    canon_.resize(g_.size());
    std::map<OpKind, std::vector<NodeId>> by_op;
    for (NodeId i = 0; i < g_.size(); ++i) {
      canon_[i] = i;
      const Node& n = g_.node(i);
      if (n.op == OpKind::Input || n.op == OpKind::Output || n.op == OpKind::CustomOp || n.op == OpKind::BackendOp ||
          n.op == OpKind::Scatter)
        continue;
      bool inputs_first = true;
      for (const auto& in : n.inputs) inputs_first = inputs_first && in.node < i;
      if (!inputs_first) continue;
      auto& same_op = by_op[n.op];
      for (NodeId j : same_op)
        if (same_value(g_.node(j), n)) {
          canon_[i] = j;
          break;
        }
      if (canon_[i] == i) same_op.push_back(i);
    }
  }
  bool same_value(const Node& a, const Node& b) const {
    // An elementwise op's axis is a label the rewrites carry along (softmax's two copies of
    // x - max came as axis -1 and 0), not part of its value.
    const bool elementwise = op_category(a.op) == OpCategory::Unary || op_category(a.op) == OpCategory::Binary;
    if (a.dtype != b.dtype || a.shape != b.shape || (a.axis != b.axis && !elementwise) || !(a.iota_expr == b.iota_expr) ||
        std::bit_cast<uint64_t>(a.constant) != std::bit_cast<uint64_t>(b.constant) || a.inputs.size() != b.inputs.size())
      return false;
    for (size_t k = 0; k < a.inputs.size(); ++k)
      if (canon_[a.inputs[k].node] != canon_[b.inputs[k].node] || !(a.inputs[k].view == b.inputs[k].view)) return false;
    return true;
  }

  using Key = std::tuple<NodeId, Expression, Expression>;
  struct Block {
    std::string var;  // the loop variable this block iterates
    Expression extent;
    std::vector<Stmt> stmts;
    std::map<Key, int> cache;
  };

  void open_block(std::string var, Expression extent) {
    var_depth_[var] = blocks_.size();
    blocks_.push_back(Block{std::move(var), extent, {}, {}});
  }

  // The deepest block defining a variable `e` uses (0: the row block).
  size_t depth_of(const Expression& e) const {
    size_t d = 0;
    for (const auto& v : e.variables()) {
      if (!is_loop_or_value_var(v)) continue;
      auto it = var_depth_.find(v);
      LUMINAL_ASSERT(it != var_depth_.end(), "kernel variable ", v, " used outside its scope");
      d = std::max(d, it->second);
    }
    return d;
  }

  std::optional<int> lookup(const Key& key, size_t max_depth) const {
    for (size_t d = std::min(max_depth + 1, blocks_.size()); d-- > 0;) {
      auto it = blocks_[d].cache.find(key);
      if (it != blocks_[d].cache.end()) return it->second;
    }
    return std::nullopt;
  }

  int emit(Stmt st, size_t depth) {
    st.value = next_value_++;
    var_depth_[value_var(st.value)] = depth;
    blocks_[depth].stmts.push_back(std::move(st));
    return next_value_ - 1;
  }

  // Check the flat index `value` of a Gather/Scatter `n` at flat `position` (of the
  // `positions` shape): inside [0, numel of `sizes`) and, when the node carries the user's
  // axis, its coordinate along that axis inside [0, size) -- the check of the reference
  // runtime, so an index past its axis that lands in the next row is an error too.
  int emit_bound(int value, const Node& n, const Shape& sizes, const Shape& positions, const Expression& position,
                 const Expression& guard, KernelError code) {
    Stmt st;
    st.kind = StmtKind::Bound;
    st.dtype = DType::I64;
    st.args = {value};
    st.index = product(sizes);
    st.guard = guard;
    st.position = position;
    st.constant = static_cast<double>(code);
    if (n.axis >= 0 && static_cast<size_t>(n.axis) < sizes.size() && positions.size() == sizes.size()) {
      // A user's index i along the axis gives the flat index base + i * stride[axis], base
      // from the position's other coordinates. (Not an Expression of the value: the
      // simplifier assumes variables are >= 0, and a bad index may be negative.)
      const auto axis = static_cast<size_t>(n.axis);
      Expression base = 0, stride = 1, inner = 1;
      for (size_t d = sizes.size(); d-- > 0;) {
        Expression coord = d == 0 ? position / inner : (position / inner) % positions[d];
        if (d == axis) st.axis_stride = stride;
        else base = base + coord * stride;
        stride = stride * sizes[d];
        inner = inner * positions[d];
      }
      st.axis_base = base;
      st.axis_size = sizes[axis];
    }
    st.site = static_cast<int>(sites_.size());
    sites_.push_back(BoundSite{code, n.axis, sizes, positions});
    return emit(std::move(st), blocks_.size() - 1);
  }

  // ---- values a row reduction computed for every column, kept for the column loop ----
  struct RowLoop {
    int loop;                     // the reduction's loop variable r<loop>, over the columns
    std::map<Key, int> computed;  // what its body computed
  };
  struct Stash {
    int loop, value, slot;
  };
  // After lowering: an expensive value (Exp2, Log2, Sin) of the column loop that a row
  // reduction over the columns computed at the same element (the column index read as
  // the reduction's variable) is read back from a per-row scratch array instead (its
  // now unused operands are left to the compiler's dead-code elimination).
  void unstash_columns(Block& cols) {
    for (const auto& [key, value] : cols.cache) {
      const OpKind op = g_.node(std::get<0>(key)).op;
      if (op != OpKind::Exp2 && op != OpKind::Log2 && op != OpKind::Sin) continue;
      for (const RowLoop& rl : row_loops_) {
        const Expression r = Expression::var(loop_var(rl.loop));
        Key in_loop{std::get<0>(key), std::get<1>(key).substitute(kColVar, r), std::get<2>(key).substitute(kColVar, r)};
        auto it = rl.computed.find(in_loop);
        if (it == rl.computed.end()) continue;
        auto def = std::find_if(cols.stmts.begin(), cols.stmts.end(), [v = value](const Stmt& st) { return st.value == v; });
        if (def == cols.stmts.end()) break;
        const int slot = static_cast<int>(scratch_.size());
        scratch_.push_back(def->dtype);
        stashes_.push_back({rl.loop, it->second, slot});
        Stmt st;
        st.kind = StmtKind::Unstash;
        st.value = value;
        st.dtype = def->dtype;
        st.buffer = slot;
        st.index = Expression::var(kColVar);
        *def = std::move(st);
        break;
      }
    }
  }
  // Add the Stash statements to the reductions' bodies (after lowering: only then is it
  // known which values the columns read back).
  void place_stashes(std::vector<Stmt>& row_body) {
    for (Stmt& st : row_body) {
      if (st.kind != StmtKind::Reduce) continue;
      for (const Stash& s : stashes_) {
        if (s.loop != st.loop) continue;
        Stmt put;
        put.kind = StmtKind::Stash;
        put.dtype = scratch_[static_cast<size_t>(s.slot)];
        put.buffer = s.slot;
        put.index = Expression::var(loop_var(s.loop));
        put.args = {s.value};
        st.body.push_back(std::move(put));
      }
    }
  }

  // ---- Gathers that select between two places (where, and pads built from it) ----
  // An index edge read at `pos` as `affine + sel * k`: `affine` and `k` index Expressions,
  // `sel` a Bool (reached through an integer Cast) whose value picks one of two places.
  struct SelectIndex {
    Expression affine = 0, k = 0;
    NodeId sel_cast = kNoNode;  // the Cast of the Bool
    Expression sel_pos = 0;     // the Cast's element
  };
  std::optional<SelectIndex> select_index(const NodeInput& in, const Expression& pos, int depth = 0) const {
    if (depth > 8 || !(fold_condition(in.view.valid_expression().substitute(Expression::kIndexName, pos)) == Expression(1)))
      return std::nullopt;
    const Expression p = in.view.index_expression().substitute(Expression::kIndexName, pos);
    const Node& n = g_.node(in.node);
    if (is_float(n.dtype) || n.dtype == DType::Bool) return std::nullopt;
    switch (n.op) {
      case OpKind::Iota: return SelectIndex{n.iota_expr.substitute(Expression::kIndexName, p), 0, kNoNode, 0};
      case OpKind::Constant:
        return SelectIndex{Expression(wrap_to_int_dtype(static_cast<int64_t>(n.constant), n.dtype)), 0, kNoNode, 0};
      case OpKind::Cast: {
        const DType from = g_.node(n.inputs[0].node).dtype;
        if (is_float(from) || from == DType::Bool || dtype_bytes(from) > dtype_bytes(n.dtype)) return std::nullopt;
        return select_index(n.inputs[0], p, depth + 1);
      }
      case OpKind::Add: {
        auto a = select_index(n.inputs[0], p, depth + 1), b = select_index(n.inputs[1], p, depth + 1);
        if (!a || !b || (a->sel_cast != kNoNode && b->sel_cast != kNoNode)) return std::nullopt;
        SelectIndex r = a->sel_cast != kNoNode ? *a : *b;
        r.affine = a->affine + b->affine;
        return r;
      }
      case OpKind::Mul:
        for (int side = 0; side < 2; ++side) {
          const NodeInput& s_in = n.inputs[static_cast<size_t>(side)];
          const Node& cast = g_.node(s_in.node);
          if (cast.op != OpKind::Cast || g_.node(cast.inputs[0].node).dtype != DType::Bool) continue;
          if (!(fold_condition(s_in.view.valid_expression().substitute(Expression::kIndexName, p)) == Expression(1))) continue;
          auto k = select_index(n.inputs[static_cast<size_t>(1 - side)], p, depth + 1);
          if (!k || k->sel_cast != kNoNode || !(k->affine.variables().empty())) continue;
          return SelectIndex{0, k->affine, s_in.node, s_in.view.index_expression().substitute(Expression::kIndexName, p)};
        }
        return std::nullopt;
      default: return std::nullopt;
    }
  }
  bool interval_within(const Expression& e, const Expression& numel) const {
    auto i = interval(e);
    auto n = numel.as_constant();
    return i && n && i->lo >= 0 && i->hi < *n;
  }
  // Gather(index = affine + sel * k): sel ? data[affine + k] : data[affine], both places
  // proven inside the data, so neither read needs a check or a guard, and each reads
  // the data's producers at an index of the loop variables (contiguous, vectorisable)
  // instead of a gathered one.
  std::optional<int> select_gather(NodeId id, const Expression& idx, const Expression& guard) {
    const Node& n = g_.node(id);
    auto si = select_index(n.inputs[0], idx);
    if (!si || si->sel_cast == kNoNode) return std::nullopt;
    const Expression numel = n.inputs[1].view.n_elements();
    const Expression other = si->affine + si->k;
    if (!interval_within(si->affine, numel) || !interval_within(other, numel)) return std::nullopt;
    int sel = input_value(si->sel_cast, 0, si->sel_pos, guard);
    int lo = input_value(id, 1, si->affine, guard);
    int hi = input_value(id, 1, other, guard);
    Stmt st;
    st.kind = StmtKind::Select;
    st.dtype = n.dtype;
    st.args = {sel, hi, lo};
    return emit(std::move(st), blocks_.size() - 1);
  }

  // ---- intervals of index expressions over the loop variables' ranges ----
  struct Interval {
    int64_t lo, hi;
  };
  static constexpr int64_t kHuge = int64_t{1} << 60;
  // Saturating at +-kHuge (operands are within it, so neither overflows int64 first).
  static int64_t sat_add(int64_t a, int64_t b) { return std::clamp(a + b, -kHuge, kHuge); }
  static int64_t sat_mul(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return (a < 0) != (b < 0) ? -kHuge : kHuge;
    return std::clamp(r, -kHuge, kHuge);
  }
  // The range of a loop variable (or value): [0, extent - 1] for loops with a static
  // extent; other variables (dims, values) are >= 0, as the simplifier assumes.
  Interval var_range(const std::string& name) const {
    auto it = var_depth_.find(name);
    if (it != var_depth_.end() && it->second < blocks_.size() && blocks_[it->second].var == name)
      if (auto n = blocks_[it->second].extent.as_constant()) return {0, std::max<int64_t>(*n - 1, 0)};
    return {0, kHuge};
  }
  std::optional<Interval> interval(const Expression& e) const {
    const auto ch = e.children();
    auto both = [&]() -> std::optional<std::pair<Interval, Interval>> {
      auto a = interval(ch[0]), b = interval(ch[1]);
      if (!a || !b) return std::nullopt;
      return std::pair{*a, *b};
    };
    auto positive_constant = [&](const Expression& d) { return d.as_constant() && *d.as_constant() > 0; };
    switch (e.kind()) {
      case ExprKind::Num: return Interval{e.constant_value(), e.constant_value()};
      case ExprKind::Var: return var_range(e.var_name());
      case ExprKind::Add: {
        Interval r{0, 0};
        for (const auto& c : ch) {
          auto i = interval(c);
          if (!i) return std::nullopt;
          r = {sat_add(r.lo, i->lo), sat_add(r.hi, i->hi)};
        }
        return r;
      }
      case ExprKind::Mul: {
        Interval r{1, 1};
        for (const auto& c : ch) {
          auto i = interval(c);
          if (!i) return std::nullopt;
          const int64_t p[] = {sat_mul(r.lo, i->lo), sat_mul(r.lo, i->hi), sat_mul(r.hi, i->lo), sat_mul(r.hi, i->hi)};
          r = {*std::min_element(p, p + 4), *std::max_element(p, p + 4)};
        }
        return r;
      }
      case ExprKind::Div:
      case ExprKind::CeilDiv: {
        auto a = interval(ch[0]);
        if (!a || !positive_constant(ch[1])) return std::nullopt;
        const int64_t d = *ch[1].as_constant();
        auto div = [&](int64_t x) {
          int64_t q = x / d, r = x % d;
          if (e.kind() == ExprKind::Div) return (r != 0 && x < 0) ? q - 1 : q;
          return (r != 0 && x > 0) ? q + 1 : q;
        };
        return Interval{div(a->lo), div(a->hi)};
      }
      case ExprKind::Mod: {
        auto a = interval(ch[0]);
        if (!a || !positive_constant(ch[1])) return std::nullopt;
        const int64_t d = *ch[1].as_constant();
        if (a->lo >= 0 && a->hi < d) return a;
        return Interval{0, d - 1};
      }
      case ExprKind::Min:
      case ExprKind::Max: {
        auto ab = both();
        if (!ab) return std::nullopt;
        auto [a, b] = *ab;
        if (e.kind() == ExprKind::Min) return Interval{std::min(a.lo, b.lo), std::min(a.hi, b.hi)};
        return Interval{std::max(a.lo, b.lo), std::max(a.hi, b.hi)};
      }
      case ExprKind::Lt:
      case ExprKind::Eq: {
        auto ab = both();
        if (!ab) return std::nullopt;
        auto [a, b] = *ab;
        if (e.kind() == ExprKind::Lt) {
          if (a.hi < b.lo) return Interval{1, 1};
          if (a.lo >= b.hi) return Interval{0, 0};
        } else {
          if (a.lo == a.hi && b.lo == b.hi && a.lo == b.lo) return Interval{1, 1};
          if (a.hi < b.lo || b.hi < a.lo) return Interval{0, 0};
        }
        return Interval{0, 1};
      }
      case ExprKind::And:
      case ExprKind::Or: {
        bool all_true = true, any_true = false, all_false = true, any_false = false;
        for (const auto& c : ch) {
          auto i = interval(c);
          if (!i) return std::nullopt;
          const bool surely_true = i->lo > 0 || i->hi < 0, surely_false = i->lo == 0 && i->hi == 0;
          all_true = all_true && surely_true;
          any_true = any_true || surely_true;
          all_false = all_false && surely_false;
          any_false = any_false || surely_false;
        }
        if (e.kind() == ExprKind::And) return any_false ? Interval{0, 0} : all_true ? Interval{1, 1} : Interval{0, 1};
        return any_true ? Interval{1, 1} : all_false ? Interval{0, 0} : Interval{0, 1};
      }
      case ExprKind::Not: {
        auto i = interval(ch[0]);
        if (!i) return std::nullopt;
        if (i->lo == 0 && i->hi == 0) return Interval{1, 1};
        if (i->lo > 0 || i->hi < 0) return Interval{0, 0};
        return Interval{0, 1};
      }
    }
    return std::nullopt;
  }
  // A condition that is constant over the loop variables' ranges, folded (padding that
  // no element of this loop nest reaches, or that every element is inside).
  Expression fold_condition(const Expression& cond) const {
    if (cond.is_constant()) return cond;
    auto i = interval(cond);
    if (i && i->lo == 0 && i->hi == 0) return 0;
    if (i && (i->lo > 0 || i->hi < 0)) return 1;
    return cond;
  }

  // The value of node `n`'s input `k` at element `idx` of n's view of it.
  int input_value(NodeId n, size_t k, const Expression& idx, const Expression& guard) {
    const NodeInput& in = g_.node(n).inputs[k];
    Expression valid = fold_condition(in.view.valid_expression().substitute(Expression::kIndexName, idx));
    Expression pidx = in.view.index_expression().substitute(Expression::kIndexName, idx);
    if (valid == Expression(0)) {
      Stmt zero;
      zero.kind = StmtKind::Constant;
      zero.dtype = g_.node(in.node).dtype;
      return emit(std::move(zero), blocks_.size() - 1);
    }
    int v = value_at(in.node, pidx, and_expr(guard, valid));
    if (valid == Expression(1)) return v;
    Stmt sel;
    sel.kind = StmtKind::Select;
    sel.dtype = g_.node(in.node).dtype;
    sel.index = valid;
    sel.args = {v};
    return emit(std::move(sel), blocks_.size() - 1);
  }

  int value_at(NodeId id, const Expression& idx, const Expression& guard) {
    id = canon_[id];
    const Node& n = g_.node(id);
    if (n.op == OpKind::SumReduce || n.op == OpKind::MaxReduce) return reduce_at(id, idx, guard);
    Key key{id, idx, guard};
    if (auto v = lookup(key, blocks_.size() - 1)) return *v;
    Stmt st;
    st.dtype = n.dtype;
    switch (n.op) {
      case OpKind::Input:
        st.kind = StmtKind::Load;
        st.buffer = slot_.at(id);
        st.index = idx;
        st.guard = guard;
        break;
      case OpKind::Constant:
        st.kind = StmtKind::Constant;
        st.constant = is_float(n.dtype) ? round_to_float_dtype(n.constant, n.dtype)
                                        : static_cast<double>(wrap_to_int_dtype(static_cast<int64_t>(n.constant), n.dtype));
        break;
      case OpKind::Iota:
        st.kind = StmtKind::Index;
        st.index = n.iota_expr.substitute(Expression::kIndexName, idx);
        break;
      case OpKind::Gather: {
        if (auto v = select_gather(id, idx, guard)) {
          blocks_.back().cache[key] = *v;
          return *v;
        }
        int target = input_value(id, 0, idx, guard);
        int bound;
        if (n.axis < 0 && index_in_range(n.inputs[0], n.inputs[1].view.n_elements())) {
          // A flat index the region computes (where's select, pads) that provably stays in
          // range: no check, so the loop stays vectorisable.
          Stmt wide;
          wide.kind = StmtKind::Cast;
          wide.dtype = DType::I64;
          wide.args = {target};
          bound = emit(std::move(wide), blocks_.size() - 1);
        } else {
          bound = emit_bound(target, n, n.inputs[1].view.shape(), n.shape, idx, guard, KernelError::GatherOutOfRange);
        }
        int v = input_value(id, 1, Expression::var(value_var(bound)), guard);
        blocks_.back().cache[key] = v;
        return v;
      }
      default:
        if (op_category(n.op) != OpCategory::Unary && op_category(n.op) != OpCategory::Binary) throw Refuse{};
        st.kind = n.op == OpKind::Cast ? StmtKind::Cast : StmtKind::Alu;
        st.op = n.op;
        st.guard = guard;
        for (size_t k = 0; k < n.inputs.size(); ++k) st.args.push_back(input_value(id, k, idx, guard));
        break;
    }
    int v = emit(std::move(st), blocks_.size() - 1);
    blocks_.back().cache[key] = v;
    return v;
  }

  // ---- integer value ranges, to drop index checks that cannot fail ----
  using Range = std::pair<Expression, Expression>;  // inclusive [lo, hi]
  static bool provably_nonnegative(const Expression& e) {
    auto lb = e.lower_bound();
    return lb && *lb >= 0;
  }
  // The values an integer edge can carry (padding reads 0), when they can be bounded.
  std::optional<Range> edge_range(const NodeInput& in) {
    auto r = node_range(in.node);
    if (!r) return std::nullopt;
    if (!(in.view.valid_expression() == Expression(1))) {
      if (!provably_nonnegative(r->first)) return std::nullopt;
      r->first = 0;
    }
    return r;
  }
  std::optional<Range> node_range(NodeId id) {
    const Node& n = g_.node(id);
    std::optional<Range> r;
    if (n.dtype == DType::Bool) return Range{0, 1};
    if (is_float(n.dtype)) return std::nullopt;
    switch (n.op) {
      case OpKind::Constant: {
        Expression c(wrap_to_int_dtype(static_cast<int64_t>(n.constant), n.dtype));
        r = Range{c, c};
        break;
      }
      case OpKind::Iota:
        if (!n.iota_expr.depends_on(Expression::kIndexName)) r = Range{n.iota_expr, n.iota_expr};
        else if (n.iota_expr == Expression::index()) r = Range{0, product(n.shape) - 1};
        break;
      case OpKind::Cast:
        if (!is_float(g_.node(n.inputs[0].node).dtype)) r = edge_range(n.inputs[0]);
        break;
      case OpKind::Add:
      case OpKind::Mul: {
        auto a = edge_range(n.inputs[0]), b = edge_range(n.inputs[1]);
        if (!a || !b) break;
        if (n.op == OpKind::Add) r = Range{a->first + b->first, a->second + b->second};
        else if (provably_nonnegative(a->first) && provably_nonnegative(b->first))
          r = Range{a->first * b->first, a->second * b->second};
        break;
      }
      default: break;
    }
    // Arithmetic in a narrow dtype wraps: only a range that fits it is a range. (Int64
    // index arithmetic on tensor sizes does not wrap.)
    const int bits = static_cast<int>(dtype_bytes(n.dtype)) * 8;
    if (r && bits < 64) {
      auto lb = r->first.lower_bound(), ub = r->second.upper_bound();
      const int64_t limit = (int64_t{1} << (bits - 1)) - 1;
      if (!lb || !ub || *lb < -limit || *ub > limit) return std::nullopt;
    }
    return r;
  }
  bool index_in_range(const NodeInput& index, const Expression& numel) {
    auto r = edge_range(index);
    return r && provably_nonnegative(r->first) && provably_nonnegative(numel - 1 - r->second);
  }

  // Numeric checks on sample dim values (the simplifier cannot use loop bounds, so
  // (row*13 + r1)/13 stays symbolic although it is row). Unevaluable (gathered)
  // indexes fail every check, which only ever refuses or keeps work.
  template <class F>
  bool for_samples(F&& check) const {
    try {
      for (DimMap d : samples_) {
        std::vector<int64_t> extents;
        for (const auto& b : blocks_) extents.push_back(b.extent.eval(d));
        if (!check(d, extents)) return false;
      }
      return true;
    } catch (const Error&) {
      return false;
    }
  }
  // Does `e` ignore the loop variable of block `target`, whatever the other loop variables are?
  bool independent_of(const Expression& e, size_t target) const {
    return for_samples([&](DimMap& d, const std::vector<int64_t>& ext) {
      for (int64_t pattern = 0; pattern < 4; ++pattern) {
        for (size_t b = 0; b < blocks_.size(); ++b) {
          int64_t n = std::max<int64_t>(ext[b], 1);
          int64_t pick[] = {0, 1, n - 1, static_cast<int64_t>(b * 7 + 3)};
          d[blocks_[b].var] = pick[pattern] % n;
        }
        // The first 16 values, points spread over the range and the last ones.
        const int64_t n = ext[target];
        d[blocks_[target].var] = 0;
        int64_t first = e.eval(d);
        std::vector<int64_t> points;
        for (int64_t t = 1; t < 16; ++t) points.push_back(t);
        for (int64_t j = 1; j < 8; ++j) points.push_back(n * j / 8 + j);
        points.push_back(n - 2);
        points.push_back(n - 1);
        for (int64_t t : points) {
          if (t <= 0 || t >= n) continue;
          d[blocks_[target].var] = t;
          if (e.eval(d) != first) return false;
        }
      }
      return true;
    });
  }
  bool row_injective(const Expression& e) const {
    if (rows_ == Expression(1)) return true;
    return for_samples([&](DimMap& d, const std::vector<int64_t>& ext) {
      std::set<int64_t> seen;
      for (int64_t r = 0; r < std::min<int64_t>(ext[0], 256); ++r) {
        d[std::string(kRowVar)] = r;
        if (!seen.insert(e.eval(d)).second) return false;
      }
      return true;
    });
  }

  int reduce_at(NodeId id, Expression idx, Expression guard) {
    id = canon_[id];
    const Node& n = g_.node(id);
    // Drop loop variables the index only seems to use, innermost first.
    for (size_t b = blocks_.size(); b-- > 1;) {
      const std::string& var = blocks_[b].var;
      if ((idx.depends_on(var) || guard.depends_on(var)) && independent_of(idx, b) && independent_of(guard, b)) {
        idx = idx.substitute(var, 0);
        guard = guard.substitute(var, 0);
      }
    }
    size_t depth = std::max(depth_of(idx), depth_of(guard));
    if (blocks_[depth].var == kColVar) throw Refuse{};  // needed per element
    if (depth == 0 && !row_injective(idx)) throw Refuse{};  // several rows would recompute it
    Key key{id, idx, guard};
    if (auto v = lookup(key, depth)) return *v;
    // Generate the loop in block `depth`: set the deeper blocks aside meanwhile.
    std::vector<Block> aside(std::make_move_iterator(blocks_.begin() + static_cast<ptrdiff_t>(depth) + 1),
                             std::make_move_iterator(blocks_.end()));
    blocks_.resize(depth + 1);
    int loop = next_loop_++;
    const ShapeTracker& view = n.inputs[0].view;
    Shape in_shape = view.shape();
    Expression extent = in_shape[static_cast<size_t>(n.axis)];
    open_block(loop_var(loop), extent);
    Expression inner = product(std::span(in_shape).subspan(static_cast<size_t>(n.axis) + 1));
    Expression z = (idx / inner * extent + Expression::var(loop_var(loop))) * inner + idx % inner;
    int body_value = input_value(id, 0, z, guard);
    Stmt st;
    st.kind = StmtKind::Reduce;
    st.dtype = n.dtype;
    st.op = n.op;
    st.index = extent;
    st.loop = loop;
    st.args = {body_value};
    st.body = std::move(blocks_.back().stmts);
    if (depth == 0 && extent == cols_ && cols_.is_constant())
      row_loops_.push_back(RowLoop{loop, std::move(blocks_.back().cache)});
    blocks_.pop_back();
    int v = emit(std::move(st), depth);
    blocks_[depth].cache[key] = v;
    for (auto& b : aside) blocks_.push_back(std::move(b));
    return v;
  }

  const Graph& g_;
  Expression rows_, cols_;
  std::vector<BoundSite> sites_;
  std::vector<RowLoop> row_loops_;
  std::vector<Stash> stashes_;
  std::vector<DType> scratch_;
  std::vector<DimMap> samples_;
  std::map<NodeId, int> slot_;
  std::vector<NodeId> canon_;  // the first structurally identical node
  int output_slot_ = 0;
  std::vector<Block> blocks_;
  std::map<std::string, size_t> var_depth_;
  int next_value_ = 0;
  int next_loop_ = 0;
};

std::vector<std::string> region_dims(const Graph& g) {
  std::set<std::string> names;
  auto add = [&](const Expression& e) {
    for (const auto& v : e.variables())
      if (v != Expression::kIndexName) names.insert(v);
  };
  for (const auto& n : g.nodes()) {
    for (const auto& d : n.shape) add(d);
    add(n.iota_expr);
    for (const auto& in : n.inputs) {
      add(in.view.base_offset());
      add(in.view.base_valid());
      for (const auto& d : in.view.dims()) {
        add(d.size);
        add(d.offset);
        add(d.valid);
      }
    }
  }
  for (const auto& v : names)
    LUMINAL_CHECK(!is_loop_or_value_var(v), "kernel: dimension name '", v, "' may not start with '$'");
  return {names.begin(), names.end()};
}

bool contains_reduce(const std::vector<Stmt>& stmts) {
  return std::any_of(stmts.begin(), stmts.end(), [](const Stmt& s) { return s.kind == StmtKind::Reduce; });
}

// Rows whose columns or top-level reductions span this many elements run a block per row
// on CUDA (Geometry::BlockPerRow). A reduction over a run-time length counts as long: it
// is attention over a KV cache (hundreds to thousands of keys), where one warp per row
// took 9 us for 32 rows of 520 keys at a decode step on the H200.
constexpr int64_t kBlockRowMin = 1024;
int64_t longest_row_loop(const Phase& p, const Expression& cols) {
  int64_t longest = cols.as_constant().value_or(0);
  for (const Stmt& s : p.row_body)
    if (s.kind == StmtKind::Reduce) longest = std::max(longest, s.index.as_constant().value_or(kBlockRowMin));
  return longest;
}
// The same loop as an expression: a run-time extent where there is one (it is the long
// one), else the longest constant.
Expression row_loop_extent(const Phase& p, const Expression& cols) {
  if (!cols.is_constant()) return cols;
  for (const Stmt& s : p.row_body)
    if (s.kind == StmtKind::Reduce && !s.index.is_constant()) return s.index;
  return Expression(longest_row_loop(p, cols));
}

// A loop variable divided by its own extent: `$r % E` is `$r` and `$r / E` is 0, since
// 0 <= $r < E. Views flattened over a dynamic axis leave these in index arithmetic (the
// causal mask of attention over (p + s) keys), where the simplifier cannot see the loop's
// bound, and a division by a run-time value in every element kept such loops scalar.
// More generally, for a constant extent W and a divisor n that W divides, `(W*X + $r) / n`
// is `X / (n/W)` and `(W*X + $r) % n` is `(X % (n/W))*W + $r` (the blocks of W never cross a
// multiple of n): a table read per block in a blocked elementwise loop (RoPE's cos/sin at
// `($i + 32*$o) / 512`) becomes invariant in the inner loop instead of a gather.
using Extents = std::map<std::string, Expression, std::less<>>;
std::optional<Expression> fold_block_division(ExprKind kind, const Expression& a, const Expression& n,
                                              const Extents& extents) {
  // n = c * d1 * d2 ...: a positive constant times dims (sizes, never negative), so that a
  // W that divides c divides n, and n / W stays a non-negative divisor (a dim-sized view:
  // the flat index of a [heads, seq, 16] output divides by seq * 16).
  int64_t c = 1;
  if (const auto nc = n.as_constant()) c = *nc;
  else if (n.kind() == ExprKind::Mul) {
    for (const auto& f : n.children()) {
      if (const auto fc = f.as_constant()) c *= *fc;
      else if (f.kind() != ExprKind::Var || is_loop_or_value_var(f.var_name())) return std::nullopt;
    }
  } else return std::nullopt;
  if (c <= 0) return std::nullopt;
  for (const auto& [name, extent] : extents) {
    const auto w = extent.as_constant();
    if (!w || *w <= 1 || c % *w != 0 || !a.depends_on(name)) continue;
    const Expression var = Expression::var(name), rest = a - var;
    if (rest.depends_on(name)) continue;  // not a plain + $r
    const Expression x = rest / *w;
    if (!(x * *w == rest)) continue;      // not a multiple of W
    const Expression m = n / *w;
    if (!(m * *w == n)) continue;
    if (kind == ExprKind::Div) return x / m;
    return x % m * *w + var;
  }
  return std::nullopt;
}
Expression within_extents(const Expression& e, const Extents& extents) {
  const auto kids = e.children();
  if (kids.empty()) return e;
  if ((e.kind() == ExprKind::Mod || e.kind() == ExprKind::Div) && kids[0].kind() == ExprKind::Var) {
    auto it = extents.find(kids[0].var_name());
    if (it != extents.end() && it->second == kids[1]) return e.kind() == ExprKind::Mod ? kids[0] : Expression(0);
  }
  if (e.kind() == ExprKind::Mod || e.kind() == ExprKind::Div)
    if (auto folded = fold_block_division(e.kind(), kids[0], kids[1], extents)) return within_extents(*folded, extents);
  std::vector<Expression> rebuilt;
  bool changed = false;
  for (const auto& kid : kids) {
    rebuilt.push_back(within_extents(kid, extents));
    changed |= !(rebuilt.back() == kid);
  }
  if (!changed) return e;
  // Folding the operands can expose a fold here: `((v/32)*16 + v%32) / n` with v = 8q + k
  // becomes `(q/4)*16 + (q%4)*8 + k`, a multiple of 8 plus k.
  const Expression folded = Expression::raw(e.kind(), rebuilt).simplify();
  if ((folded.kind() == ExprKind::Mod || folded.kind() == ExprKind::Div) && !(folded == e)) {
    const auto parts = folded.children();
    if (auto again = fold_block_division(folded.kind(), parts[0], parts[1], extents)) return within_extents(*again, extents);
  }
  return folded;
}
void fold_loop_extents(std::vector<Stmt>& stmts, const Extents& extents) {
  for (auto& s : stmts) {
    for (Expression* x : {&s.index, &s.guard, &s.position, &s.axis_base, &s.axis_stride, &s.axis_size})
      *x = within_extents(*x, extents);
    if (s.kind == StmtKind::Reduce) {
      Extents inner = extents;
      inner["$r" + std::to_string(s.loop)] = s.index;
      fold_loop_extents(s.body, inner);
    }
  }
}

// Divisions in a loop's index arithmetic that depend only on the row and the dims (the
// causal mask's `row % s` inside the loops over keys) are computed once per row, by Index
// statements at the start of the row: GCC left them in the vector loops, where a 64-bit
// division by a run-time value runs one lane at a time (decode's masked softmax: 17 us
// per call with them inside, 1.8 us hoisted).
class RowInvariantDivisions {
 public:
  RowInvariantDivisions(Phase& p, int next_value) : p_(p), next_(next_value) {}
  void run() {
    for (auto& s : p_.row_body)
      if (s.kind == StmtKind::Reduce) in_loop(s.body);
    in_loop(p_.col_body);
    p_.row_body.insert(p_.row_body.begin(), hoisted_.begin(), hoisted_.end());
  }

 private:
  void in_loop(std::vector<Stmt>& stmts) {
    for (auto& s : stmts) {
      for (Expression* x : {&s.index, &s.guard, &s.position, &s.axis_base, &s.axis_stride, &s.axis_size})
        if (s.kind != StmtKind::Reduce || x != &s.index) *x = rewrite(*x);
      if (s.kind == StmtKind::Reduce) in_loop(s.body);
    }
  }
  static bool row_invariant(const Expression& e) {
    for (const auto& v : e.variables())
      if (is_loop_or_value_var(v) && v != kRowVar) return false;
    return true;
  }
  Expression rewrite(const Expression& e) {
    const auto kids = e.children();
    if (kids.empty()) return e;
    const ExprKind k = e.kind();
    if ((k == ExprKind::Div || k == ExprKind::Mod || k == ExprKind::CeilDiv) && !e.variables().empty() &&
        row_invariant(e)) {
      auto [it, fresh] = names_.try_emplace(e, 0);
      if (fresh) {
        Stmt st;
        st.kind = StmtKind::Index;
        st.value = next_++;
        st.dtype = DType::I64;
        st.index = e;
        hoisted_.push_back(st);
        it->second = st.value;
      }
      return Expression::var(value_var(it->second));
    }
    std::vector<Expression> rebuilt;
    bool changed = false;
    for (const auto& kid : kids) {
      rebuilt.push_back(rewrite(kid));
      changed |= !(rebuilt.back() == kid);
    }
    return changed ? Expression::raw(k, rebuilt).simplify() : e;
  }

  Phase& p_;
  int next_;
  std::vector<Stmt> hoisted_;
  std::map<Expression, int> names_;
};

int max_value(const std::vector<Stmt>& stmts) {
  int m = -1;
  for (const auto& s : stmts) m = std::max({m, s.value, max_value(s.body)});
  return m;
}

std::optional<Kernel> lower_unfolded(const Region& region);

}  // namespace

Expression fold_loop_extent(const Expression& e, const std::string& var, const Expression& extent) {
  return within_extents(e, Extents{{var, extent}});
}

std::optional<Kernel> lower(const Region& region) {
  auto k = lower_unfolded(region);
  if (!k) return k;
  for (auto& p : k->phases) {
    const Extents row_scope = {{std::string(kRowVar), p.rows}};
    Extents col_scope = row_scope;
    col_scope[std::string(kColVar)] = p.cols;
    fold_loop_extents(p.row_body, row_scope);
    fold_loop_extents(p.col_body, col_scope);
  }
  // (An elementwise kernel's row is its vector loop: nothing there is row-invariant.)
  if (k->geometry != Geometry::Elementwise) {
    int next = 0;
    for (const auto& p : k->phases) next = std::max({next, max_value(p.row_body) + 1, max_value(p.col_body) + 1});
    for (auto& p : k->phases) {
      RowInvariantDivisions h(p, next);
      h.run();
      next = std::max(next, max_value(p.row_body) + 1);
    }
  }
  return k;
}

namespace {
std::optional<Kernel> lower_unfolded(const Region& region) {
  const Graph& g = region.graph;
  auto outs = g.outputs();
  LUMINAL_CHECK(outs.size() == 1, "lower: a region has exactly one Output node, found ", outs.size());
  const NodeId out = outs[0];
  const Node& o = g.node(out);
  Kernel k;
  for (NodeId i : g.inputs()) k.inputs.push_back(g.node(i).dtype);
  k.output = o.dtype;
  k.output_numel = product(o.shape);
  k.dim_names = region_dims(g);
  for (const auto& n : g.nodes())
    if (n.op == OpKind::CustomOp) return std::nullopt;

  // Sample dim values for the numeric placement checks.
  std::vector<DimMap> samples(2);
  for (const auto& name : k.dim_names) {
    samples[0][name] = 5;
    samples[1][name] = 11;
  }

  const Node& result = g.node(o.inputs[0].node);
  size_t scatters = std::count_if(g.nodes().begin(), g.nodes().end(), [](const Node& n) { return n.op == OpKind::Scatter; });
  if (scatters > 0) {
    bool reduces = std::any_of(g.nodes().begin(), g.nodes().end(), [](const Node& n) { return op_category(n.op) == OpCategory::Reduce; });
    if (scatters > 1 || reduces || result.op != OpKind::Scatter || !o.inputs[0].view.is_contiguous() ||
        o.inputs[0].view.shape() != result.shape)
      return std::nullopt;
    try {
      Lowerer l(g, 1, 1, samples);
      k.phases = l.lower_scatter(o.inputs[0].node);
      k.bound_sites = l.sites();
    } catch (const Refuse&) {
      return std::nullopt;
    }
    k.geometry = Geometry::SingleBlock;
    k.extent = 1;
    k.grid_x = 1;
    k.block_x = 256;
    return k;
  }

  // Split the output into rows x cols, most rows first.
  const size_t rank = o.shape.size();
  for (size_t j = 0; j <= rank; ++j) {
    Expression rows = product(std::span(o.shape).first(rank - j));
    Expression cols = product(std::span(o.shape).subspan(rank - j));
    try {
      Lowerer l(g, rows, cols, samples);
      k.phases = {l.lower_output(out)};
      k.bound_sites = l.sites();
    } catch (const Refuse&) {
      continue;
    }
    const Phase& p = k.phases[0];
    k.extent = rows;
    if (!contains_reduce(p.row_body) && cols == Expression(1)) {
      k.geometry = Geometry::Elementwise;
      k.block_x = 256;
      k.grid_x = ceil_div(rows, k.block_x);
      // Blocks of the last dim when it is static, at least a vector wide and not the whole.
      const auto w = rank >= 2 ? o.shape[rank - 1].as_constant() : std::nullopt;
      if (w && *w >= 16 && !(rows == Expression(*w))) k.row_block = *w;
    } else if (longest_row_loop(p, cols) >= kBlockRowMin) {
      // A long row (a norm over the hidden size) gets a block: one warp walking a decode
      // step's 4096 elements alone took 23-39 us on the H200 (its loads wait in a chain).
      // Threads enough for a few elements each, so that a row's loads are in flight at
      // once: a decode step's RMSNorm over 4096 took 8 us with 256 threads (four dependent
      // rounds of loads per pass), where its bytes take well under one.
      k.geometry = Geometry::BlockPerRow;
      const int64_t longest = longest_row_loop(p, cols);
      k.block_x = longest >= 4096 ? 1024 : longest >= 2048 ? 512 : 256;
      k.row_extent = row_loop_extent(p, cols);
      k.grid_x = rows;
    } else {
      k.geometry = Geometry::WarpPerRow;
      k.block_x = 256;
      k.grid_x = ceil_div(rows, k.block_x / 32);
    }
    return k;
  }
  return std::nullopt;
}
}  // namespace

// ---- printer ----
namespace {

std::string_view kind_name(StmtKind k) {
  switch (k) {
    case StmtKind::Load: return "load";
    case StmtKind::Constant: return "const";
    case StmtKind::Index: return "index";
    case StmtKind::Alu: return "alu";
    case StmtKind::Cast: return "cast";
    case StmtKind::Select: return "select";
    case StmtKind::Bound: return "bound";
    case StmtKind::Reduce: return "reduce";
    case StmtKind::Store: return "store";
    case StmtKind::Stash: return "stash";
    case StmtKind::Unstash: return "unstash";
  }
  return "?";
}

void print(std::ostringstream& os, const std::vector<Stmt>& stmts, int indent) {
  for (const auto& s : stmts) {
    os << std::string(static_cast<size_t>(indent), ' ');
    if (s.kind == StmtKind::Stash) {
      os << "stash scratch" << s.buffer << "[" << s.index.to_string() << "] = v" << s.args[0] << "\n";
      continue;
    }
    if (s.kind == StmtKind::Store) {
      os << "store buf" << s.buffer << "[" << s.index.to_string() << "] = v" << s.args[0] << "  ; " << dtype_name(s.dtype)
         << "\n";
      continue;
    }
    os << "v" << s.value << ": " << dtype_name(s.dtype) << " = " << kind_name(s.kind);
    switch (s.kind) {
      case StmtKind::Load: os << " buf" << s.buffer << "[" << s.index.to_string() << "]"; break;
      case StmtKind::Unstash: os << " scratch" << s.buffer << "[" << s.index.to_string() << "]"; break;
      case StmtKind::Constant: os << " " << s.constant; break;
      case StmtKind::Index: os << " " << s.index.to_string(); break;
      case StmtKind::Select:
        if (s.args.size() == 3) os << " v" << s.args[0] << " ? v" << s.args[1] << " : v" << s.args[2];
        else os << " " << s.index.to_string() << " ? v" << s.args[0] << " : 0";
        break;
      case StmtKind::Bound:
        os << " v" << s.args[0] << " in [0, " << s.index.to_string() << ")";
        if (!(s.axis_size == Expression(0)))
          os << " and on axis (v - " << s.axis_base.to_string() << ") / " << s.axis_stride.to_string() << " in [0, "
             << s.axis_size.to_string() << ")";
        os << " else error " << s.constant << " at " << s.position.to_string();
        break;
      case StmtKind::Reduce: os << " " << op_name(s.op) << " r" << s.loop << " < " << s.index.to_string() << " of v" << s.args[0]; break;
      default:
        if (s.kind == StmtKind::Alu) os << " " << op_name(s.op);
        for (int a : s.args) os << " v" << a;
    }
    if (s.guard != Expression(1) && s.kind != StmtKind::Cast) os << " if " << s.guard.to_string();
    os << "\n";
    if (s.kind == StmtKind::Reduce) print(os, s.body, indent + 2);
  }
}

std::string_view geometry_name(Geometry g) {
  switch (g) {
    case Geometry::Elementwise: return "elementwise";
    case Geometry::WarpPerRow: return "warp-per-row";
    case Geometry::BlockPerRow: return "block-per-row";
    case Geometry::SingleBlock: return "single-block";
  }
  return "?";
}

}  // namespace

std::string to_string(const Kernel& k) {
  std::ostringstream os;
  os << "kernel(";
  for (size_t i = 0; i < k.inputs.size(); ++i) os << (i ? ", " : "") << "buf" << i << ": " << dtype_name(k.inputs[i]);
  os << ") -> buf" << k.output_slot() << ": " << dtype_name(k.output) << "[" << k.output_numel.to_string() << "]";
  os << " dims=[";
  for (size_t i = 0; i < k.dim_names.size(); ++i) os << (i ? ", " : "") << k.dim_names[i];
  os << "] " << geometry_name(k.geometry) << " extent=" << k.extent.to_string() << " grid=" << k.grid_x.to_string()
     << "x" << k.block_x << "\n";
  for (size_t p = 0; p < k.phases.size(); ++p) {
    const Phase& ph = k.phases[p];
    os << "phase " << p << ": rows=" << ph.rows.to_string() << " cols=" << ph.cols.to_string() << "\n";
    os << "  per row:\n";
    print(os, ph.row_body, 4);
    os << "  per col:\n";
    print(os, ph.col_body, 4);
  }
  return os.str();
}

}  // namespace luminal::kernel

namespace luminal::kernel {

std::string describe_error(const Kernel& kernel, std::span<const int32_t> record, const DimMap& dims,
                           std::string_view user_op) {
  LUMINAL_ASSERT(record.size() >= static_cast<size_t>(kErrorWords), "error record too short");
  auto word64 = [&](size_t at) {
    return static_cast<int64_t>(static_cast<uint64_t>(static_cast<uint32_t>(record[at])) |
                                (static_cast<uint64_t>(static_cast<uint32_t>(record[at + 1])) << 32));
  };
  const auto code = static_cast<KernelError>(record[0]);
  if (code == KernelError::IntegerModByZero)
    return std::string(user_op.empty() ? "Mod" : user_op) + ": integer division by zero";
  const int site = record[1];
  if ((code != KernelError::GatherOutOfRange && code != KernelError::ScatterOutOfRange) || site < 0 ||
      static_cast<size_t>(site) >= kernel.bound_sites.size())
    return "kernel error code " + std::to_string(record[0]);
  const BoundSite& b = kernel.bound_sites[static_cast<size_t>(site)];
  // The user's op when it is an indexing op; otherwise the primitive's own name.
  std::string who(user_op);
  if (who != "gather" && who != "scatter" && who != "index_select" && who != "embedding")
    who = code == KernelError::GatherOutOfRange ? "gather" : "scatter";
  const int64_t target = word64(2), position = word64(4);
  std::vector<int64_t> sizes, positions;
  for (const auto& e : b.sizes) sizes.push_back(e.eval(dims));
  for (const auto& e : b.positions) positions.push_back(e.eval(dims));
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  if (b.axis >= 0 && static_cast<size_t>(b.axis) < sizes.size() && positions.size() == sizes.size()) {
    const auto axis = static_cast<size_t>(b.axis);
    std::vector<int64_t> pos(positions.size());
    int64_t rest = position;
    for (size_t d = positions.size(); d-- > 0;) {
      pos[d] = positions[d] > 0 ? rest % positions[d] : 0;
      rest = positions[d] > 0 ? rest / positions[d] : 0;
    }
    int64_t stride = 1, base = 0, axis_stride = 1;
    for (size_t d = sizes.size(); d-- > 0;) {
      if (d == axis) axis_stride = stride;
      else base += pos[d] * stride;
      stride *= sizes[d];
    }
    const int64_t i = (target - base) / axis_stride;
    if ((target - base) % axis_stride == 0 && (i < 0 || i >= sizes[axis])) {
      // index_select and embedding take a 1-D index: its position is the coordinate along the axis.
      std::string at;
      if (who == "index_select" || who == "embedding") {
        at = std::to_string(pos[axis]);
      } else {
        at = "[";
        for (size_t d = 0; d < pos.size(); ++d) at += (d ? ", " : "") + std::to_string(pos[d]);
        at += "]";
      }
      return who + ": index " + std::to_string(i) + " is out of range for dimension " + std::to_string(b.axis) +
             " of size " + std::to_string(sizes[axis]) + " (at position " + at + " of the index)";
    }
  }
  return who + ": internal index " + std::to_string(target) + " out of range [0, " + std::to_string(numel) + ")";
}

}  // namespace luminal::kernel
