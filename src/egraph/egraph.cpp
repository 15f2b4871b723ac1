// The e-graph proper: union-find, hashcons, deferred rebuilding, analyses, function
// tables. Matching lives in match.cpp, actions in actions.cpp, schedules in run.cpp,
// builtin primitives in primitives.cpp, the rule-file loader in parser.cpp.
#include "luminal/egraph/egraph.hpp"

#include <algorithm>
#include <sstream>

#include "luminal/error.hpp"

namespace luminal::egraph {
namespace {

constexpr uint32_t kEmpty = UINT32_MAX;
constexpr uint32_t kTomb = UINT32_MAX - 1;

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xBF58476D1CE4E5B9ull;
}

size_t hash_values(std::span<const Value> vs) {
  uint64_t h = 0x12345;
  for (const Value& v : vs) h = mix(h, v.hash());
  return h;
}

}  // namespace

void register_builtin_primitives(EGraph& g);  // primitives.cpp

EGraph::EGraph() {
  const std::pair<const char*, ValueKind> prims[] = {
      {"i64", ValueKind::I64},       {"f64", ValueKind::F64},   {"bool", ValueKind::Bool},
      {"String", ValueKind::String}, {"Expr", ValueKind::Expr}, {"ExprList", ValueKind::ExprList}};
  for (auto [name, kind] : prims) {
    sort_names_.emplace(name, static_cast<SortId>(sorts_.size()));
    sorts_.push_back({name, kind});
  }
  rulesets_.push_back("");  // the default ruleset
  register_builtin_primitives(*this);
}

// ---------------------------------------------------------------- signature

SortId EGraph::declare_sort(std::string_view name) {
  LUMINAL_CHECK(!sort_names_.count(name), "sort '", name, "' is already declared");
  SortId id = static_cast<SortId>(sorts_.size());
  sorts_.push_back({std::string(name), ValueKind::Class});
  sort_names_.emplace(std::string(name), id);
  return id;
}

OpId EGraph::declare_constructor(std::string_view name, std::vector<SortId> args, SortId sort,
                                 double cost, bool unextractable, SourceLoc loc) {
  LUMINAL_CHECK(!op_names_.count(name) && !func_names_.count(name),
                "'", name, "' is already declared");
  LUMINAL_CHECK(sort < sorts_.size() && sorts_[sort].kind == ValueKind::Class,
                "constructor '", name, "' must build a datatype sort");
  OpInfo info;
  info.name = std::string(name);
  info.sort = sort;
  info.cost = cost;
  info.unextractable = unextractable;
  info.loc = std::move(loc);
  for (SortId s : args) {
    LUMINAL_CHECK(s < sorts_.size(), "constructor '", name, "': unknown argument sort");
    bool payload = sorts_[s].kind != ValueKind::Class;
    info.slot.push_back(payload ? info.num_payloads++ : info.num_children++);
    info.kinds.push_back(sorts_[s].kind);
  }
  info.args = std::move(args);
  info.small_key = info.num_children <= 2 && info.num_payloads == 0;
  OpId id = static_cast<OpId>(ops_.size());
  ops_.push_back(std::move(info));
  op_names_.emplace(std::string(name), id);
  op_log_.emplace_back();
  op_live_.push_back(0);
  return id;
}

FuncId EGraph::declare_function(std::string_view name, std::vector<SortId> args, SortId out,
                                MergeKind merge) {
  LUMINAL_CHECK(!op_names_.count(name) && !func_names_.count(name),
                "'", name, "' is already declared");
  FunctionTable t;
  t.info = {std::string(name), std::move(args), out, merge};
  for (SortId s : t.info.args) t.has_classes |= sorts_[s].kind == ValueKind::Class;
  t.has_classes |= sorts_[out].kind == ValueKind::Class;
  FuncId id = static_cast<FuncId>(funcs_.size());
  funcs_.push_back(std::move(t));
  func_names_.emplace(std::string(name), id);
  return id;
}

void EGraph::register_primitive(std::string_view name, PrimitiveFn fn) {
  auto it = prim_names_.find(name);
  if (it != prim_names_.end()) {
    prims_[it->second].second = std::move(fn);  // re-registering replaces
    return;
  }
  prim_names_.emplace(std::string(name), static_cast<uint32_t>(prims_.size()));
  prims_.emplace_back(std::string(name), std::move(fn));
}

