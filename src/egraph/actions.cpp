// Actions: postfix code for guards and action terms, register programs for class-only
// actions, and applying a rule's matches.
#include <algorithm>
#include <cmath>

#include "luminal/egraph/egraph.hpp"
#include "luminal/error.hpp"

namespace luminal::egraph {

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
  prog.inputs = prog.registers = static_cast<uint16_t>(state.keep.size());
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

void EGraph::run_class_program(const ClassProgram& prog, const uint32_t* match) {
  ClassId regs[64];
  std::copy(match, match + prog.inputs, regs);
  for (const ClassProgram::Step& b : prog.steps) {
    ClassId ch[2];
    for (uint32_t i = 0; i < b.arity; ++i) ch[i] = find(regs[b.args[i]]);
    if (b.op == ClassProgram::kUnion) {
      if (ch[0] != ch[1]) union_classes(ch[0], ch[1]);
    } else {
      regs[b.dst] = add_canonical(b.op, ch, nullptr);
    }
  }
}

size_t EGraph::apply_rule(uint32_t r, const uint32_t* matches, size_t count, size_t node_limit,
                          bool generic) {
  const Rule& rule = rules_[r];
  const RuleState& state = rule_state_[r];
  const ClassProgram* prog = state.class_program && !generic ? &*state.class_program : nullptr;
  std::vector<Value> env(prog ? 0 : rule.vars.size());
  size_t room = 0;
  for (const CompiledAction& act : state.actions) room = std::max(room, act.a.size() + act.b.size());
  std::vector<Value> stack(prog ? 0 : room);
  size_t applied = 0, pos = 0;
  for (size_t m = 0; m < count; ++m) {
    if (live_nodes_ > node_limit) {
      // Over budget: part of it may be congruent duplicates (nodes built on stale
      // children). Restore congruence and only give up if it is really spent.
      rebuild();
      if (live_nodes_ > node_limit) break;
    }
    uint64_t before = version_;
    if (prog) {
      run_class_program(*prog, matches + pos);
      pos += prog->inputs;  // one word per kept class variable
    } else {
      for (size_t k = 0; k < state.keep.size(); ++k) {
        if (state.keep_is_class[k]) {
          env[state.keep[k]] = Value::cls(matches[pos++]);
        } else {
          env[state.keep[k]] = Value::from_bits(static_cast<ValueKind>(matches[pos]),
                                                matches[pos + 1] | (uint64_t{matches[pos + 2]} << 32));
          pos += 3;
        }
      }
      for (const CompiledAction& act : state.actions)
        if (!run_action(act, env, stack.data())) break;
    }
    applied += version_ != before;
  }
  return applied;
}

}  // namespace luminal::egraph
