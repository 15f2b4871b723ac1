// The rule verifier over every rule file, and on planted unsound rules it must name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "luminal/reference_runtime.hpp"
#include "luminal/search/hlir_egraph.hpp"
#include "rule_verifier.hpp"

using namespace luminal;
using verify::Status;

namespace {

// Every rule file the project ships. Backends add theirs here.
// The core rules and the reference runtime's own backend rules (RefSumMul).
std::vector<std::string> all_rule_files() {
  auto files = search::core_rule_files();
  for (auto& f : ReferenceRuntime{}.rule_files()) files.push_back(f);
  return files;
}

std::string write_rules(const std::string& name, const std::string& text) {
  std::string path = testing::TempDir() + std::to_string(::getpid()) + "-" + name;
  std::ofstream(path) << text;
  return path;
}

const verify::RuleResult& find(const std::vector<verify::RuleResult>& results, const std::string& name) {
  for (const auto& r : results)
    if (r.name == name) return r;
  ADD_FAILURE() << "no result for rule " << name;
  static verify::RuleResult none;
  return none;
}

}  // namespace

// Every rule a compile can run is sound (and was exercised). Disabled rules and the
// opt-in fast-math ruleset are reported but may be unsound: that is why they are off.
TEST(RuleVerifier, EveryShippedRuleIsSoundOrOptIn) {
  auto results = verify::verify_rule_files(all_rule_files(), ReferenceRuntime{});
  std::string report = verify::format_report(results);
  std::printf("%s", report.c_str());
  ASSERT_FALSE(results.empty());
  for (const auto& r : results) {
    if (!r.disabled.empty() || r.ruleset == "fast-math") continue;
    EXPECT_EQ(r.status, Status::Sound) << r.name << ": " << r.detail;
    EXPECT_GT(r.comparisons, 0) << r.name;
  }
}

// The rules that were unsound in the core set are named as such by the verifier.
TEST(RuleVerifier, NamesTheFastMathRulesUnsound) {
  verify::VerifyOptions o;
  o.only = {"exp2-log2"};
  auto results = verify::verify_rule_files(all_rule_files(), ReferenceRuntime{}, o);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].ruleset, "fast-math");
  EXPECT_EQ(results[0].status, Status::Unsound) << verify::format_report(results);
}

// x * 0 -> 0 is wrong for inf and NaN (NaN) and for negative x (-0).
TEST(RuleVerifier, NamesAPlantedMulZero) {
  std::string path = write_rules("planted_mul_zero.egg", R"((ruleset planted)
(rewrite (Mul ?dt ?sh ?a ?va (Constant ?dt ?csh 0.0) ?vc)
         (Mul ?dt ?sh (Constant ?dt ?csh 0.0) ?vc (Constant ?dt ?csh 0.0) ?vc)
         :ruleset planted :name "mul-zero")
(rewrite (Mul ?dt ?sh ?a ?va ?b ?vb) (Mul ?dt ?sh ?b ?vb ?a ?va) :ruleset planted :name "mul-commute-ok")
)");
  auto results = verify::verify_rule_files({path}, ReferenceRuntime{});
  std::printf("%s", verify::format_report(results).c_str());
  const auto& bad = find(results, "mul-zero");
  EXPECT_EQ(bad.status, Status::Unsound);
  EXPECT_NE(bad.detail.find("expected"), std::string::npos) << bad.detail;
  EXPECT_EQ(find(results, "mul-commute-ok").status, Status::Sound);
  EXPECT_NE(verify::format_report(results).find("UNSOUND  mul-zero"), std::string::npos);
}