uint32_t EGraph::register_analysis(AnalysisHooks hooks) {
  LUMINAL_CHECK(nodes_.empty(), "register analyses before adding nodes");
  analyses_.push_back(std::move(hooks));
  analysis_data_.emplace_back();
  return static_cast<uint32_t>(analyses_.size() - 1);
}

void EGraph::declare_ruleset(std::string_view name) {
  if (!has_ruleset(name)) rulesets_.emplace_back(name);
}

bool EGraph::has_ruleset(std::string_view name) const {
  return std::find(rulesets_.begin(), rulesets_.end(), name) != rulesets_.end();
}

template <class Map>
static std::optional<uint32_t> find_in(const Map& m, std::string_view name) {
  auto it = m.find(name);
  if (it == m.end()) return std::nullopt;
  return it->second;
}
std::optional<SortId> EGraph::find_sort(std::string_view n) const { return find_in(sort_names_, n); }
std::optional<OpId> EGraph::find_op(std::string_view n) const { return find_in(op_names_, n); }
std::optional<FuncId> EGraph::find_function(std::string_view n) const { return find_in(func_names_, n); }
std::optional<uint32_t> EGraph::find_primitive(std::string_view n) const { return find_in(prim_names_, n); }
std::optional<ClassId> EGraph::global(std::string_view n) const {
  auto it = globals_.find(n);
  if (it == globals_.end()) return std::nullopt;
  return find(it->second);
}

// ---------------------------------------------------------------- hashcons

uint64_t EGraph::hash_node(OpId op, const ClassId* ch, const Value* pl) const {
  const OpInfo& info = ops_[op];
  uint64_t h = mix(0x51ED27, op);
  for (uint32_t i = 0; i < info.num_children; ++i) h = mix(h, ch[i]);
  for (uint32_t i = 0; i < info.num_payloads; ++i) h = mix(h, pl[i].hash());
  return h ^ (h >> 31);
}

uint64_t EGraph::hash_node(NodeId n) const {
  const ENode& e = nodes_[n];
  return hash_node(e.op, children_of(e), payload_store_.data() + e.payloads);
}

bool EGraph::node_equals(NodeId n, OpId op, const ClassId* ch, const Value* pl) const {
  const ENode& e = nodes_[n];
  if (e.op != op) return false;
  const OpInfo& info = ops_[op];
  const ClassId* ech = children_of(e);
  for (uint32_t i = 0; i < info.num_children; ++i)
    if (ech[i] != ch[i]) return false;
  const Value* epl = payload_store_.data() + e.payloads;
  for (uint32_t i = 0; i < info.num_payloads; ++i)
    if (!(epl[i] == pl[i])) return false;
  return true;
}

EGraph::MemoSlot EGraph::memo_key(OpId op, const ClassId* ch, uint64_t h) const {
  const OpInfo& info = ops_[op];
  if (!info.small_key) return {0, op, static_cast<uint32_t>(h >> 32), 0};
  return {0, op, info.num_children > 0 ? ch[0] : kInvalid, info.num_children > 1 ? ch[1] : kInvalid};
}

NodeId EGraph::memo_find(OpId op, const ClassId* ch, const Value* pl, uint64_t h) const {
  if (memo_.empty()) return kInvalid;
  size_t mask = memo_.size() - 1;
  MemoSlot key = memo_key(op, ch, h);
  bool exact = ops_[op].small_key;
  const MemoSlot* memo = memo_.data();
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const MemoSlot& e = memo[i];
    if (e.node == kEmpty) return kInvalid;
    if (e.op == key.op && e.a == key.a && e.b == key.b && e.node != kTomb &&
        (exact || node_equals(e.node, op, ch, pl)))
      return e.node;
  }
}

void EGraph::memo_insert(NodeId n, uint64_t h) {
  if ((memo_used_ + 1) * 2 > memo_.size()) memo_grow();  // linear probing: keep probes short
  size_t mask = memo_.size() - 1;
  MemoSlot key = memo_key(nodes_[n].op, children_of(nodes_[n]), h);
  key.node = n;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    uint32_t e = memo_[i].node;
    if (e == kEmpty || e == kTomb) {
      if (e == kEmpty) ++memo_used_;
      memo_[i] = key;
      return;
    }
  }
}

