// The compiled form of a rule: a conjunctive query (atoms + guards) and a list of
// actions. Rules come from rule files (parser.cpp) or from C++; both end up here and
// are validated by EGraph::add_rule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "luminal/egraph/value.hpp"

namespace luminal::egraph {

using SortId = uint32_t;
inline constexpr uint32_t kInvalid = UINT32_MAX;

struct SourceLoc {
  std::string file;
  int line = 0, col = 0;
  std::string to_string() const { return file + ":" + std::to_string(line) + ":" + std::to_string(col); }
};

struct RuleVar {
  std::string name;          // "?x", or "?_3" for pattern-internal classes
  SortId sort = kInvalid;    // kInvalid: bound by a primitive, typed at run time
};

// A term of a guard or an action, stored in Rule::terms; `args` index Rule::terms.
struct RuleTerm {
  enum class Kind { Var, Literal, Primitive, Constructor, Function };
  Kind kind = Kind::Literal;
  int var = -1;              // Var
  Value literal;             // Literal
  uint32_t id = 0;           // Primitive / Constructor (OpId) / Function (FuncId)
  std::vector<uint32_t> args;
};

// One conjunct of the query. Slot 0 is the row's output (the e-class of a constructor
// node, the value of a function row); slots 1.. are the arguments in declared order.
// vars[i] >= 0 names the variable in slot i; vars[i] == -1 means "must equal lits[i]".
struct Atom {
  bool is_function = false;
  uint32_t id = 0;           // OpId or FuncId
  std::vector<int> vars;
  std::vector<Value> lits;
};

// A guard evaluates `term`; with bind >= 0 it binds that variable to the result,
// otherwise the match survives only if the result is `true`.
struct Guard {
  uint32_t term = 0;
  int bind = -1;
};

struct Action {
  enum class Kind {
    Let,      // vars[var] = eval(a)
    Union,    // union eval(a) eval(b)
    Set,      // a is a Function term: set its value to eval(b)
    Subsume,  // a is a Constructor term: hide that node from matching and extraction
    Delete,   // a is a Constructor or Function term: remove the node / row
    Build,    // eval(a) for its side effect (adds the term)
  };
  Kind kind = Kind::Build;
  int var = -1;
  uint32_t a = 0, b = 0;
};

struct Rule {
  std::string name;
  std::string ruleset;       // "" is the default ruleset
  std::string disabled;      // non-empty: loaded and checked, never run; the reason
  // How far the two sides may differ numerically (relative, at least 1 in magnitude:
  // |a - b| <= tolerance * max(1, |a|)); 0 means bit for bit. Read by the rule verifier.
  double tolerance = 0;
  SourceLoc loc;
  std::vector<RuleVar> vars;
  std::vector<Atom> atoms;
  std::vector<Guard> guards;
  std::vector<RuleTerm> terms;
  std::vector<Action> actions;
};

// How one slot of a constructor row meets the match: read from the row's class, a
// child or a payload, then bind a variable, check it, or check a literal.
struct SlotOp {
  enum class Source : uint8_t { Class, Child, Payload };
  enum class Mode : uint8_t { Bind, Check, Literal };
  Source source = Source::Class;
  Mode mode = Mode::Bind;
  uint32_t index = 0;        // child or payload index
  int var = -1;
  Value lit;
};

// One step of a compiled join plan (built by EGraph::add_rule, one plan per seed atom).
struct PlanStep {
  enum class Kind : uint8_t {
    Scan,      // every row of the atom's table (the per-operator index)
    ByClass,   // constructor atom whose e-class (slot 0) is bound: that class's nodes
    ByChild,   // constructor atom with child slot `key` bound: that class's parents
    Lookup,    // function atom with all inputs bound: one hash lookup
    Guard,
  };
  Kind kind = Kind::Scan;
  uint32_t index = 0;        // atom or guard
  int key = -1;
  int8_t filter = 0;         // semi-naive: -1 rows older than the last search, +1 newer, 0 any
  std::vector<uint8_t> bind; // per slot: 1 = this step binds the variable, 0 = checks it
  // Constructor atoms: the slots to read, without the one the index already fixed
  // (a ByClass step's class, a ByChild step's key child).
  std::vector<SlotOp> slots;
};

}  // namespace luminal::egraph