// add-zero without its view guard: (x.t() + 0) would become x, untransposed.
TEST(RuleVerifier, NamesAddZeroWithoutItsViewGuard) {
  std::string path = write_rules("planted_add_zero.egg", R"((ruleset planted)
(rule ((= ?e (Add ?dt ?sh ?a ?va ?c ?vc)) (= ?c (Constant ?dt ?csh -0.0)) (= ?sh (shape-of ?a))
       (= ?vc (broadcast-view ?sh)))
      ((union ?e ?a)) :ruleset planted :name "add-zero-unguarded")
(rule ((= ?e (Add ?dt ?sh ?a ?va ?c ?vc)) (= ?c (Constant ?dt ?csh -0.0)) (= ?sh (shape-of ?a)) (view-identity ?va ?sh)
       (= ?vc (broadcast-view ?sh)))
      ((union ?e ?a)) :ruleset planted :name "add-neg-zero")
)");
  auto results = verify::verify_rule_files({path}, ReferenceRuntime{});
  std::printf("%s", verify::format_report(results).c_str());
  EXPECT_EQ(find(results, "add-zero-unguarded").status, Status::Unsound);
  EXPECT_EQ(find(results, "add-neg-zero").status, Status::Sound);
}

// mul-one as it was: a constant read through a padded view is 0 in the padding, so
// x * that is not x there (concat places its pieces this way).
TEST(RuleVerifier, NamesMulOneThroughAPaddedConstant) {
  std::string path = write_rules("planted_mul_one.egg", R"((ruleset planted)
(rule ((= ?e (Mul ?dt ?sh ?a ?va ?c ?vc)) (= ?c (Constant ?dt ?csh 1.0)) (= ?sh (shape-of ?a)) (view-identity ?va ?sh))
      ((union ?e ?a)) :ruleset planted :name "mul-one-any-view")
)");
  auto results = verify::verify_rule_files({path}, ReferenceRuntime{});
  std::printf("%s", verify::format_report(results).c_str());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].status, Status::Unsound);
}

// Reductions are generated too (axis payloads, reduce views of any kind).
TEST(RuleVerifier, Reductions) {
  std::string path = write_rules("planted_reduce.egg", R"((ruleset planted)
(rewrite (SumReduce ?dt ?sh ?ax ?x ?v) (MaxReduce ?dt ?sh ?ax ?x ?v) :ruleset planted :name "sum-is-max")
(rewrite (SumReduce ?dt ?sh ?ax (Mul ?mdt ?msh ?a ?va ?b ?vb) ?v) (SumReduce ?dt ?sh ?ax (Mul ?mdt ?msh ?b ?vb ?a ?va) ?v)
         :ruleset planted :name "sum-of-mul-commute")
)");
  auto results = verify::verify_rule_files({path}, ReferenceRuntime{});
  std::printf("%s", verify::format_report(results).c_str());
  EXPECT_EQ(find(results, "sum-is-max").status, Status::Unsound);
  EXPECT_EQ(find(results, "sum-of-mul-commute").status, Status::Sound);
}

// A rule that never fires on generated graphs is untested, never passed.
TEST(RuleVerifier, AnUnmatchableRuleIsUntested) {
  std::string path = write_rules("planted_never.egg", R"((ruleset planted)
(rule ((= ?e (Add ?dt ?sh ?a ?va ?c ?vc)) (= ?dt "no-such-dtype")) ((union ?e ?a)) :ruleset planted :name "never")
)");
  verify::VerifyOptions o;
  o.max_attempts = 50;
  auto results = verify::verify_rule_files({path}, ReferenceRuntime{}, o);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].status, Status::Untested);
  EXPECT_EQ(results[0].comparisons, 0);
}

// A declared tolerance admits rounding differences and nothing else.
TEST(RuleVerifier, ToleranceIsReadFromTheRule) {
  std::string path = write_rules("planted_tolerance.egg", R"((ruleset planted)
(rewrite (Mul ?dt ?sh ?a ?va ?b ?vb) (Mul ?dt ?sh ?b ?vb ?a ?va) :ruleset planted :name "tol" :tolerance 1e-3)
)");
  auto results = verify::verify_rule_files({path}, ReferenceRuntime{});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_DOUBLE_EQ(results[0].tolerance, 1e-3);
  EXPECT_EQ(results[0].status, Status::Sound);
}
