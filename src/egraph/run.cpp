// Rules at run time: validation and join planning (add_rule), semi-naive matching
// (Matcher), actions, and schedule execution with budgets and backoff (run).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "luminal/egraph/egraph.hpp"
#include "luminal/error.hpp"

namespace luminal::egraph {

// ---------------------------------------------------------------- builtin primitives

void register_builtin_primitives(EGraph& g) {
  using Args = std::span<const Value>;
  auto numeric = [](const Value& v) {
    return v.kind() == ValueKind::I64 || v.kind() == ValueKind::F64;
  };
  auto as_double = [](const Value& v) {
    return v.kind() == ValueKind::I64 ? static_cast<double>(v.as_i64()) : v.as_f64();
  };
  // Binary arithmetic: i64 op i64 -> i64, anything with an f64 -> f64.
  auto arith = [&](const char* name, auto int_op, auto float_op) {
    g.register_primitive(name, [=](Args a) -> std::optional<Value> {
      if (a.size() != 2 || !numeric(a[0]) || !numeric(a[1])) return std::nullopt;
      if (a[0].kind() == ValueKind::I64 && a[1].kind() == ValueKind::I64)
        return int_op(a[0].as_i64(), a[1].as_i64());
      return float_op(as_double(a[0]), as_double(a[1]));
    });
  };
  using OptV = std::optional<Value>;
  arith("+", [](int64_t x, int64_t y) -> OptV { return Value::i64(x + y); },
        [](double x, double y) -> OptV { return Value::f64(x + y); });
  arith("-", [](int64_t x, int64_t y) -> OptV { return Value::i64(x - y); },
        [](double x, double y) -> OptV { return Value::f64(x - y); });
  arith("*", [](int64_t x, int64_t y) -> OptV { return Value::i64(x * y); },
        [](double x, double y) -> OptV { return Value::f64(x * y); });
  // Floor division and modulo, as luminal::Expression (the result of % has y's sign).
  arith("/", [](int64_t x, int64_t y) -> OptV {
          if (y == 0) return std::nullopt;
          int64_t q = x / y;
          return Value::i64((x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q);
        },
        [](double x, double y) -> OptV { return y == 0 ? OptV() : Value::f64(x / y); });
  arith("%", [](int64_t x, int64_t y) -> OptV {
          if (y == 0) return std::nullopt;
          int64_t r = x % y;
          return Value::i64((r != 0 && ((r < 0) != (y < 0))) ? r + y : r);
        },
        [](double x, double y) -> OptV { return y == 0 ? OptV() : Value::f64(std::fmod(x, y)); });
  arith("min", [](int64_t x, int64_t y) -> OptV { return Value::i64(std::min(x, y)); },
        [](double x, double y) -> OptV { return Value::f64(std::min(x, y)); });
  arith("max", [](int64_t x, int64_t y) -> OptV { return Value::i64(std::max(x, y)); },
        [](double x, double y) -> OptV { return Value::f64(std::max(x, y)); });

  auto compare = [&](const char* name, auto cmp) {
    g.register_primitive(name, [=](Args a) -> std::optional<Value> {
      if (a.size() != 2) return std::nullopt;
      if (numeric(a[0]) && numeric(a[1])) {
        if (a[0].kind() == ValueKind::I64 && a[1].kind() == ValueKind::I64)
          return Value::boolean(cmp(a[0].as_i64(), a[1].as_i64()));
        return Value::boolean(cmp(as_double(a[0]), as_double(a[1])));
      }
      if (a[0].kind() == ValueKind::String && a[1].kind() == ValueKind::String)
        return Value::boolean(cmp(a[0].as_string(), a[1].as_string()));
      return std::nullopt;
    });
  };
  compare("<", [](const auto& x, const auto& y) { return x < y; });
  compare(">", [](const auto& x, const auto& y) { return x > y; });
  compare("<=", [](const auto& x, const auto& y) { return x <= y; });
  compare(">=", [](const auto& x, const auto& y) { return x >= y; });
  // Equality is identity of values, except that a constant Expression equals the i64
  // with its value, so `(= (expr-coeff ?s "z") 1)` reads naturally.
  auto same = [](const Value& x, const Value& y) {
    if (x.kind() == ValueKind::Expr && y.kind() == ValueKind::I64) return x.as_expr().as_constant() == y.as_i64();
    if (x.kind() == ValueKind::I64 && y.kind() == ValueKind::Expr) return y.as_expr().as_constant() == x.as_i64();
    return x == y;
  };
  g.register_primitive("=", [=](Args a) -> std::optional<Value> {
    if (a.size() != 2) return std::nullopt;
    return Value::boolean(same(a[0], a[1]));
  });
  g.register_primitive("!=", [=](Args a) -> std::optional<Value> {
    if (a.size() != 2) return std::nullopt;
    return Value::boolean(!same(a[0], a[1]));
  });
  g.register_primitive("and", [](Args a) -> std::optional<Value> {
    bool r = true;
    for (const Value& v : a) {
      if (v.kind() != ValueKind::Bool) return std::nullopt;
      r = r && v.as_bool();
    }
    return Value::boolean(r);
  });
  g.register_primitive("or", [](Args a) -> std::optional<Value> {
    bool r = false;
    for (const Value& v : a) {
      if (v.kind() != ValueKind::Bool) return std::nullopt;
      r = r || v.as_bool();
    }
    return Value::boolean(r);
  });
  g.register_primitive("not", [](Args a) -> std::optional<Value> {
    if (a.size() != 1 || a[0].kind() != ValueKind::Bool) return std::nullopt;
    return Value::boolean(!a[0].as_bool());
  });
  g.register_primitive("neg", [](Args a) -> std::optional<Value> {
    if (a.size() != 1) return std::nullopt;
    if (a[0].kind() == ValueKind::I64) return Value::i64(-a[0].as_i64());
    if (a[0].kind() == ValueKind::F64) return Value::f64(-a[0].as_f64());
    return std::nullopt;
  });
  g.register_primitive("to-f64", [=](Args a) -> std::optional<Value> {
    if (a.size() != 1 || !numeric(a[0])) return std::nullopt;
    return Value::f64(as_double(a[0]));
  });
  g.register_primitive("to-i64", [=](Args a) -> std::optional<Value> {
    if (a.size() != 1 || !numeric(a[0])) return std::nullopt;
    return Value::i64(static_cast<int64_t>(as_double(a[0])));
  });
}

// ---------------------------------------------------------------- validation and planning

static void term_vars(const Rule& r, uint32_t t, std::vector<int>& out) {
  const RuleTerm& term = r.terms[t];
  if (term.kind == RuleTerm::Kind::Var) out.push_back(term.var);
  for (uint32_t a : term.args) term_vars(r, a, out);
}

// Plan for seed atom `seed`: scan the seed's table first, then repeatedly take the
// remaining atom reachable through the most selective index (its class bound, a
// child bound, all function inputs bound), ties to the smallest table (sizes[a], the
// current row count) then the lowest atom index; each guard
// runs as soon as its variables are bound. Atoms before the seed only see rows older
// than the last search, the seed only newer rows: every new match is found exactly once.
static std::vector<PlanStep> plan_for_seed(const EGraph& g, const Rule& r, size_t seed,
                                           const std::vector<size_t>& sizes) {
  std::vector<PlanStep> steps;
  std::vector<bool> bound(r.vars.size(), false), atom_done(r.atoms.size(), false),
      guard_done(r.guards.size(), false);
  auto place_guards = [&] {
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t gi = 0; gi < r.guards.size(); ++gi) {
        if (guard_done[gi]) continue;
        std::vector<int> deps;
        term_vars(r, r.guards[gi].term, deps);
        if (!std::all_of(deps.begin(), deps.end(), [&](int v) { return bound[v]; })) continue;
        PlanStep st;
        st.kind = PlanStep::Kind::Guard;
        st.index = static_cast<uint32_t>(gi);
        int b = r.guards[gi].bind;
        st.bind = {static_cast<uint8_t>(b >= 0 && !bound[b])};
        if (b >= 0) bound[b] = true;
        steps.push_back(st);
        guard_done[gi] = progress = true;
      }
    }
  };
  auto add_atom = [&](size_t a, PlanStep::Kind kind, int key) {
    PlanStep st;
    st.kind = kind;
    st.index = static_cast<uint32_t>(a);
    st.key = key;
    st.filter = a < seed ? -1 : a == seed ? 1 : 0;
    const Atom& atom = r.atoms[a];
    for (int v : atom.vars) {
      st.bind.push_back(v >= 0 && !bound[v]);
      if (v >= 0) bound[v] = true;
    }
    if (!atom.is_function) {
      for (size_t slot = 0; slot < atom.vars.size(); ++slot) {
        if ((slot == 0 && kind == PlanStep::Kind::ByClass) || static_cast<int>(slot) == key) continue;
        SlotOp op;
        if (slot > 0) {
          op.source = g.arg_is_payload(atom.id, slot - 1) ? SlotOp::Source::Payload : SlotOp::Source::Child;
          op.index = g.op(atom.id).slot[slot - 1];
        }
        op.var = atom.vars[slot];
        if (op.var < 0) op.mode = SlotOp::Mode::Literal, op.lit = atom.lits[slot];
        else op.mode = st.bind[slot] ? SlotOp::Mode::Bind : SlotOp::Mode::Check;
        st.slots.push_back(op);
      }
    }
    steps.push_back(std::move(st));
    atom_done[a] = true;
    place_guards();
  };
  place_guards();
  if (r.atoms.empty()) return steps;
  add_atom(seed, PlanStep::Kind::Scan, -1);
  for (size_t k = 1; k < r.atoms.size(); ++k) {
    int best = -1, best_score = -1, best_key = -1;
    size_t best_size = SIZE_MAX;
    PlanStep::Kind best_kind = PlanStep::Kind::Scan;
    for (size_t a = 0; a < r.atoms.size(); ++a) {
      if (atom_done[a]) continue;
      const Atom& atom = r.atoms[a];
      int score = 0, key = -1;
      PlanStep::Kind kind = PlanStep::Kind::Scan;
      auto is_bound = [&](size_t slot) { return atom.vars[slot] < 0 || bound[atom.vars[slot]]; };
      if (atom.is_function) {
        bool all = true;
        for (size_t s = 1; s < atom.vars.size(); ++s) all = all && is_bound(s);
        if (all) score = 3, kind = PlanStep::Kind::Lookup;
      } else if (atom.vars[0] >= 0 && bound[atom.vars[0]]) {
        score = 3, kind = PlanStep::Kind::ByClass;
      } else {
        for (size_t s = 1; s < atom.vars.size(); ++s)
          if (!g.arg_is_payload(atom.id, s - 1) && atom.vars[s] >= 0 && bound[atom.vars[s]]) {
            score = 2, kind = PlanStep::Kind::ByChild, key = static_cast<int>(s);
            break;
          }
      }
      if (score > best_score || (score == best_score && sizes[a] < best_size)) {
        best = static_cast<int>(a), best_score = score, best_kind = kind, best_key = key;
        best_size = sizes[a];
      }
    }
    add_atom(static_cast<size_t>(best), best_kind, best_key);
  }
  return steps;
}