void EGraph::memo_erase(NodeId n, uint64_t h) {
  size_t mask = memo_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    uint32_t e = memo_[i].node;
    LUMINAL_ASSERT(e != kEmpty, "hashcons lost node ", n);
    if (e == n) {
      memo_[i].node = kTomb;
      return;
    }
  }
}

void EGraph::memo_grow() {
  std::vector<NodeId> live;
  for (const MemoSlot& e : memo_)
    if (e.node != kEmpty && e.node != kTomb) live.push_back(e.node);
  size_t cap = 1024;
  while (cap < live.size() * 4) cap *= 2;
  memo_.assign(cap, MemoSlot{kEmpty, 0, 0, 0});
  memo_used_ = 0;
  for (NodeId n : live) memo_insert(n, hash_node(n));
}

// ---------------------------------------------------------------- nodes and classes

void EGraph::touch(NodeId n) {
  ENode& e = nodes_[n];
  if (e.stamp == clock_) return;
  e.stamp = clock_;
  op_log_[e.op].emplace_back(clock_, n);
}

// Splits op(args), args in declared order, into canonical children and payloads;
// returns the index of the first argument of the wrong kind, or -1.
int EGraph::split_args(OpId op, const Value* args, ClassId* ch, Value* pl) {
  const OpInfo& info = ops_[op];
  for (size_t i = 0; i < info.kinds.size(); ++i) {
    if (args[i].kind() != info.kinds[i]) return static_cast<int>(i);
    if (info.kinds[i] == ValueKind::Class) ch[info.slot[i]] = find(args[i].as_class());
    else pl[info.slot[i]] = args[i];
  }
  return -1;
}

void EGraph::check_arg_kinds(OpId op, int bad, const Value* args) const {
  if (bad < 0) return;
  const OpInfo& info = ops_[op];
  fail(info.name, " argument ", bad + 1, " must be ", sorts_[info.args[bad]].name, ", got ",
       value_kind_name(args[bad].kind()));
}

ClassId EGraph::add(OpId op, std::span<const Value> args) {
  LUMINAL_CHECK(op < ops_.size(), "add: unknown operator id ", op);
  const OpInfo& info = ops_[op];
  LUMINAL_CHECK(args.size() == info.args.size(), info.name, " expects ", info.args.size(),
                " arguments, got ", args.size());
  LUMINAL_CHECK(info.num_children <= 16 && info.num_payloads <= 16, info.name, ": too many arguments");
  for (const Value& v : args)
    LUMINAL_CHECK(v.kind() != ValueKind::Class || v.as_class() < uf_.size(), info.name, ": unknown e-class ",
                  v.as_class());
  ClassId ch[16];
  Value pl[16];
  check_arg_kinds(op, split_args(op, args.data(), ch, pl), args.data());
  return add_canonical(op, ch, pl);
}

ClassId EGraph::add_canonical(OpId op, const ClassId* ch, const Value* pl) {
  uint64_t h = hash_node(op, ch, pl);
  NodeId existing = memo_find(op, ch, pl, h);
  if (existing != kInvalid) return class_of(existing);
  return add_new(op, ch, pl, h);
}

