// A native e-graph engine for equality saturation (egg's rebuilding + egglog's rules).
//
//   EGraph g;                                  // knows i64 f64 bool String Expr ExprList
//   g.load_file("rules/math.egg");             // sorts, constructors, functions, rules
//   ClassId root = g.add_term("(Mul (Var \"a\") (Num 2))");
//   RunReport r = g.run(Schedule::saturate({Schedule::run("math")}));
//   Extractor ex(g); ex.best_term(root);
//
// The engine knows nothing about tensors. See docs/EGRAPH.md for the design.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "luminal/egraph/rule.hpp"
#include "luminal/egraph/value.hpp"

namespace luminal::egraph {

using NodeId = uint32_t;
using OpId = uint32_t;
using FuncId = uint32_t;

struct SortInfo {
  std::string name;
  ValueKind kind = ValueKind::Class;   // Class for datatypes (e-classes), else a primitive
};

struct OpInfo {
  std::string name;
  SortId sort = kInvalid;              // the datatype this constructor builds
  std::vector<SortId> args;            // declared argument sorts, in order
  std::vector<uint32_t> slot;          // arg i -> index among children or among payloads
  std::vector<ValueKind> kinds;        // arg i -> the kind its value must have
  uint32_t num_children = 0, num_payloads = 0;
  bool small_key = false;              // <= 2 children, no payloads: key fits a hashcons slot
  double cost = 1;
  bool unextractable = false;
  SourceLoc loc;                       // where a rule file declared it (empty for C++ declarations)
};

enum class MergeKind { Old, New, Min, Max };

struct FunctionInfo {
  std::string name;
  std::vector<SortId> args;
  SortId out = kInvalid;
  MergeKind merge = MergeKind::Old;    // ignored for datatype outputs: those are unioned
};

struct ENode {
  OpId op;
  ClassId cls;             // canonical after rebuild()
  uint32_t stamp;          // time of the last change of this row (semi-naive matching)
  uint32_t payloads;       // offset into the payload store
  // Children of nodes with at most two are kept in the node, so matching reads one
  // cache line per node; larger nodes keep them in the child store.
  uint32_t children;       // offset into the child store, or kInline
  ClassId kids[2];
  uint8_t flags;           // kDead | kSubsumed
  static constexpr uint32_t kInline = UINT32_MAX;
};
inline constexpr uint8_t kDead = 1;      // removed (congruent duplicate or deleted)
inline constexpr uint8_t kSubsumed = 2;  // hidden from matching and extraction

// An e-class analysis: per-class data made from each node and merged on union.
// make() may read the analysis data of the node's children through EGraph::analysis.
struct AnalysisHooks {
  std::string name;
  std::function<Value(const class EGraph&, NodeId)> make;   // None = no data
  std::function<Value(const Value& a, const Value& b)> merge;
};

// Host primitive: returns nullopt when it does not apply (the guard fails, the action
// is skipped). Used in guards `(> (expr-coeff ?s "z") 0)` and in actions.
using PrimitiveFn = std::function<std::optional<Value>(std::span<const Value>)>;

struct Schedule {
  enum class Kind { Run, Repeat, Saturate, Seq };
  Kind kind = Kind::Seq;
  std::string ruleset;                 // Run
  uint64_t times = 1;                  // Run, Repeat
  std::vector<Schedule> children;      // Repeat, Saturate, Seq
  static Schedule run(std::string ruleset, uint64_t times = 1);
  static Schedule repeat(uint64_t times, std::vector<Schedule> body);
  static Schedule saturate(std::vector<Schedule> body);
  static Schedule seq(std::vector<Schedule> body);
  std::string to_string() const;
};

struct RunOptions {
  size_t node_limit = 1'000'000;       // live e-nodes
  size_t iteration_limit = 10'000;     // ruleset iterations, summed over the schedule
  double time_limit_s = 60;
  bool backoff = false;                // egg's BackoffScheduler
  size_t match_limit = 1000;           // backoff: initial match threshold
  size_t ban_length = 5;               // backoff: initial ban, in iterations
  size_t slice_matches = 2048;         // near the node limit: matches searched per slice
  bool naive = false;                  // re-match everything each iteration (testing)
  bool generic_actions = false;        // no register programs for class-only actions (testing)
};

enum class StopReason {
  Saturated,       // the last iteration changed nothing
  Completed,       // the schedule ran out (repeat counts) while still changing
  IterationLimit, NodeLimit, TimeLimit,
};
const char* stop_reason_name(StopReason r);

struct RuleReport {
  std::string name, ruleset, disabled;
  size_t matches = 0, applications = 0, times_banned = 0;
  double search_s = 0, apply_s = 0;
};

struct RunReport {
  StopReason stop = StopReason::Saturated;
  size_t iterations = 0, nodes = 0, classes = 0;
  size_t sliced_iterations = 0;        // searched in slices, each applied at once (near the node limit)
  double search_s = 0, apply_s = 0, rebuild_s = 0, total_s = 0;
  std::vector<RuleReport> rules;       // every rule that ran or is disabled, file order
  std::string to_string() const;
};

class EGraph {
 public:
  EGraph();