void EGraph::add_rule(Rule rule) {
  auto fail_here = [&](const auto&... msg) {
    fail(rule.loc.to_string(), ": rule \"", rule.name, "\": ", msg...);
  };
  if (!has_ruleset(rule.ruleset)) fail_here("unknown ruleset '", rule.ruleset, "'");
  for (const Atom& a : rule.atoms) {
    size_t arity = a.is_function ? funcs_.at(a.id).info.args.size() : ops_.at(a.id).args.size();
    if (a.vars.size() != arity + 1 || a.lits.size() != arity + 1) fail_here("malformed atom");
  }
  // Every variable a guard or an action reads must be bound by the query (or a let).
  std::vector<bool> bound(rule.vars.size(), false);
  for (const Atom& a : rule.atoms)
    for (int v : a.vars)
      if (v >= 0) bound[v] = true;
  for (const Guard& gd : rule.guards)
    if (gd.bind >= 0) bound[gd.bind] = true;
  for (const Guard& gd : rule.guards) {
    std::vector<int> deps;
    term_vars(rule, gd.term, deps);
    for (int v : deps)
      if (!bound[v]) fail_here("variable ", rule.vars[v].name, " is used in a guard but not bound by the rule's patterns");
  }
  for (const Action& act : rule.actions) {
    std::vector<int> deps;
    term_vars(rule, act.a, deps);
    if (act.kind == Action::Kind::Union || act.kind == Action::Kind::Set) term_vars(rule, act.b, deps);
    for (int v : deps)
      if (!bound[v]) fail_here("variable ", rule.vars[v].name, " is used in an action but not bound by the rule's patterns");
    if (act.kind == Action::Kind::Let) bound[act.var] = true;
  }
  RuleState state;
  {
    std::vector<int> used;
    for (const Action& act : rule.actions) {
      term_vars(rule, act.a, used);
      if (act.kind == Action::Kind::Union || act.kind == Action::Kind::Set) term_vars(rule, act.b, used);
    }
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    for (int v : used) {
      bool is_let = std::any_of(rule.actions.begin(), rule.actions.end(), [&](const Action& a) {
        return a.kind == Action::Kind::Let && a.var == v;
      });
      if (!is_let) {
        state.keep.push_back(v);
        SortId sort = rule.vars[v].sort;
        state.keep_is_class.push_back(sort != kInvalid && sorts_[sort].kind == ValueKind::Class);
      }
    }
  }
  for (const Guard& gd : rule.guards) compile_term(rule, gd.term, state.guards.emplace_back());
  for (const Action& act : rule.actions) {
    CompiledAction& c = state.actions.emplace_back();
    c.kind = act.kind;
    c.var = act.var;
    const RuleTerm& target = rule.terms[act.a];
    if (act.kind == Action::Kind::Set || act.kind == Action::Kind::Subsume || act.kind == Action::Kind::Delete) {
      c.target = target.id;
      c.target_is_function = target.kind == RuleTerm::Kind::Function;
      for (uint32_t arg : target.args) compile_term(rule, arg, c.a);  // the target's arguments
    } else {
      compile_term(rule, act.a, c.a);
    }
    if (act.kind == Action::Kind::Union || act.kind == Action::Kind::Set) compile_term(rule, act.b, c.b);
  }
  state.class_program = compile_class_program(rule, state);
  std::vector<size_t> sizes(rule.atoms.size(), 0);
  for (size_t s = 0; s < std::max<size_t>(rule.atoms.size(), 1); ++s)
    state.plans.push_back(plan_for_seed(*this, rule, s, sizes));
  // A guard whose variables no atom binds cannot be placed (e.g. a cycle of binds).
  size_t guards_placed = 0;
  for (const PlanStep& st : state.plans[0]) guards_placed += st.kind == PlanStep::Kind::Guard;
  if (guards_placed != rule.guards.size()) fail_here("a guard's variables are never bound");
  rules_.push_back(std::move(rule));
  rule_state_.push_back(std::move(state));
}