ClassId EGraph::add_new(OpId op, const ClassId* ch, const Value* pl, uint64_t h) {
  const OpInfo& info = ops_[op];
  ClassId cls = static_cast<ClassId>(uf_.size());
  uf_.push_back(cls);
  classes_.emplace_back();
  for (auto& data : analysis_data_) data.emplace_back();
  NodeId n = static_cast<NodeId>(nodes_.size());
  LUMINAL_ASSERT(n == cls, "node ", n, " born in class ", cls, ": class_of() relies on equal ids");
  ENode node{op, cls, clock_, static_cast<uint32_t>(payload_store_.size()), ENode::kInline, {kInvalid, kInvalid}, 0};
  if (info.num_children <= 2) {
    std::copy(ch, ch + info.num_children, node.kids);
  } else {
    node.children = static_cast<uint32_t>(child_store_.size());
    child_store_.insert(child_store_.end(), ch, ch + info.num_children);
  }
  nodes_.push_back(node);
  payload_store_.insert(payload_store_.end(), pl, pl + info.num_payloads);
  classes_[cls].nodes.push_back({op, n});
  classes_[cls].nodes_sorted = 1;
  for (uint32_t i = 0; i < info.num_children; ++i)
    if (std::find(ch, ch + i, ch[i]) == ch + i) {
      classes_[ch[i]].parents.push_back({op, n});
      mark_dirty(ch[i]);
    }
  op_log_[op].emplace_back(clock_, n);
  ++op_live_[op];
  memo_insert(n, h);
  ++live_nodes_;
  ++live_classes_;
  ++version_;
  for (uint32_t a = 0; a < analyses_.size(); ++a) analysis_data_[a][cls] = make_analysis(a, n);
  return cls;
}

std::optional<ClassId> EGraph::construct(OpId op, const Value* args, bool mutate) {
  ClassId ch[16];
  Value pl[16];
  // Rule terms are sort-checked at load; only a primitive's result can be off.
  check_arg_kinds(op, split_args(op, args, ch, pl), args);
  if (mutate) return add_canonical(op, ch, pl);
  NodeId n = memo_find(op, ch, pl, hash_node(op, ch, pl));
  if (n == kInvalid) return std::nullopt;
  return class_of(n);
}

std::optional<NodeId> EGraph::lookup(OpId op, std::span<const Value> args) {
  if (op >= ops_.size() || args.size() != ops_[op].args.size()) return std::nullopt;
  ClassId ch[16];
  Value pl[16];
  if (split_args(op, args.data(), ch, pl) >= 0) return std::nullopt;
  NodeId n = memo_find(op, ch, pl, hash_node(op, ch, pl));
  if (n == kInvalid) return std::nullopt;
  return n;
}

bool EGraph::union_classes(ClassId a, ClassId b) {
  a = find(a);
  b = find(b);
  if (a == b) return false;
  // The bigger class absorbs the smaller (ties: the smaller id is the root), so ids
  // and node moves are deterministic and each node moves O(log n) times.
  size_t sa = classes_[a].nodes.size(), sb = classes_[b].nodes.size();
  ClassId root = (sa > sb || (sa == sb && a < b)) ? a : b;
  ClassId other = root == a ? b : a;
  uf_[other] = root;
  EClassData& r = classes_[root];
  EClassData& o = classes_[other];
  for (Member m : o.nodes) {
    NodeId n = m.node;
    if (nodes_[n].flags & kDead) continue;
    nodes_[n].cls = root;
    touch(n);  // its row (class column) changed: new matches may use it
    r.nodes.push_back(m);
  }
  for (Member p : o.parents) pending_nodes_.push_back(p.node);
  r.parents.insert(r.parents.end(), o.parents.begin(), o.parents.end());
  o = EClassData{};
  merge_analysis(root, other);
  mark_dirty(root);
  functions_dirty_ = true;
  --live_classes_;
  ++version_;
  return true;
}

Value EGraph::make_analysis(uint32_t a, NodeId n) const {
  return analyses_[a].make ? analyses_[a].make(*this, n) : Value();
}

void EGraph::merge_analysis(ClassId into, ClassId from) {
  for (uint32_t a = 0; a < analyses_.size(); ++a) {
    Value& x = analysis_data_[a][into];
    Value y = analysis_data_[a][from];
    Value merged = x.is_none() ? y : y.is_none() ? x : analyses_[a].merge(x, y);
    if (!(merged == x) || !(merged == y)) {
      // Some parent saw different data for its child: recompute the parents' data.
      for (Member p : classes_[into].parents) analysis_pending_.push_back(p.node);
    }
    x = merged;
  }
}

Value EGraph::analysis(uint32_t a, ClassId c) const { return analysis_data_[a][find(c)]; }

void EGraph::subsume(NodeId n) {
  if (nodes_[n].flags & (kSubsumed | kDead)) return;
  nodes_[n].flags |= kSubsumed;
  ++version_;
}

void EGraph::kill_node(NodeId n) {
  nodes_[n].flags |= kDead;
  --live_nodes_;
  --op_live_[nodes_[n].op];
  mark_dirty(find(nodes_[n].cls));
}

