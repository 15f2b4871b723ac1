// The rule verifier: every rewrite rule of every rule file checked by differential
// testing against the reference interpreter (in the spirit of Ruler/Enumo's
// evaluation-based rule checking; Alive2 proves instead of sampling).
//
// For each rule, concrete HLIR graphs are generated from its left-hand-side pattern:
// random dtypes, shapes (static and symbolic), and views on every edge (identity,
// broadcast, sliced with steps, permuted, flipped, padded). Pattern variables of the
// IR sort that no atom defines become Input nodes. The graph is lowered to an e-graph,
// only that rule runs (once), and every alternative program of the grown e-graph is
// extracted and executed on the target runtime, then compared with the original
// program on the reference runtime, on inputs full of special values (+-0, +-inf, NaN,
// subnormals, the dtype's extremes, integer overflow) and random ones.
//
// A rule is Sound when every comparison agrees bit for bit (NaN matches NaN, +0 does
// not match -0) or within the tolerance it declares (`:tolerance`); Unsound with a
// counterexample otherwise; Untested when no generated graph made it fire.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "luminal/runtime.hpp"

namespace luminal::verify {

struct VerifyOptions {
  int instances = 32;        // graphs on which the rule fired, wanted per rule
  int max_attempts = 600;    // random graphs tried per rule
  int data_trials = 4;       // input fillings per graph (special values, random, mixed, small ints)
  int max_programs = 32;     // alternative programs compared per graph
  uint64_t seed = 1;
  std::vector<std::string> only;  // rule names to verify; empty: all
};

enum class Status { Sound, Unsound, Untested };
const char* status_name(Status s);

struct RuleResult {
  std::string name, ruleset, location;
  std::string disabled;      // non-empty: the rule never runs in a compile (its reason)
  double tolerance = 0;
  Status status = Status::Untested;
  int instances = 0;         // graphs on which it fired
  int programs = 0;          // alternative programs compared
  int comparisons = 0;       // program x input-filling executions compared
  std::string detail;        // the counterexample, or why it is untested
};

// Verify every rule of `rule_files` (loaded in order into one e-graph, as a compile
// does). Rewritten programs run on fresh copies of `target`; the original always runs
// on the reference runtime.
std::vector<RuleResult> verify_rule_files(const std::vector<std::string>& rule_files, const Runtime& target,
                                          const VerifyOptions& options = {});

// One line per rule: status, name, ruleset, counts, and the counterexample if any.
std::string format_report(const std::vector<RuleResult>& results);

}  // namespace luminal::verify