// ---------------------------------------------------------------- matching

class Matcher {
 public:
  Matcher(EGraph& g, const Rule& rule, const std::vector<PlanStep>& plan, bool full,
          uint32_t since, size_t limit, const EGraph::RuleState& state, EGraph::MatchBuffer& out)
      : g_(g), rule_(rule), plan_(plan.data()), steps_(plan.size()), full_(full), since_(since),
        limit_(limit), state_(state), out_(out), env_(rule.vars.size()) {
    for (uint8_t c : state.keep_is_class) width_ += c ? 1 : 3;
    all_classes_ = width_ == state.keep.size();
  }

  size_t run() {
    next(0);
    return count_;
  }

  // Slices the seed scan (plan step 0) through `cursor`: stop after the seed row that
  // brings the matches to `want`.
  void slice(EGraph::SearchCursor* cursor, size_t want) { cursor_ = cursor, want_ = want; }
  bool stopped_early() const { return stopped_early_; }

 private:
  // Semi-naive stamp window of a step: rows with stamp in [lo, lo + span).
  struct Window {
    uint32_t lo, span;
    bool holds(uint32_t stamp) const { return stamp - lo < span; }
  };
  Window window(int8_t filter) const {
    if (full_ || filter == 0) return {0, UINT32_MAX};
    return filter > 0 ? Window{since_, UINT32_MAX - since_} : Window{0, since_};
  }

  [[gnu::always_inline]] void emit() {
    uint32_t* w = out_.append(width_);
    const int* keep = state_.keep.data();
    if (all_classes_) {  // the common case: one word per kept variable
      for (size_t k = 0; k < width_; ++k) w[k] = env_[keep[k]].as_class();
      return;
    }
    const uint8_t* is_class = state_.keep_is_class.data();
    for (size_t k = 0, n = state_.keep.size(); k < n; ++k) {
      const Value& v = env_[keep[k]];
      if (is_class[k]) {
        *w++ = v.as_class();
      } else {
        *w++ = static_cast<uint32_t>(v.kind());
        *w++ = static_cast<uint32_t>(v.bits());
        *w++ = static_cast<uint32_t>(v.bits() >> 32);
      }
    }
  }

  // Step i, or the match is complete. Inlined into the loops of the last atom step,
  // so a match is emitted without a call.
  [[gnu::always_inline]] bool next(size_t i) {
    if (i != steps_) return step(i);
    if (++count_ > limit_) return false;
    emit();
    return true;
  }