void EGraph::remove(NodeId n) {
  if (nodes_[n].flags & kDead) return;
  memo_erase(n, hash_node(n));
  kill_node(n);
  ++version_;
}

// Sorts the unsorted tail of a node list, merges it into the sorted prefix, and drops
// dead and duplicate entries: O(n + t log t) for a tail of t new entries.
template <class Member>
static void sort_node_list(std::vector<Member>& list, uint32_t& sorted, const std::vector<ENode>& nodes) {
  if (sorted < list.size()) {
    std::sort(list.begin() + sorted, list.end());
    std::inplace_merge(list.begin(), list.begin() + sorted, list.end());
  }
  list.erase(std::unique(list.begin(), list.end()), list.end());
  list.erase(std::remove_if(list.begin(), list.end(), [&](Member m) { return (nodes[m.node].flags & kDead) != 0; }),
             list.end());
  sorted = static_cast<uint32_t>(list.size());
}

void EGraph::compact_class(ClassId c) {
  EClassData& d = classes_[c];
  sort_node_list(d.nodes, d.nodes_sorted, nodes_);
  sort_node_list(d.parents, d.parents_sorted, nodes_);
}

std::pair<const EGraph::Member*, const EGraph::Member*> EGraph::op_range(const std::vector<Member>& list, OpId op) {
  const Member* b = list.data();
  const Member* e = b + list.size();
  const Member* lo = std::partition_point(b, e, [&](Member m) { return m.op < op; });
  const Member* hi = std::partition_point(lo, e, [&](Member m) { return m.op <= op; });
  return {lo, hi};
}

void EGraph::rebuild() {
  std::vector<NodeId> todo;
  while (!pending_nodes_.empty() || !analysis_pending_.empty() || functions_dirty_) {
    todo.swap(pending_nodes_);
    for (NodeId n : todo) {
      ENode& e = nodes_[n];
      if (e.flags & kDead) continue;
      const OpInfo& info = ops_[e.op];
      ClassId* ch = children_of(e);
      bool changed = false;
      for (uint32_t i = 0; i < info.num_children; ++i) changed |= find(ch[i]) != ch[i];
      if (!changed) continue;
      memo_erase(n, hash_node(n));
      for (uint32_t i = 0; i < info.num_children; ++i) ch[i] = find(ch[i]);
      touch(n);
      uint64_t h = hash_node(n);
      NodeId twin = memo_find(e.op, ch, payload_store_.data() + e.payloads, h);
      if (twin == kInvalid) {
        memo_insert(n, h);
        continue;
      }
      // Congruent to an existing node: keep the older one, merge their classes.
      if (!(e.flags & kSubsumed) && (nodes_[twin].flags & kSubsumed)) {
        nodes_[twin].flags &= static_cast<uint8_t>(~kSubsumed);
        touch(twin);  // visible again: new matches may use it
      }
      kill_node(n);
      union_classes(nodes_[n].cls, nodes_[twin].cls);
    }
    todo.clear();
    if (pending_nodes_.empty()) {
      todo.swap(analysis_pending_);
      for (NodeId n : todo) {
        if (nodes_[n].flags & kDead) continue;
        ClassId c = find(nodes_[n].cls);
        for (uint32_t a = 0; a < analyses_.size(); ++a) {
          Value made = make_analysis(a, n);
          if (made.is_none()) continue;
          Value& cur = analysis_data_[a][c];
          Value merged = cur.is_none() ? made : analyses_[a].merge(cur, made);
          if (merged == cur) continue;
          cur = merged;
          for (Member p : classes_[c].parents) analysis_pending_.push_back(p.node);
        }
      }
      todo.clear();
    }
    if (pending_nodes_.empty() && functions_dirty_) rebuild_functions();
  }
  for (ClassId c : dirty_classes_) {
    classes_[c].dirty = false;
    if (find(c) == c) compact_class(c);
  }
  dirty_classes_.clear();
  for (OpId op = 0; op < op_log_.size() && compact_logs_; ++op) {
    auto& log = op_log_[op];
    if (log.size() <= 2 * size_t{op_live_[op]} + 64) continue;
    log.erase(std::remove_if(log.begin(), log.end(),
                             [&](const std::pair<uint32_t, NodeId>& entry) {
                               const ENode& e = nodes_[entry.second];
                               return e.stamp != entry.first || (e.flags & kDead);
                             }),
              log.end());
  }
}

