// Rules at load: validation, compiled guards and actions, join planning; and
// semi-naive matching (Matcher, search_rule), whole or in slices.
#include <algorithm>
#include <cmath>

#include "luminal/egraph/egraph.hpp"
#include "luminal/error.hpp"

namespace luminal::egraph {

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

  // The step's operator's members of a class's node list, or of its parent list
  // (`child` >= 0: only parents with class c at that child).
  [[gnu::always_inline]] bool walk(size_t i, const PlanStep& st, const std::vector<EGraph::Member>& list,
                                   int child, ClassId c) {
    auto [lo, hi] = g_.op_range(list, rule_.atoms[st.index].id);
    Window w = window(st.filter);
    const ENode* nodes = g_.nodes_.data();
    for (auto p = lo; p != hi; ++p) {
      if (hi - p > kPrefetch) __builtin_prefetch(&nodes[p[kPrefetch].node]);
      const ENode& e = nodes[p->node];
      if (e.flags || !w.holds(e.stamp) || (child >= 0 && g_.children_of(e)[child] != c)) continue;
      if (!try_node(i, st, p->node)) return false;
    }
    return true;
  }

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
        ClassId c = env_[rule_.atoms[st.index].vars[0]].as_class();
        return walk(i, st, g_.classes_[c].nodes, -1, c);
      }
      case PlanStep::Kind::ByChild: {
        ClassId c = env_[rule_.atoms[st.index].vars[st.key]].as_class();
        int child = static_cast<int>(g_.ops_[rule_.atoms[st.index].id].slot[st.key - 1]);
        return walk(i, st, g_.classes_[c].parents, child, c);
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

}  // namespace luminal::egraph