  // The seed rows of this join: those present when it started.
  size_t begin_slice(size_t rows) {
    if (cursor_->end == SIZE_MAX) cursor_->end = rows;
    return std::min(cursor_->end, rows);
  }
  bool end_slice(size_t next_row) {
    cursor_->row = next_row;
    stopped_early_ = true;
    return false;
  }

  // Nodes of a class or parent list are scattered in memory: fetch a few ahead.
  static constexpr ptrdiff_t kPrefetch = 12;

  // Returns false once the match limit is exceeded (the search is abandoned).
  bool step(size_t i) {
    const PlanStep& st = plan_[i];
    switch (st.kind) {
      case PlanStep::Kind::Guard: {
        const Guard& gd = rule_.guards[st.index];
        const EGraph::Code& code = state_.guards[st.index];
        if (stack_.size() < code.size()) stack_.resize(code.size());
        if (!g_.exec(code, env_.data(), false, stack_.data())) return true;
        Value v = stack_[0];
        if (gd.bind < 0) return v.kind() == ValueKind::Bool && v.as_bool() ? next(i + 1) : true;
        if (st.bind[0]) {
          env_[gd.bind] = v;
          return next(i + 1);
        }
        return env_[gd.bind] == v ? next(i + 1) : true;
      }
      case PlanStep::Kind::Lookup: {
        const Atom& atom = rule_.atoms[st.index];
        std::vector<Value> key(atom.vars.size() - 1);
        for (size_t s = 1; s < atom.vars.size(); ++s)
          key[s - 1] = atom.vars[s] < 0 ? atom.lits[s] : env_[atom.vars[s]];
        uint32_t r = g_.function_row(atom.id, key);
        if (r == kInvalid) return true;
        return try_row(i, st, r);
      }
      case PlanStep::Kind::Scan: {
        const Atom& atom = rule_.atoms[st.index];
        bool sliced = cursor_ && i == 0;
        Window w = window(st.filter);
        if (atom.is_function) {
          const auto& rows = g_.funcs_[atom.id].rows;
          size_t end = sliced ? begin_slice(rows.size()) : rows.size();
          for (size_t r = sliced ? cursor_->row : 0; r < end; ++r) {
            if (rows[r].live && w.holds(rows[r].stamp) && !try_row(i, st, static_cast<uint32_t>(r))) return false;
            if (sliced && count_ >= want_) return end_slice(r + 1);
          }
          return true;
        }
        const auto& log = g_.op_log_[atom.id];
        size_t start = 0;
        if (!full_ && st.filter > 0)
          start = std::lower_bound(log.begin(), log.end(), std::make_pair(since_, NodeId(0))) - log.begin();
        size_t end = sliced ? begin_slice(log.size()) : log.size();
        const ENode* nodes = g_.nodes_.data();
        for (size_t k = sliced ? std::max(start, cursor_->row) : start; k < end; ++k) {
          auto [stamp, n] = log[k];
          const ENode& e = nodes[n];
          if (e.stamp != stamp || e.flags || !w.holds(stamp)) continue;
          if (!try_node(i, st, n)) return false;
          if (sliced && count_ >= want_) return end_slice(k + 1);
        }
        return true;
      }
      case PlanStep::Kind::ByClass: {
        const Atom& atom = rule_.atoms[st.index];
        ClassId c = env_[atom.vars[0]].as_class();
        auto [lo, hi] = g_.op_range(g_.classes_[c].nodes, atom.id);
        Window w = window(st.filter);
        const ENode* nodes = g_.nodes_.data();
        for (auto p = lo; p != hi; ++p) {
          if (hi - p > kPrefetch) __builtin_prefetch(&nodes[p[kPrefetch].node]);
          const ENode& e = nodes[p->node];
          if (e.flags || !w.holds(e.stamp)) continue;
          if (!try_node(i, st, p->node)) return false;
        }
        return true;
      }
      case PlanStep::Kind::ByChild: {
        const Atom& atom = rule_.atoms[st.index];
        ClassId c = env_[atom.vars[st.key]].as_class();
        uint32_t child = g_.ops_[atom.id].slot[st.key - 1];
        auto [lo, hi] = g_.op_range(g_.classes_[c].parents, atom.id);
        Window w = window(st.filter);
        const ENode* nodes = g_.nodes_.data();
        for (auto p = lo; p != hi; ++p) {
          if (hi - p > kPrefetch) __builtin_prefetch(&nodes[p[kPrefetch].node]);
          const ENode& e = nodes[p->node];
          if (e.flags || !w.holds(e.stamp) || g_.children_of(e)[child] != c) continue;
          if (!try_node(i, st, p->node)) return false;
        }
        return true;
      }
    }
    return true;
  }

  bool unify(const Atom& atom, const PlanStep& st, size_t slot, const Value& v) {
    int var = atom.vars[slot];
    if (var < 0) return atom.lits[slot] == v;
    if (st.bind[slot]) {
      env_[var] = v;
      return true;
    }
    return env_[var] == v;
  }

  [[gnu::always_inline]] bool try_node(size_t i, const PlanStep& st, NodeId n) {
    const ENode& e = g_.nodes_[n];
    const ClassId* ch = g_.children_of(e);
    const Value* pl = g_.payload_store_.data() + e.payloads;
    for (const SlotOp& s : st.slots) {
      Value v = s.source == SlotOp::Source::Class   ? Value::cls(e.cls)
                : s.source == SlotOp::Source::Child ? Value::cls(ch[s.index])
                                                    : pl[s.index];
      switch (s.mode) {
        case SlotOp::Mode::Bind: env_[s.var] = v; break;
        case SlotOp::Mode::Check:
          if (!(env_[s.var] == v)) return true;
          break;
        case SlotOp::Mode::Literal:
          if (!(s.lit == v)) return true;
          break;
      }
    }
    return next(i + 1);
  }