// ---------------------------------------------------------------- functions

uint32_t EGraph::function_row(FuncId f, std::span<const Value> args) const {
  const FunctionTable& t = funcs_[f];
  auto it = t.index.find(hash_values(args));
  if (it == t.index.end()) return kInvalid;
  for (uint32_t r : it->second)
    if (std::equal(args.begin(), args.end(), t.keys.begin() + t.rows[r].key)) return r;
  return kInvalid;
}

static Value merge_values(MergeKind m, const Value& old_v, const Value& new_v) {
  switch (m) {
    case MergeKind::Old: return old_v;
    case MergeKind::New: return new_v;
    case MergeKind::Min: return value_less(new_v, old_v) ? new_v : old_v;
    case MergeKind::Max: return value_less(old_v, new_v) ? new_v : old_v;
  }
  return old_v;
}

bool EGraph::set_function(FuncId f, std::span<const Value> args_in, Value out) {
  LUMINAL_CHECK(f < funcs_.size(), "set: unknown function id ", f);
  FunctionTable& t = funcs_[f];
  LUMINAL_CHECK(args_in.size() == t.info.args.size(), t.info.name, " expects ",
                t.info.args.size(), " arguments, got ", args_in.size());
  std::vector<Value> args(args_in.begin(), args_in.end());
  for (size_t i = 0; i < args.size(); ++i) {
    LUMINAL_CHECK(args[i].kind() == sorts_[t.info.args[i]].kind, t.info.name, " argument ", i + 1,
                  " must be ", sorts_[t.info.args[i]].name);
    if (args[i].kind() == ValueKind::Class) args[i] = Value::cls(find(args[i].as_class()));
  }
  LUMINAL_CHECK(out.kind() == sorts_[t.info.out].kind, t.info.name, " returns ",
                sorts_[t.info.out].name, ", got ", value_kind_name(out.kind()));
  if (out.kind() == ValueKind::Class) out = Value::cls(find(out.as_class()));
  uint32_t r = function_row(f, args);
  if (r == kInvalid) {
    r = static_cast<uint32_t>(t.rows.size());
    t.rows.push_back({static_cast<uint32_t>(t.keys.size()), out, clock_, true});
    t.keys.insert(t.keys.end(), args.begin(), args.end());
    t.index[hash_values(args)].push_back(r);
    ++version_;
    return true;
  }
  auto& row = t.rows[r];
  if (out.kind() == ValueKind::Class) return union_classes(row.out.as_class(), out.as_class());
  Value merged = merge_values(t.info.merge, row.out, out);
  if (merged == row.out) return false;
  row.out = merged;
  row.stamp = clock_;
  ++version_;
  return true;
}

std::optional<Value> EGraph::get_function(FuncId f, std::span<const Value> args_in) {
  std::vector<Value> args(args_in.begin(), args_in.end());
  for (Value& v : args)
    if (v.kind() == ValueKind::Class) v = Value::cls(find(v.as_class()));
  uint32_t r = function_row(f, args);
  if (r == kInvalid) return std::nullopt;
  Value out = funcs_[f].rows[r].out;
  if (out.kind() == ValueKind::Class) out = Value::cls(find(out.as_class()));
  return out;
}

void EGraph::remove_function(FuncId f, std::span<const Value> args) {
  uint32_t r = function_row(f, args);
  if (r == kInvalid) return;
  FunctionTable& t = funcs_[f];
  auto& bucket = t.index[hash_values(args)];
  bucket.erase(std::find(bucket.begin(), bucket.end(), r));
  t.rows[r].live = false;
  ++version_;
}

