// The rule-file language: declarations, rules, schedules, and precise load errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "luminal/egraph/egraph.hpp"
#include "luminal/egraph/extract.hpp"
#include "luminal/error.hpp"

using namespace luminal::egraph;

namespace {

constexpr const char* kDecls = R"(
(datatype Math (Num i64) (Var String) (Add Math Math) (Mul Math Math))
(function size (Math) i64 :merge (min old new))
(ruleset r)
)";

// Loads `text` after kDecls and returns the error message ("" if it loaded).
std::string load_error(const std::string& text) {
  EGraph g;
  g.load_string(kDecls, "decls.egg");
  try {
    g.load_string(text, "bad.egg");
  } catch (const luminal::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(RuleFile, ParseErrorsHaveFileLineColumn) {
  EXPECT_EQ(load_error("(rule ((= ?e (Add ?a ?b)))\n  ((union ?e (Add ?b ?a)))"),
            "bad.egg:1:1: unterminated list: '(' is never closed");
  EXPECT_EQ(load_error("(ruleset x))"), "bad.egg:1:12: unexpected ')'");
  EXPECT_EQ(load_error("; comment\n  (let x (Var \"abc))"), "bad.egg:2:15: unterminated string");
  EXPECT_EQ(load_error("\n\n   (frobnicate 1)"), "bad.egg:3:5: unknown top-level form 'frobnicate'");
}

TEST(RuleFile, UnboundActionVariableIsRejected) {
  EXPECT_EQ(load_error("(rule ((= ?e (Add ?a ?b)))\n      ((union ?e (Mul ?a ?z))) :name \"oops\")"),
            "bad.egg:2:26: rule \"oops\": variable ?z is used in an action but not bound by the rule's patterns");
  EXPECT_EQ(load_error("(rewrite (Add ?a ?b) (Add ?b ?c))"),
            "bad.egg:1:30: rule \"(Add ?a ?b) => (Add ?b ?c)\": variable ?c is used in an action but not bound by the rule's patterns");
  // A let binds for the actions after it.
  EXPECT_EQ(load_error("(rule ((= ?e (Add ?a ?b))) ((let ?m (Mul ?a ?b)) (union ?e ?m)))"), "");
}

TEST(RuleFile, UnknownConstructorsAndArity) {
  EXPECT_EQ(load_error("(rewrite (Add ?a ?b) (Sub ?a ?b))"),
            "bad.egg:1:23: unknown constructor, function or primitive 'Sub'");
  EXPECT_EQ(load_error("(rewrite (Add ?a ?b ?c) (Add ?a ?b))"),
            "bad.egg:1:10: constructor Add expects 2 arguments, got 3");
  EXPECT_EQ(load_error("(rule ((= ?e (Add ?a ?b))) ((union ?e (Num 1 2))))"),
            "bad.egg:1:39: constructor Num expects 1 argument, got 2");
  EXPECT_EQ(load_error("(rule ((= ?e (Add x ?b))) ((union ?e ?b)))"),
            "bad.egg:1:19: unknown identifier 'x' (variables start with '?', nullary constructors are written (x))");
  EXPECT_EQ(load_error("(rule ((= ?e (Num \"one\"))) ((union ?e (Num 1))))"),
            "bad.egg:1:19: expected a i64, got the String literal \"one\"");
  EXPECT_EQ(load_error("(rule ((= ?e (Add ?a ?b)) (= ?b (Num ?a))) ((union ?e ?a)))"),
            "bad.egg:1:38: rule \"rule@1:1\": ?a is used as i64 here but as Math elsewhere");
  EXPECT_EQ(load_error("(rewrite (Add ?a ?b) ?a :ruleset nope)"),
            "bad.egg:1:34: rule \"(Add ?a ?b) => ?a\": unknown ruleset 'nope' (declare it with (ruleset nope))");
  EXPECT_EQ(load_error("(datatype Math (X))"), "bad.egg:1:11: sort 'Math' is already declared");
  EXPECT_EQ(load_error("(function f (Nope) i64)"), "bad.egg:1:14: unknown sort 'Nope'");
  EXPECT_EQ(load_error("(function f (Math) i64 :merge (+ old new))"),
            "bad.egg:1:31: unsupported :merge (+ old new) (use old, new, (min old new) or (max old new))");
  EXPECT_EQ(load_error("(run-schedule (saturate nope))"), "bad.egg:1:25: unknown ruleset 'nope'");
  EXPECT_EQ(load_error("(rule ((= ?e (Add ?a ?b))) ((union ?e ?a)) :nmae \"x\")"),
            "bad.egg:1:44: unknown option ':nmae' for rule");
}

TEST(RuleFile, FullLanguage) {
  EGraph g;
  g.register_primitive("expr-coeff", [](std::span<const Value> a) -> std::optional<Value> {
    // A stand-in for the host's Expression primitive: coefficient of "z" in "k*z".
    if (a.size() != 2 || a[0].kind() != ValueKind::String || a[1].kind() != ValueKind::String)
      return std::nullopt;
    const std::string& s = a[0].as_string();
    size_t star = s.find("*" + a[1].as_string());
    if (star == std::string::npos) return std::nullopt;
    return Value::i64(std::stoll(s.substr(0, star)));
  });
  g.load_string(R"(
    ; sorts, constructors with costs, mutual recursion
    (datatype* (IR (Op Kind IList) (Input String)) (Kind (Mul String :cost 2) (Matmul i64) (Noop))
               (IList (ICons IR IList) (INil)))
    (constructor Slow (IR) IR :cost 100)
    (function dtype (IR) String :merge new)
    (relation is-input (IR))
    (ruleset lower)
    (ruleset analysis)
    (rule ((= ?i (Input ?name))) ((is-input ?i) (set (dtype ?i) "f32")) :ruleset analysis :name "mark")
    ; a multi-pattern rule with a host primitive in a guard and in an action
    (rule ((= ?m (Op (Mul ?stride) (ICons ?a (ICons ?b (INil)))))
           (is-input ?a) (is-input ?b)
           (= ?dt (dtype ?a)) (= ?dt (dtype ?b))
           (> (expr-coeff ?stride "z") 1))
          ((let ?k (Op (Matmul (expr-coeff ?stride "z")) (ICons ?a (ICons ?b (INil)))))
           (union ?m ?k)
           (set (dtype ?k) ?dt))
          :ruleset lower :name "recognise-matmul")
    (birewrite (Slow ?x) (Op (Noop) (ICons ?x (INil))) :ruleset lower)
    (let slow (Slow (Input "x")))
    (let x (Input "x"))
    (let y (Input "y"))
    (let prod (Op (Mul "4*z") (ICons x (ICons y (INil)))))
    (let unit (Op (Mul "1*z") (ICons x (ICons y (INil)))))
    (run-schedule (saturate analysis) (repeat 2 (run lower)))
  )");
  ASSERT_TRUE(g.file_schedule());
  RunReport r = g.run(*g.file_schedule());
  EXPECT_EQ(r.stop, StopReason::Saturated);
  ClassId prod = *g.global("prod");
  EXPECT_EQ(g.find(prod), g.find(g.add_term(R"((Op (Matmul 4) (ICons (Input "x") (ICons (Input "y") (INil)))))")));
  EXPECT_EQ(g.class_nodes(*g.global("unit")).size(), 1u);  // guard 1 > 1 failed
  FuncId dtype = *g.find_function("dtype");
  EXPECT_EQ(g.get_function(dtype, std::vector<Value>{Value::cls(prod)}), Value::string("f32"));
  EXPECT_EQ(Extractor(g).best_string(prod), R"((Op (Matmul 4) (ICons (Input "x") (ICons (Input "y") (INil)))))");
  // The birewrite made Slow and Noop equal; extraction avoids the :cost 100 node.
  EXPECT_EQ(Extractor(g).best_string(*g.global("slow")), R"((Op (Noop) (ICons (Input "x") (INil))))");
  bool found = false;
  for (const RuleReport& rr : r.rules) found |= rr.name == "recognise-matmul" && rr.matches == 1;
  EXPECT_TRUE(found) << r.to_string();
}

TEST(RuleFile, LoadFileReportsPath) {
  std::string path = ::testing::TempDir() + "egraph_rule_file_test.egg";
  {
    std::ofstream out(path);
    out << "(datatype T (A) (B))\n(rewrite (A) (C))\n";
  }
  EGraph g;
  try {
    g.load_file(path);
    FAIL() << "expected an error";
  } catch (const luminal::Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ":2:15: unknown constructor, function or primitive 'C'");
  }
  std::remove(path.c_str());
  EXPECT_THROW(g.load_file("/nonexistent/rules.egg"), luminal::Error);
}

// :tolerance declares how far a rule's two sides may differ (read by the rule verifier).
TEST(RuleFile, ToleranceOption) {
  EGraph g;
  g.load_string(kDecls, "decls.egg");
  g.load_string(R"((rewrite (Add ?a ?b) (Add ?b ?a) :ruleset r :name "t" :tolerance 1e-4)
(rule ((= ?e (Mul ?a ?b))) ((union ?e (Mul ?b ?a))) :ruleset r :tolerance 2)
(rewrite (Mul ?a ?b) (Mul ?b ?a) :ruleset r :name "exact"))",
                "tol.egg");
  ASSERT_EQ(g.rules().size(), 3u);
  EXPECT_DOUBLE_EQ(g.rules()[0].tolerance, 1e-4);
  EXPECT_DOUBLE_EQ(g.rules()[1].tolerance, 2.0);
  EXPECT_EQ(g.rules()[2].tolerance, 0.0);
  EXPECT_EQ(load_error("(rewrite (Add ?a ?b) (Add ?b ?a) :tolerance -1)"),
            "bad.egg:1:45: :tolerance expects a finite number >= 0, got -1");
  EXPECT_EQ(load_error("(rewrite (Add ?a ?b) (Add ?b ?a) :tolerance \"x\")"),
            "bad.egg:1:45: :tolerance expects a finite number >= 0, got \"x\"");
}