  bool try_row(size_t i, const PlanStep& st, uint32_t r) {
    const Atom& atom = rule_.atoms[st.index];
    const auto& t = g_.funcs_[atom.id];
    const auto& row = t.rows[r];
    if (!window(st.filter).holds(row.stamp)) return true;
    if (!unify(atom, st, 0, row.out)) return true;
    for (size_t s = 1; s < atom.vars.size(); ++s)
      if (!unify(atom, st, s, t.keys[row.key + s - 1])) return true;
    return next(i + 1);
  }

  EGraph& g_;
  const Rule& rule_;
  const PlanStep* plan_;
  size_t steps_;
  bool full_;
  uint32_t since_;
  size_t limit_;
  const EGraph::RuleState& state_;
  EGraph::MatchBuffer& out_;
  size_t width_ = 0;               // words per match
  bool all_classes_ = false;       // every kept variable is a class: one word each
  std::vector<Value> env_;
  std::vector<Value> stack_;       // guard evaluation
  size_t count_ = 0;
  EGraph::SearchCursor* cursor_ = nullptr;
  size_t want_ = SIZE_MAX;
  bool stopped_early_ = false;
};

void EGraph::MatchBuffer::reserve(size_t words) {
  if (words <= capacity) return;
  std::unique_ptr<uint32_t[]> bigger(new uint32_t[words]);  // uninitialised: only written words are read
  std::copy(data.get(), data.get() + size, bigger.get());
  data = std::move(bigger);
  capacity = words;
}

size_t EGraph::search_rule(uint32_t r, size_t limit, bool naive, MatchBuffer& matches,
                           SearchCursor* cursor, size_t want) {
  const Rule& rule = rules_[r];
  RuleState& state = rule_state_[r];
  SearchCursor whole;
  if (!cursor) cursor = &whole;
  auto finish = [&](size_t n) {
    cursor->done = true;
    return n;
  };
  if (rule.atoms.empty()) {  // a fact-free rule fires once
    if (state.since != 0) return finish(0);
    return finish(Matcher(*this, rule, state.plans[0], true, 0, limit, state, matches).run());
  }
  // Plans are re-made from the current table sizes (never frozen on empty tables).
  std::vector<size_t> sizes(rule.atoms.size());
  for (size_t a = 0; a < rule.atoms.size(); ++a) {
    const Atom& atom = rule.atoms[a];
    sizes[a] = atom.is_function ? funcs_[atom.id].rows.size() : op_live_[atom.id];
  }
  // First search (or naive): no old rows, one full join seeded at the smallest table.
  // Later: semi-naive, one join per seed atom.
  bool full = state.since == 0 || naive;
  size_t joins = full ? 1 : rule.atoms.size();
  size_t total = 0;
  for (; cursor->join < joins; ++cursor->join, cursor->row = 0, cursor->end = SIZE_MAX) {
    if (cursor != &whole && total >= want) return total;
    size_t seed = full ? std::min_element(sizes.begin(), sizes.end()) - sizes.begin() : cursor->join;
    if (sizes[seed] == 0) return finish(0);  // an empty table: no match at all
    state.plans[seed] = plan_for_seed(*this, rule, seed, sizes);
    Matcher m(*this, rule, state.plans[seed], full, state.since, limit - std::min(limit, total), state, matches);
    if (cursor != &whole) m.slice(cursor, want - std::min(want, total));
    total += m.run();
    if (m.stopped_early()) return total;
    if (total > limit) break;
  }
  return finish(total);
}

// ---------------------------------------------------------------- actions

void EGraph::compile_term(const Rule& rule, uint32_t t, Code& out) const {
  const RuleTerm& term = rule.terms[t];
  Instr in;
  switch (term.kind) {
    case RuleTerm::Kind::Var: in.op = Instr::Op::Var, in.var = term.var; break;
    case RuleTerm::Kind::Literal: in.op = Instr::Op::Lit, in.lit = term.literal; break;
    case RuleTerm::Kind::Primitive: in.op = Instr::Op::Prim; break;
    case RuleTerm::Kind::Constructor: in.op = Instr::Op::Cons; break;
    case RuleTerm::Kind::Function: in.op = Instr::Op::Func; break;
  }
  for (uint32_t a : term.args) compile_term(rule, a, out);
  LUMINAL_ASSERT(term.args.size() <= UINT8_MAX, "term with ", term.args.size(), " arguments");
  in.nargs = static_cast<uint8_t>(term.args.size());
  in.id = term.id;
  out.push_back(in);
}

Value* EGraph::exec(const Code& code, const Value* env, bool mutate, Value* sp) {
  for (const Instr& in : code) {
    if (in.op == Instr::Op::Var) {
      Value v = env[in.var];
      *sp++ = v.kind() == ValueKind::Class ? Value::cls(find(v.as_class())) : v;
      continue;
    }
    if (in.op == Instr::Op::Lit) {
      *sp++ = in.lit;
      continue;
    }
    Value* args = sp - in.nargs;
    sp = args + 1;
    if (in.op == Instr::Op::Cons) {
      std::optional<ClassId> c = construct(in.id, args, mutate);
      if (!c) return nullptr;
      *args = Value::cls(*c);
      continue;
    }
    std::span<const Value> span(args, in.nargs);
    std::optional<Value> r = in.op == Instr::Op::Prim ? prims_[in.id].second(span) : get_function(in.id, span);
    if (!r) return nullptr;
    *args = *r;
  }
  return sp;
}

std::optional<Value> EGraph::eval_term(const Rule& rule, uint32_t t, std::vector<Value>& env,
                                       bool mutate) {
  Code code;
  compile_term(rule, t, code);
  std::vector<Value> stack(code.size());
  if (!exec(code, env.data(), mutate, stack.data())) return std::nullopt;
  return stack[0];
}