void EGraph::rebuild_functions() {
  functions_dirty_ = false;
  for (FunctionTable& t : funcs_) {
    if (!t.has_classes) continue;
    size_t arity = t.info.args.size();
    for (uint32_t r = 0; r < t.rows.size(); ++r) {
      auto& row = t.rows[r];
      if (!row.live) continue;
      std::span<Value> key(t.keys.data() + row.key, arity);
      bool key_changed = false;
      for (Value& v : key)
        key_changed |= v.kind() == ValueKind::Class && find(v.as_class()) != v.as_class();
      if (row.out.kind() == ValueKind::Class && find(row.out.as_class()) != row.out.as_class()) {
        row.out = Value::cls(find(row.out.as_class()));
        row.stamp = clock_;
      }
      if (!key_changed) continue;
      auto& old_bucket = t.index[hash_values(key)];
      old_bucket.erase(std::find(old_bucket.begin(), old_bucket.end(), r));
      for (Value& v : key)
        if (v.kind() == ValueKind::Class) v = Value::cls(find(v.as_class()));
      row.stamp = clock_;
      uint32_t twin = function_row(static_cast<FuncId>(&t - funcs_.data()), key);
      if (twin == kInvalid) {
        t.index[hash_values(key)].push_back(r);
        continue;
      }
      row.live = false;  // merge into the surviving row
      auto& keep = t.rows[twin];
      if (row.out.kind() == ValueKind::Class) {
        union_classes(keep.out.as_class(), row.out.as_class());
      } else {
        Value merged = merge_values(t.info.merge, keep.out, row.out);
        if (!(merged == keep.out)) keep.out = merged, keep.stamp = clock_;
      }
    }
  }
}

// ---------------------------------------------------------------- inspection

std::vector<ClassId> EGraph::classes() const {
  std::vector<ClassId> out;
  for (ClassId c = 0; c < uf_.size(); ++c)
    if (uf_[c] == c) out.push_back(c);
  return out;
}

std::vector<NodeId> EGraph::class_nodes(ClassId c, bool include_subsumed) const {
  std::vector<NodeId> out;
  for (auto [op, n] : classes_[find(c)].nodes) {
    uint8_t f = nodes_[n].flags;
    if (f & kDead) continue;
    if ((f & kSubsumed) && !include_subsumed) continue;
    out.push_back(n);
  }
  return out;
}

std::span<const ClassId> EGraph::children(NodeId n) const {
  return {children_of(nodes_[n]), ops_[nodes_[n].op].num_children};
}

std::span<const Value> EGraph::payloads(NodeId n) const {
  return {payload_store_.data() + nodes_[n].payloads, ops_[nodes_[n].op].num_payloads};
}

Value EGraph::node_arg(NodeId n, size_t arg) const {
  const ENode& e = nodes_[n];
  const OpInfo& info = ops_[e.op];
  if (info.kinds[arg] == ValueKind::Class)
    return Value::cls(find(children_of(e)[info.slot[arg]]));
  return payload_store_[e.payloads + info.slot[arg]];
}

std::string EGraph::node_to_string(NodeId n) const {
  const OpInfo& info = ops_[nodes_[n].op];
  std::string s = "(";
  s += info.name;
  for (size_t i = 0; i < info.args.size(); ++i) {
    s += ' ';
    s += node_arg(n, i).to_string();
  }
  s += ')';
  return s;
}

std::string EGraph::dump() const {
  std::ostringstream os;
  for (ClassId c : classes()) {
    std::vector<std::string> lines;
    for (auto [op, n] : classes_[c].nodes) {
      if (nodes_[n].flags & kDead) continue;
      lines.push_back(node_to_string(n));
      if (nodes_[n].flags & kSubsumed) lines.back() += " :subsumed";
    }
    std::sort(lines.begin(), lines.end());
    os << "e" << c << ":";
    for (auto& l : lines) os << " " << l;
    os << "\n";
  }
  for (const FunctionTable& t : funcs_) {
    std::vector<std::string> lines;
    for (const auto& row : t.rows) {
      if (!row.live) continue;
      std::string s = "(";
      s += t.info.name;
      for (size_t i = 0; i < t.info.args.size(); ++i) {
        s += ' ';
        s += t.keys[row.key + i].to_string();
      }
      s += ") = ";
      s += row.out.to_string();
      lines.push_back(std::move(s));
    }
    std::sort(lines.begin(), lines.end());
    for (auto& l : lines) os << l << "\n";
  }
  return os.str();
}

}  // namespace luminal::egraph