  // ---- signature ----
  SortId declare_sort(std::string_view name);                     // a datatype
  OpId declare_constructor(std::string_view name, std::vector<SortId> args, SortId sort,
                           double cost = 1, bool unextractable = false, SourceLoc loc = {});
  FuncId declare_function(std::string_view name, std::vector<SortId> args, SortId out,
                          MergeKind merge);
  void register_primitive(std::string_view name, PrimitiveFn fn);
  uint32_t register_analysis(AnalysisHooks hooks);  // before adding nodes
  void declare_ruleset(std::string_view name);

  std::optional<SortId> find_sort(std::string_view name) const;
  std::optional<OpId> find_op(std::string_view name) const;
  std::optional<FuncId> find_function(std::string_view name) const;
  std::optional<uint32_t> find_primitive(std::string_view name) const;
  bool has_ruleset(std::string_view name) const;
  const SortInfo& sort(SortId s) const { return sorts_[s]; }
  const OpInfo& op(OpId o) const { return ops_[o]; }
  const FunctionInfo& function(FuncId f) const { return funcs_[f].info; }
  size_t num_ops() const { return ops_.size(); }
  bool arg_is_payload(OpId o, size_t arg) const { return ops_[o].kinds[arg] != ValueKind::Class; }

  // ---- rule files (docs/EGRAPH.md) ----
  // Errors throw luminal::Error "file:line:col: message".
  void load_file(const std::string& path);
  void load_string(std::string_view text, const std::string& filename = "<string>");
  // Validate and add a rule (rule-file rules come through here too).
  void add_rule(Rule rule);
  const std::vector<Rule>& rules() const { return rules_; }
  // The schedule of the last (run-schedule ...) form, if any.
  const std::optional<Schedule>& file_schedule() const { return file_schedule_; }
  // A term in rule-file syntax, e.g. "(Add (Num 1) (Var \"x\"))", or a `let` name.
  ClassId add_term(std::string_view text);
  std::optional<ClassId> global(std::string_view name) const;  // from top-level `let`

  // ---- terms ----
  // args in declared order: children as Value::cls, payloads as their values.
  ClassId add(OpId op, std::span<const Value> args);
  std::optional<NodeId> lookup(OpId op, std::span<const Value> args);
  bool union_classes(ClassId a, ClassId b);   // true if they were different
  ClassId find(ClassId id) {
    while (uf_[id] != id) id = uf_[id] = uf_[uf_[id]];  // path halving
    return id;
  }
  ClassId find(ClassId id) const {
    while (uf_[id] != id) id = uf_[id];
    return id;
  }
  // Every node is born in a class of its own with the node's id, and classes only
  // merge, so a node's current class is find(node id): no read of the node needed.
  ClassId class_of(NodeId n) { return find(static_cast<ClassId>(n)); }
  void rebuild();                             // restore congruence and invariants
  void subsume(NodeId n);
  void remove(NodeId n);

  // ---- functions (tables) ----
  bool set_function(FuncId f, std::span<const Value> args, Value out);  // true if changed
  std::optional<Value> get_function(FuncId f, std::span<const Value> args);
  void remove_function(FuncId f, std::span<const Value> args);

  // ---- running ----
  RunReport run(const Schedule& schedule, const RunOptions& options = {});

  // ---- inspection (call rebuild() first if you unioned by hand) ----
  size_t num_nodes() const { return live_nodes_; }   // live, including subsumed
  size_t num_classes() const { return live_classes_; }
  std::vector<ClassId> classes() const;             // canonical ids, ascending
  std::vector<NodeId> class_nodes(ClassId c, bool include_subsumed = false) const;
  const ENode& node(NodeId n) const { return nodes_[n]; }
  std::span<const ClassId> children(NodeId n) const;
  std::span<const Value> payloads(NodeId n) const;
  Value node_arg(NodeId n, size_t arg) const;      // declared order, children as Value::cls
  Value analysis(uint32_t analysis, ClassId c) const;
  std::string node_to_string(NodeId n) const;      // "(Add e3 e5)"
  std::string dump() const;                        // canonical text of the whole e-graph
  uint64_t version() const { return version_; }    // bumps on every change