// Runs one action with `stack` as scratch (room for its code); false aborts the
// remaining actions of this match (a primitive or a function lookup had no value).
bool EGraph::run_action(const CompiledAction& act, std::vector<Value>& env, Value* stack) {
  Value* top = exec(act.a, env.data(), true, stack);
  if (!top) return false;
  switch (act.kind) {
    case Action::Kind::Let: env[act.var] = stack[0]; return true;
    case Action::Kind::Build: return true;
    case Action::Kind::Union: {
      if (!exec(act.b, env.data(), true, top)) return false;
      if (stack[0].kind() == ValueKind::Class && top[0].kind() == ValueKind::Class)
        union_classes(stack[0].as_class(), top[0].as_class());
      return true;
    }
    case Action::Kind::Set: {
      if (!exec(act.b, env.data(), true, top)) return false;
      set_function(act.target, std::span<const Value>(stack, top), *top);
      return true;
    }
    case Action::Kind::Subsume:
    case Action::Kind::Delete: {
      std::span<const Value> args(stack, top);
      if (act.target_is_function) {
        remove_function(act.target, args);
        return true;
      }
      if (act.kind == Action::Kind::Subsume) add(act.target, args);
      if (std::optional<NodeId> n = lookup(act.target, args))
        act.kind == Action::Kind::Subsume ? subsume(*n) : remove(*n);
      return true;
    }
  }
  return true;
}

std::optional<EGraph::ClassProgram> EGraph::compile_class_program(const Rule& rule,
                                                                  const RuleState& state) const {
  if (std::find(state.keep_is_class.begin(), state.keep_is_class.end(), 0) != state.keep_is_class.end())
    return std::nullopt;
  ClassProgram prog;
  prog.registers = static_cast<uint16_t>(state.keep.size());
  std::vector<int> reg_of_var(rule.vars.size(), -1);
  for (size_t k = 0; k < state.keep.size(); ++k) reg_of_var[state.keep[k]] = static_cast<int>(k);
  // The register holding term t, or -1 when t is not a class-only term.
  auto reg = [&](auto&& self, uint32_t t) -> int {
    const RuleTerm& term = rule.terms[t];
    if (term.kind == RuleTerm::Kind::Var) return reg_of_var[term.var];
    if (term.kind != RuleTerm::Kind::Constructor) return -1;
    const OpInfo& info = ops_[term.id];
    if (info.num_payloads != 0 || info.num_children > 2) return -1;
    ClassProgram::Step b{term.id, info.num_children, 0, {0, 0}};
    for (size_t i = 0; i < term.args.size(); ++i) {
      int r = self(self, term.args[i]);
      if (r < 0) return -1;
      b.args[i] = static_cast<uint16_t>(r);
    }
    b.dst = prog.registers++;
    prog.steps.push_back(b);
    return b.dst;
  };
  for (const Action& act : rule.actions) {
    switch (act.kind) {
      case Action::Kind::Union: {
        int a = reg(reg, act.a);
        int b = a < 0 ? -1 : reg(reg, act.b);
        if (b < 0) return std::nullopt;
        prog.steps.push_back({ClassProgram::kUnion, 2, 0, {static_cast<uint16_t>(a), static_cast<uint16_t>(b)}});
        break;
      }
      case Action::Kind::Build:
        if (reg(reg, act.a) < 0) return std::nullopt;
        break;
      case Action::Kind::Let:
        if ((reg_of_var[act.var] = reg(reg, act.a)) < 0) return std::nullopt;
        break;
      default: return std::nullopt;
    }
  }
  if (prog.registers > 64) return std::nullopt;
  return prog;
}

size_t EGraph::apply_rule(uint32_t r, const uint32_t* matches, size_t count, size_t node_limit,
                          bool generic) {
  const Rule& rule = rules_[r];
  const RuleState& state = rule_state_[r];
  size_t applied = 0, pos = 0;
  if (const std::optional<ClassProgram>& prog = state.class_program; prog && !generic) {
    ClassId regs[64];
    size_t width = state.keep.size();
    for (size_t m = 0; m < count; ++m, matches += width) {
      if (live_nodes_ > node_limit) {
        rebuild();  // as below
        if (live_nodes_ > node_limit) break;
      }
      uint64_t before = version_;
      std::copy(matches, matches + width, regs);
      for (const ClassProgram::Step& b : prog->steps) {
        ClassId ch[2];
        for (uint32_t i = 0; i < b.arity; ++i) ch[i] = find(regs[b.args[i]]);
        if (b.op == ClassProgram::kUnion) {
          if (ch[0] != ch[1]) union_classes(ch[0], ch[1]);
        } else {
          regs[b.dst] = add_canonical(b.op, ch, nullptr);
        }
      }
      applied += version_ != before;
    }
    return applied;
  }
  std::vector<Value> env(rule.vars.size());
  size_t room = 0;
  for (const CompiledAction& act : state.actions) room = std::max(room, act.a.size() + act.b.size());
  std::vector<Value> stack(room);
  for (size_t m = 0; m < count; ++m) {
    if (live_nodes_ > node_limit) {
      // Over budget: part of it may be congruent duplicates (nodes built on stale
      // children). Restore congruence and only give up if it is really spent.
      rebuild();
      if (live_nodes_ > node_limit) break;
    }
    for (size_t k = 0; k < state.keep.size(); ++k) {
      if (state.keep_is_class[k]) {
        env[state.keep[k]] = Value::cls(matches[pos++]);
      } else {
        env[state.keep[k]] = Value::from_bits(static_cast<ValueKind>(matches[pos]),
                                              matches[pos + 1] | (uint64_t{matches[pos + 2]} << 32));
        pos += 3;
      }
    }
    uint64_t before = version_;
    for (const CompiledAction& act : state.actions)
      if (!run_action(act, env, stack.data())) break;
    applied += version_ != before;
  }
  return applied;
}

// ---------------------------------------------------------------- schedules

