// Payload values and small engine behaviours not covered by the rule suites.
#include <gtest/gtest.h>

#include <cmath>

#include "luminal/egraph/egraph.hpp"
#include "luminal/error.hpp"

using namespace luminal::egraph;

TEST(Value, InterningMakesEqualityAndHashConstantTime) {
  Value a = Value::string("stride"), b = Value::string(std::string("str") + "ide");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.bits(), b.bits());
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(a.as_string(), "stride");
  EXPECT_FALSE(a == Value::string("other"));
  // -0.0 is a different constant from 0.0 (x + -0.0 is x; x + 0.0 is not, at x = -0.0).
  EXPECT_FALSE(Value::f64(0.0) == Value::f64(-0.0));
  EXPECT_TRUE(std::signbit(Value::f64(-0.0).as_f64()));
  EXPECT_FALSE(Value::i64(1) == Value::f64(1.0));  // kinds differ
  EXPECT_FALSE(Value::i64(3) == Value::cls(3));
  EXPECT_EQ(Value::i64(-7).to_string(), "-7");
  EXPECT_EQ(Value::f64(2).to_string(), "2.0");
  EXPECT_EQ(Value::string("x").to_string(), "\"x\"");
  EXPECT_EQ(Value::cls(4).to_string(), "e4");
  EXPECT_TRUE(value_less(Value::i64(-1), Value::i64(2)));
  EXPECT_TRUE(value_less(Value::string("a"), Value::string("b")));
}

TEST(EGraphApi, BuildWithoutRuleFiles) {
  EGraph g;
  SortId math = g.declare_sort("Math");
  SortId i64 = *g.find_sort("i64");
  OpId num = g.declare_constructor("Num", {i64}, math);
  OpId add = g.declare_constructor("Add", {math, math}, math);
  ClassId one = g.add(num, std::vector<Value>{Value::i64(1)});
  ClassId two = g.add(num, std::vector<Value>{Value::i64(2)});
  ClassId sum = g.add(add, std::vector<Value>{Value::cls(one), Value::cls(two)});
  EXPECT_EQ(g.add(add, std::vector<Value>{Value::cls(one), Value::cls(two)}), sum);  // hashcons
  EXPECT_EQ(g.num_nodes(), 3u);
  EXPECT_EQ(g.node_to_string(g.class_nodes(sum)[0]), "(Add e0 e1)");
  EXPECT_THROW(g.add(add, std::vector<Value>{Value::cls(one)}), luminal::Error);            // arity
  EXPECT_THROW(g.add(num, std::vector<Value>{Value::string("1")}), luminal::Error);         // payload sort
  EXPECT_THROW(g.add(add, std::vector<Value>{Value::cls(one), Value::i64(2)}), luminal::Error);
  // A rule built in C++ goes through the same validation as a parsed one.
  Rule bad;
  bad.name = "bad";
  bad.vars = {{"?x", math}};
  RuleTerm t;
  t.kind = RuleTerm::Kind::Var;
  t.var = 0;
  bad.terms.push_back(t);
  Action act;
  act.kind = Action::Kind::Build;
  act.a = 0;
  bad.actions.push_back(act);
  EXPECT_THROW(g.add_rule(bad), luminal::Error);
}

TEST(EGraphApi, TopLevelFormsAndFunctionDeletes) {
  EGraph g;
  g.load_string(R"(
    (datatype T (Leaf String) (Node T T))
    (function weight (T) i64 :merge (max old new))
    (let a (Leaf "a"))
    (let b (Leaf "b"))
    (set (weight a) 3)
    (set (weight b) 5)
    (union a b)
    (ruleset cleanup)
    (rule ((= ?w (weight ?x)) (> ?w 4)) ((delete (weight ?x))) :ruleset cleanup :name "forget-heavy")
  )");
  ClassId a = *g.global("a");
  EXPECT_EQ(g.find(a), g.find(*g.global("b")));
  FuncId w = *g.find_function("weight");
  EXPECT_EQ(g.get_function(w, std::vector<Value>{Value::cls(a)}), Value::i64(5));  // max merge on union
  g.run(Schedule::run("cleanup"));
  EXPECT_FALSE(g.get_function(w, std::vector<Value>{Value::cls(a)}));
  EXPECT_NE(g.dump().find("(Leaf \"a\")"), std::string::npos);
}