 private:
  friend class Loader;
  friend class Matcher;
  friend class ThreadMatchBuffer;
  // A node in a class's node or parent list, with its operator: after rebuild() both
  // lists are sorted by (operator, node id), and matching finds the nodes of one
  // operator by binary search over the list alone, without touching the nodes.
  struct Member {
    OpId op;
    NodeId node;
    friend bool operator<(Member a, Member b) { return a.op != b.op ? a.op < b.op : a.node < b.node; }
    friend bool operator==(Member a, Member b) { return a.node == b.node; }
  };
  struct EClassData {
    std::vector<Member> nodes;     // may hold dead entries until compacted
    std::vector<Member> parents;   // nodes that have this class as a child
    uint32_t nodes_sorted = 0, parents_sorted = 0;  // length of the sorted prefix
    bool dirty = false;            // listed in dirty_classes_
  };
  void mark_dirty(ClassId c) {
    if (classes_[c].dirty) return;
    classes_[c].dirty = true;
    dirty_classes_.push_back(c);
  }
  static std::pair<const Member*, const Member*> op_range(const std::vector<Member>& list, OpId op);
  struct FunctionTable {
    FunctionInfo info;
    struct Row { uint32_t key; Value out; uint32_t stamp; bool live; };
    std::vector<Row> rows;                 // key: offset into `keys`
    std::vector<Value> keys;
    std::unordered_map<size_t, std::vector<uint32_t>> index;  // key hash -> rows
    bool has_classes = false;
  };
  // A term compiled to postfix code, run on a value stack: guards and actions are
  // evaluated once per match, so they must not walk the term tree or allocate.
  struct Instr {
    enum class Op : uint8_t { Var, Lit, Prim, Cons, Func };
    Op op = Op::Lit;
    uint8_t nargs = 0;
    int32_t var = -1;                      // Var
    uint32_t id = 0;                       // Prim / Cons (OpId) / Func (FuncId)
    Value lit;                             // Lit
  };
  using Code = std::vector<Instr>;
  struct CompiledAction {
    Action::Kind kind = Action::Kind::Build;
    int var = -1;                          // Let
    uint32_t target = 0;                   // Set / Subsume / Delete: the op or function id
    bool target_is_function = false;
    Code a, b;                             // Set/Subsume/Delete: `a` pushes the target's arguments
  };
  // Actions that only build nodes of class arguments and union classes (most
  // rewrites: commutativity, associativity, distributivity) run as register code on
  // class ids, without values or a stack, in the order the generic evaluator would
  // run them. Registers: the kept variables, then one per built node.
  struct ClassProgram {
    static constexpr OpId kUnion = UINT32_MAX;
    struct Step { OpId op; uint32_t arity; uint16_t dst, args[2]; };  // op == kUnion: union args
    std::vector<Step> steps;
    uint16_t inputs = 0;       // registers filled from the match words
    uint16_t registers = 0;
  };
  struct RuleState {
    uint32_t since = 0;                    // stamp of the last completed search
    std::vector<std::vector<PlanStep>> plans;   // one per seed atom
    std::vector<Code> guards;              // per guard
    std::vector<CompiledAction> actions;
    std::optional<ClassProgram> class_program;  // when the actions allow it
    // A match stores only the variables the actions read, packed: a class variable
    // takes one word, any other value three (kind, low bits, high bits).
    std::vector<int> keep;
    std::vector<uint8_t> keep_is_class;
    size_t times_banned = 0, banned_until = 0;
  };
  struct Hashcons;

  // hashcons (open addressing over node ids)
  uint64_t hash_node(OpId op, const ClassId* ch, const Value* pl) const;
  uint64_t hash_node(NodeId n) const;
  bool node_equals(NodeId n, OpId op, const ClassId* ch, const Value* pl) const;
  NodeId memo_find(OpId op, const ClassId* ch, const Value* pl, uint64_t h) const;
  void memo_insert(NodeId n, uint64_t h);
  void memo_erase(NodeId n, uint64_t h);
  void memo_grow();

  void touch(NodeId n);                    // restamp + log for semi-naive matching
  void merge_analysis(ClassId into, ClassId from);
  void rebuild_functions();
  void compact_class(ClassId c);
  void kill_node(NodeId n);
  Value make_analysis(uint32_t a, NodeId n) const;
  uint32_t function_row(FuncId f, std::span<const Value> args) const;

  // The node (op, children, payloads) with canonical children: the existing one's
  // class, or a new node in a new class. Arguments are trusted (add() validates).
  ClassId add_canonical(OpId op, const ClassId* ch, const Value* pl);
  int split_args(OpId op, const Value* args, ClassId* ch, Value* pl);
  void check_arg_kinds(OpId op, int bad, const Value* args) const;  // throws when bad >= 0
  ClassId add_new(OpId op, const ClassId* ch, const Value* pl, uint64_t h);  // not in the hashcons