Schedule Schedule::run(std::string ruleset, uint64_t times) {
  Schedule s;
  s.kind = Kind::Run;
  s.ruleset = std::move(ruleset);
  s.times = times;
  return s;
}
Schedule Schedule::repeat(uint64_t times, std::vector<Schedule> body) {
  Schedule s;
  s.kind = Kind::Repeat;
  s.times = times;
  s.children = std::move(body);
  return s;
}
Schedule Schedule::saturate(std::vector<Schedule> body) {
  Schedule s;
  s.kind = Kind::Saturate;
  s.children = std::move(body);
  return s;
}
Schedule Schedule::seq(std::vector<Schedule> body) {
  Schedule s;
  s.kind = Kind::Seq;
  s.children = std::move(body);
  return s;
}

std::string Schedule::to_string() const {
  std::ostringstream os;
  switch (kind) {
    case Kind::Run:
      os << "(run";
      if (!ruleset.empty()) os << ' ' << ruleset;
      if (times != 1) os << ' ' << times;
      os << ')';
      return os.str();
    case Kind::Repeat: os << "(repeat " << times; break;
    case Kind::Saturate: os << "(saturate"; break;
    case Kind::Seq: os << "(seq"; break;
  }
  for (const Schedule& c : children) os << ' ' << c.to_string();
  os << ')';
  return os.str();
}

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::Saturated: return "Saturated";
    case StopReason::Completed: return "Completed";
    case StopReason::IterationLimit: return "IterationLimit";
    case StopReason::NodeLimit: return "NodeLimit";
    case StopReason::TimeLimit: return "TimeLimit";
  }
  return "?";
}

std::string RunReport::to_string() const {
  std::ostringstream os;
  os << "stop=" << stop_reason_name(stop) << " iterations=" << iterations;
  if (sliced_iterations) os << " (" << sliced_iterations << " sliced)";
  os << " nodes=" << nodes
     << " classes=" << classes << " search=" << search_s << "s apply=" << apply_s
     << "s rebuild=" << rebuild_s << "s total=" << total_s << "s\n";
  for (const RuleReport& r : rules) {
    os << "  " << (r.ruleset.empty() ? "" : r.ruleset + "/") << r.name;
    if (!r.disabled.empty()) {
      os << ": disabled (" << r.disabled << ")\n";
      continue;
    }
    os << ": matches=" << r.matches << " applied=" << r.applications << " banned=" << r.times_banned
       << " search=" << r.search_s << "s apply=" << r.apply_s << "s\n";
  }
  return os.str();
}

using Clock = std::chrono::steady_clock;
static double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The match buffer of this thread's outermost run (a nested run, from a host hook,
// gets its own). Kept between runs up to 256 MB.
class ThreadMatchBuffer {
 public:
  ThreadMatchBuffer() : nested_(in_use_) {
    in_use_ = true;
    EGraph::MatchBuffer& b = nested_ ? own_ : shared_;
    constexpr size_t kKeepAtMost = size_t{64} << 20;  // words
    if (b.capacity > kKeepAtMost) b = {};
    b.size = 0;
  }
  ~ThreadMatchBuffer() { in_use_ = nested_; }
  ThreadMatchBuffer(const ThreadMatchBuffer&) = delete;
  ThreadMatchBuffer& operator=(const ThreadMatchBuffer&) = delete;
  EGraph::MatchBuffer& get() { return nested_ ? own_ : shared_; }

 private:
  static thread_local EGraph::MatchBuffer shared_;
  static thread_local bool in_use_;
  bool nested_;
  EGraph::MatchBuffer own_;
};
thread_local EGraph::MatchBuffer ThreadMatchBuffer::shared_;
thread_local bool ThreadMatchBuffer::in_use_ = false;

struct RunState {
  EGraph& g;
  const RunOptions& opt;
  RunReport report = {};
  std::vector<RuleReport> rules = {};  // this run's numbers, per rule
  Clock::time_point start = Clock::now();
  std::optional<StopReason> stop = {};
  bool last_changed = false;
  // Reused by every iteration, and by every run on this thread: a compile runs many
  // e-graphs, and a fresh buffer of tens of MB costs page faults each time.
  ThreadMatchBuffer buffer = {};
  EGraph::MatchBuffer& matches = buffer.get();
  size_t last_live = 0;  // live e-nodes when the previous iteration started

  bool over_time() const { return seconds_since(start) > opt.time_limit_s; }

  // One iteration of a ruleset: search every rule, apply every match, rebuild.
  bool run_once(const std::string& ruleset) {
    if (report.iterations >= opt.iteration_limit) return stop = StopReason::IterationLimit, false;
    if (over_time()) return stop = StopReason::TimeLimit, false;
    size_t iter = ++report.iterations;
    uint32_t now = ++g.clock_;
    uint64_t before = g.version_;
    std::vector<uint32_t> members;
    bool banned_any = false;
    for (uint32_t r = 0; r < g.rules_.size(); ++r) {
      if (g.rules_[r].ruleset != ruleset || !g.rules_[r].disabled.empty()) continue;
      if (opt.backoff && g.rule_state_[r].banned_until > iter) {
        banned_any = true;
        continue;
      }
      members.push_back(r);
    }
    // Growth of the last iteration: if this one is likely to run past the node budget,
    // search in slices and apply each at once, so the search stops where the budget
    // does (a full search would mostly find matches that are never applied).
    size_t live = g.live_nodes_;
    bool near_budget = !opt.backoff && !opt.naive && opt.node_limit != SIZE_MAX && last_live > 0 &&
                       static_cast<double>(live) * live / last_live > static_cast<double>(opt.node_limit);
    last_live = live;
    if (near_budget) {
      ++report.sliced_iterations;
      return finish_iteration(ruleset, before, banned_any, apply_in_slices(members, now));
    }
    // All rules' matches of this iteration, back to back: rule k's start at offsets[k].
    matches.size = 0;
    std::vector<size_t> counts(members.size(), 0), offsets(members.size(), 0);
    for (size_t k = 0; k < members.size(); ++k) {
      uint32_t r = members[k];
      auto& st = g.rule_state_[r];
      size_t limit = opt.backoff ? opt.match_limit << std::min<size_t>(st.times_banned, 40) : SIZE_MAX;
      auto t0 = Clock::now();
      offsets[k] = matches.size;
      size_t n = g.search_rule(r, limit, opt.naive, matches);
      double dt = seconds_since(t0);
      rules[r].search_s += dt;
      report.search_s += dt;
      if (n > limit) {  // egg's BackoffScheduler: drop the matches, ban, double both
        matches.size = offsets[k];
        st.banned_until = iter + (opt.ban_length << std::min<size_t>(st.times_banned, 40));
        ++st.times_banned;
        ++rules[r].times_banned;
        banned_any = true;
        continue;
      }
      st.since = now;
      counts[k] = n;
      rules[r].matches += n;
      if (over_time()) break;
    }
    auto t1 = Clock::now();
    bool cut = false;  // the node budget ran out mid-apply: stop after this iteration
    for (size_t k = 0; k < members.size(); ++k) {
      if (g.live_nodes_ > opt.node_limit) {
        g.rebuild();
        cut |= g.live_nodes_ > opt.node_limit;
      }
      auto t0 = Clock::now();
      rules[members[k]].applications += g.apply_rule(members[k], matches.data.get() + offsets[k], counts[k], opt.node_limit,
                                                      opt.generic_actions);
      rules[members[k]].apply_s += seconds_since(t0);
    }
    if (g.live_nodes_ > opt.node_limit) {
      g.rebuild();
      cut |= g.live_nodes_ > opt.node_limit;
    }
    report.apply_s += seconds_since(t1);
    return finish_iteration(ruleset, before, banned_any, cut);
  }

