// Running rules: schedules, iterations (search, apply, rebuild), budgets, backoff,
// slices near the node limit, and reports. Matching is in match.cpp, actions in
// actions.cpp.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "luminal/egraph/egraph.hpp"
#include "luminal/error.hpp"

namespace luminal::egraph {

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