  // The matches of one iteration, as packed words; grows without zero-filling.
  struct MatchBuffer {
    std::unique_ptr<uint32_t[]> data;
    size_t size = 0, capacity = 0;
    uint32_t* append(size_t words) {
      if (size + words > capacity) reserve(std::max(2 * capacity, size + words + 4096));
      uint32_t* at = data.get() + size;
      size += words;
      return at;
    }
    void reserve(size_t words);
  };

  // Where a search split into slices resumes (near the node limit).
  struct SearchCursor {
    size_t join = 0;            // the semi-naive join in progress
    size_t row = 0;             // its next seed row
    size_t end = SIZE_MAX;      // seed rows when the join started (later ones wait)
    bool done = false;
  };

  // rules: matching (match.cpp), actions (actions.cpp)
  // With a cursor, stops after the seed row that brings the matches to `want` and
  // records where to resume; without, searches everything.
  size_t search_rule(uint32_t r, size_t limit, bool naive, MatchBuffer& matches,
                     SearchCursor* cursor = nullptr, size_t want = SIZE_MAX);
  size_t apply_rule(uint32_t r, const uint32_t* matches, size_t count, size_t node_limit, bool generic);
  void run_class_program(const ClassProgram& prog, const uint32_t* match);
  std::optional<ClassProgram> compile_class_program(const Rule& rule, const RuleState& state) const;
  void compile_term(const Rule& rule, uint32_t t, Code& out) const;
  // Runs `code` with its results pushed from `sp` (room for code.size() values);
  // returns the new top, or nullptr when a primitive, a function or (without
  // `mutate`) a constructor lookup has no value.
  Value* exec(const Code& code, const Value* env, bool mutate, Value* sp);
  // The class of the node op(args) (args in declared order): added when `mutate`,
  // otherwise looked up (nullopt when absent).
  std::optional<ClassId> construct(OpId op, const Value* args, bool mutate);
  std::optional<Value> eval_term(const Rule& rule, uint32_t t, std::vector<Value>& env, bool mutate);
  bool run_action(const CompiledAction& a, std::vector<Value>& env, Value* stack);
  friend struct RunState;

  // signature
  std::vector<SortInfo> sorts_;
  std::vector<OpInfo> ops_;
  std::vector<FunctionTable> funcs_;
  std::vector<std::pair<std::string, PrimitiveFn>> prims_;
  std::vector<AnalysisHooks> analyses_;
  std::map<std::string, uint32_t, std::less<>> sort_names_, op_names_, func_names_, prim_names_;
  std::vector<std::string> rulesets_;
  std::vector<Rule> rules_;
  std::vector<RuleState> rule_state_;
  std::optional<Schedule> file_schedule_;
  std::map<std::string, ClassId, std::less<>> globals_;

  // e-graph
  std::vector<ClassId> uf_;                // union-find parent
  std::vector<EClassData> classes_;
  std::vector<std::vector<Value>> analysis_data_;   // [analysis][class]
  std::vector<ENode> nodes_;
  std::vector<ClassId> child_store_;       // children of nodes with more than two
  ClassId* children_of(ENode& e) { return e.children == ENode::kInline ? e.kids : child_store_.data() + e.children; }
  const ClassId* children_of(const ENode& e) const {
    return e.children == ENode::kInline ? e.kids : child_store_.data() + e.children;
  }
  std::vector<Value> payload_store_;
  // Hashcons slots carry the key of nodes with at most two children and no payloads
  // (op, child, child), so probes for them never touch the node; other nodes keep a
  // 32-bit hash tag and are compared against the node.
  struct MemoSlot { uint32_t node, op, a, b; };
  MemoSlot memo_key(OpId op, const ClassId* ch, uint64_t h) const;
  std::vector<MemoSlot> memo_;             // open addressing
  size_t memo_used_ = 0;                   // occupied incl. tombstones
  // Per operator, (stamp, node) in stamp order: the operator index and the semi-naive
  // delta. A restamped node appends a new entry; the old one goes stale (its stamp no
  // longer matches the node's) and is dropped when stale entries outnumber live ones.
  std::vector<std::vector<std::pair<uint32_t, NodeId>>> op_log_;
  std::vector<uint32_t> op_live_;          // live nodes per operator
  std::vector<NodeId> pending_nodes_;      // parents of merged classes: re-canonicalise
  std::vector<ClassId> dirty_classes_;     // classes whose node/parent lists need compacting
  std::vector<NodeId> analysis_pending_;   // nodes whose make() must be recomputed
  bool functions_dirty_ = false;
  bool compact_logs_ = true;               // off while a sliced search holds log positions
  uint32_t clock_ = 1;
  uint64_t version_ = 0;
  size_t live_nodes_ = 0, live_classes_ = 0;
};

}  // namespace luminal::egraph