  // Near the budget: rule by rule, search a slice of matches, apply it, rebuild, until
  // the rule is done or the budget is spent. Later slices and rules see what earlier
  // ones added (sound, deterministic); a rule's search only counts as done, for
  // semi-naive matching, once all its slices were applied.
  bool apply_in_slices(const std::vector<uint32_t>& members, uint32_t now) {
    g.compact_logs_ = false;  // the cursors hold positions in the operator logs
    bool cut = false;
    for (uint32_t r : members) {
      EGraph::SearchCursor cursor;
      while (!cursor.done && !cut) {
        matches.size = 0;
        auto t0 = Clock::now();
        size_t n = g.search_rule(r, SIZE_MAX, false, matches, &cursor, std::max<size_t>(opt.slice_matches, 1));
        double dt = seconds_since(t0);
        rules[r].search_s += dt, report.search_s += dt;
        rules[r].matches += n;
        t0 = Clock::now();
        rules[r].applications += g.apply_rule(r, matches.data.get(), n, opt.node_limit, opt.generic_actions);
        dt = seconds_since(t0);
        rules[r].apply_s += dt, report.apply_s += dt;
        t0 = Clock::now();
        g.rebuild();
        report.rebuild_s += seconds_since(t0);
        cut = g.live_nodes_ > opt.node_limit;
      }
      if (cut) break;
      g.rule_state_[r].since = now;
      if (over_time()) break;
    }
    g.compact_logs_ = true;
    return cut;
  }

  bool finish_iteration(const std::string& ruleset, uint64_t before, bool banned_any, bool cut) {
    auto t2 = Clock::now();
    g.rebuild();
    report.rebuild_s += seconds_since(t2);
    bool changed = g.version_ != before;
    if (!changed && banned_any) {
      // egg's can_stop: nothing changed but some rules sat out; lift their bans.
      for (uint32_t r = 0; r < g.rules_.size(); ++r)
        if (g.rules_[r].ruleset == ruleset) g.rule_state_[r].banned_until = 0;
      changed = true;
    }
    last_changed = changed;
    if (cut || g.live_nodes_ > opt.node_limit) stop = StopReason::NodeLimit;
    else if (over_time()) stop = StopReason::TimeLimit;
    return changed;
  }

  bool exec_all(const std::vector<Schedule>& body) {
    bool changed = false;
    for (const Schedule& s : body) {
      changed |= exec(s);
      if (stop) break;
    }
    return changed;
  }

  bool exec(const Schedule& s) {
    bool changed = false;
    switch (s.kind) {
      case Schedule::Kind::Run:
        for (uint64_t i = 0; i < s.times && !stop; ++i) {
          if (!run_once(s.ruleset)) break;
          changed = true;
        }
        return changed;
      case Schedule::Kind::Repeat:
        for (uint64_t i = 0; i < s.times && !stop; ++i) {
          if (!exec_all(s.children)) break;  // a no-op body stays a no-op
          changed = true;
        }
        return changed;
      case Schedule::Kind::Saturate:
        while (!stop && exec_all(s.children)) changed = true;
        return changed;
      case Schedule::Kind::Seq: return exec_all(s.children);
    }
    return false;
  }
};

static void check_schedule(const EGraph& g, const Schedule& s) {
  if (s.kind == Schedule::Kind::Run && !g.has_ruleset(s.ruleset))
    fail("schedule runs unknown ruleset '", s.ruleset, "'");
  for (const Schedule& c : s.children) check_schedule(g, c);
}

RunReport EGraph::run(const Schedule& schedule, const RunOptions& options) {
  check_schedule(*this, schedule);
  rebuild();
  RunState st{*this, options};
  st.rules.resize(rules_.size());
  for (size_t r = 0; r < rules_.size(); ++r) {
    st.rules[r].name = rules_[r].name;
    st.rules[r].ruleset = rules_[r].ruleset;
    st.rules[r].disabled = rules_[r].disabled;
  }
  st.exec(schedule);
  st.report.stop = st.stop.value_or(st.last_changed ? StopReason::Completed : StopReason::Saturated);
  st.report.nodes = live_nodes_;
  st.report.classes = live_classes_;
  st.report.total_s = seconds_since(st.start);
  st.report.rules = std::move(st.rules);
  return st.report;
}

}  // namespace luminal::egraph
