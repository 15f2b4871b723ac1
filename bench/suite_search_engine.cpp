// E-graph engine throughput on egg's math workload: commutativity, associativity,
// distributivity, factoring and constant folding over a set of expressions from egg's
// tests/math.rs, each grown to a node budget. Prints one JSON object per line.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <string>
#include <vector>

#include "luminal/egraph/egraph.hpp"

using namespace luminal::egraph;

static constexpr const char* kRules = R"(
(datatype Math
  (Num i64) (Var String)
  (Add Math Math) (Sub Math Math) (Mul Math Math) (Div Math Math)
  (Pow Math Math) (Sqrt Math) (Neg Math))
(ruleset math)
(rewrite (Add ?a ?b) (Add ?b ?a) :ruleset math :name "comm-add")
(rewrite (Mul ?a ?b) (Mul ?b ?a) :ruleset math :name "comm-mul")
(rewrite (Add ?a (Add ?b ?c)) (Add (Add ?a ?b) ?c) :ruleset math :name "assoc-add")
(rewrite (Mul ?a (Mul ?b ?c)) (Mul (Mul ?a ?b) ?c) :ruleset math :name "assoc-mul")
(rewrite (Sub ?a ?b) (Add ?a (Mul (Num -1) ?b)) :ruleset math :name "sub-canon")
(rewrite (Add ?a (Num 0)) ?a :ruleset math :name "zero-add")
(rewrite (Mul ?a (Num 0)) (Num 0) :ruleset math :name "zero-mul")
(rewrite (Mul ?a (Num 1)) ?a :ruleset math :name "one-mul")
(rewrite (Sub ?a ?a) (Num 0) :ruleset math :name "cancel-sub")
(rewrite (Mul ?a (Add ?b ?c)) (Add (Mul ?a ?b) (Mul ?a ?c)) :ruleset math :name "distribute")
(rewrite (Add (Mul ?a ?b) (Mul ?a ?c)) (Mul ?a (Add ?b ?c)) :ruleset math :name "factor")
(rewrite (Mul (Pow ?a ?b) (Pow ?a ?c)) (Pow ?a (Add ?b ?c)) :ruleset math :name "pow-mul")
(rewrite (Pow ?x (Num 1)) ?x :ruleset math :name "pow1")
(rewrite (Pow ?x (Num 2)) (Mul ?x ?x) :ruleset math :name "pow2")
(rewrite (Div ?a ?a) (Num 1) :when ((= ?a (Num ?n)) (!= ?n 0)) :ruleset math :name "div-self")
(rewrite (Div (Mul ?a ?b) ?c) (Mul ?a (Div ?b ?c)) :ruleset math :name "mul-div")
(rule ((= ?e (Add (Num ?a) (Num ?b)))) ((union ?e (Num (+ ?a ?b)))) :ruleset math :name "fold-add")
(rule ((= ?e (Mul (Num ?a) (Num ?b)))) ((union ?e (Num (* ?a ?b)))) :ruleset math :name "fold-mul")
)";

static const char* kExprs[] = {
    R"((Div (Num 1) (Sub (Div (Add (Num 1) (Sqrt (Var "five"))) (Num 2)) (Div (Sub (Num 1) (Sqrt (Var "five"))) (Num 2)))))",
    R"((Mul (Add (Var "x") (Num 3)) (Add (Var "x") (Num 1))))",
    R"((Add (Var "x") (Add (Var "x") (Add (Var "x") (Var "x")))))",
    R"((Sub (Mul (Var "y") (Add (Var "x") (Var "y"))) (Mul (Var "x") (Add (Var "x") (Var "y")))))",
    R"((Add (Mul (Var "a") (Var "b")) (Mul (Var "a") (Add (Var "c") (Pow (Var "b") (Num 2))))))",
    R"((Mul (Sub (Var "a") (Num 1)) (Add (Var "a") (Mul (Num 2) (Var "b")))))",
    R"((Add (Var "a") (Add (Var "b") (Add (Var "c") (Add (Var "d") (Add (Var "e") (Add (Var "f") (Var "g"))))))))",
    R"((Mul (Add (Var "a") (Var "b")) (Mul (Add (Var "c") (Num 2)) (Add (Var "d") (Var "e")))))",
    R"((Div (Mul (Var "a") (Num 2)) (Num 2)))",
};

// CPU time of this process: the machine is shared, so wall time measures the neighbours.
static double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Measurement {
  double cpu = 0, wall = 0, search = 0, apply = 0, rebuild = 0;
  size_t nodes = 0, iterations = 0, matches = 0;
  int reps = 1;
  double median_cpu = 0;
};

// Grows `expr` under the rules from a cloned, pre-parsed engine; `cpu` receives the
// CPU seconds of adding the term and running.
static RunReport grow(const EGraph& base, const char* expr, const RunOptions& opt, double& cpu) {
  EGraph g = base;
  double c0 = cpu_seconds();
  g.add_term(expr);
  RunReport r = g.run(Schedule::saturate({Schedule::run("math")}), opt);
  cpu = cpu_seconds() - c0;
  return r;
}

// Grows every expression to `node_limit` e-nodes (or 30 iterations, or saturation);
// sums e-nodes and CPU time.
static Measurement measure(const EGraph& base, size_t node_limit, bool naive, bool verbose) {
  Measurement m;
  RunOptions opt;
  opt.node_limit = node_limit;
  opt.iteration_limit = 30;
  opt.time_limit_s = 60;
  opt.naive = naive;
  for (const char* expr : kExprs) {
    auto t0 = std::chrono::steady_clock::now();
    double cpu = 0;
    RunReport r = grow(base, expr, opt, cpu);
    m.cpu += cpu;
    m.wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    m.nodes += r.nodes;
    m.iterations += r.iterations;
    for (const RuleReport& rr : r.rules) m.matches += rr.matches;
    m.search += r.search_s, m.apply += r.apply_s, m.rebuild += r.rebuild_s;
    if (verbose) std::fprintf(stderr, "%s\n", r.to_string().c_str());
  }
  return m;
}

static void print(const char* name, size_t node_limit, const Measurement& m, bool with_target) {
  std::printf(
      "{\"suite\":\"search\",\"case\":\"%s\",\"value\":%.0f,\"unit\":\"enodes/s\",\"better\":\"higher\",%s"
      "\"note\":\"egg math suite style: %zu expressions, 18 rules (comm/assoc/distribute/factor/cancel/fold), "
      "each grown to %zu e-nodes, 30 iterations or saturation, from a cloned pre-parsed engine, best of %d repetitions; "
      "%zu e-nodes, %zu iterations, %zu matches in %.2fs CPU (%.2fs wall on a shared machine; wall shares: "
      "search %.0f%%, apply %.0f%%, rebuild %.0f%%). Value = e-nodes / CPU seconds of the fastest "
      "repetition; the median repetition gives %.0f e-nodes/s. "
      "Published, not run here: egg 0.6 math_simplify_root reached 1.0M e-nodes in 17.05s (~59k e-nodes/s, "
      "Ryzen 9 3900X); egg's suite ran at 30-95k e-nodes/s. Same-run peer: case engine_throughput_vs_egglog\"}\n",
      name, m.nodes / m.cpu, with_target ? "\"target\":200000," : "", std::size(kExprs), node_limit, m.reps,
      m.nodes, m.iterations, m.matches, m.cpu, m.wall, 100 * m.search / m.wall, 100 * m.apply / m.wall,
      100 * m.rebuild / m.wall, m.nodes / m.median_cpu);
}

// --iterations N: for the same-run comparison with egglog (bench/suite_search.py):
// each expression runs exactly N iterations with no node limit, best of 3; prints one
// JSON object with the program text, and e-nodes and CPU seconds per expression.
static void print_json_string(const char* text) {
  std::putchar('"');
  for (const char* c = text; *c; ++c) {
    if (*c == '"' || *c == '\\') std::printf("\\%c", *c);
    else if (*c == '\n') std::printf("\\n");
    else std::putchar(*c);
  }
  std::putchar('"');
}

static int iterations_mode(const EGraph& base, size_t iterations) {
  RunOptions opt;
  opt.node_limit = SIZE_MAX;
  opt.iteration_limit = iterations;
  opt.time_limit_s = 600;
  std::printf("{\"rules\":");
  print_json_string(kRules);
  std::printf(",\"iterations\":%zu,\"expressions\":[", iterations);
  for (size_t i = 0; i < std::size(kExprs); ++i) {
    double best = 1e30, cpu = 0;
    size_t nodes = 0;
    for (int rep = 0; rep < 3; ++rep) {
      nodes = grow(base, kExprs[i], opt, cpu).nodes;
      best = std::min(best, cpu);
    }
    std::printf("%s{\"term\":", i ? "," : "");
    print_json_string(kExprs[i]);
    std::printf(",\"nodes\":%zu,\"cpu_s\":%.6f}", nodes, best);
  }
  std::printf("]}\n");
  return 0;
}

// Usage: suite_search_engine [node_budget [naive] [-v]] | --iterations N. Without
// arguments prints the standard case (30k e-nodes per expression, about egg's runner
// scale) and a 100k one.
int main(int argc, char** argv) {
  EGraph base;
  base.load_string(kRules, "math.egg");
  if (argc > 2 && std::string(argv[1]) == "--iterations") return iterations_mode(base, std::stoul(argv[2]));
  bool verbose = false, naive = false;
  for (int i = 2; i < argc; ++i) {
    verbose |= std::string(argv[i]) == "-v";
    naive |= std::string(argv[i]) == "naive";
  }
  // The machine is shared: report the fastest of several repetitions (the first also
  // warms the allocator), as Google Benchmark's min does.
  auto best_of = [&](size_t limit, int reps) {
    Measurement best = measure(base, limit, naive, verbose);
    std::vector<double> cpus = {best.cpu};
    for (int r = 1; r < reps; ++r) {
      Measurement m = measure(base, limit, naive, false);
      cpus.push_back(m.cpu);
      if (m.cpu < best.cpu) best = m;
    }
    std::sort(cpus.begin(), cpus.end());
    best.reps = reps;
    best.median_cpu = cpus[cpus.size() / 2];
    return best;
  };
  if (argc > 1) {
    size_t limit = std::stoul(argv[1]);
    print("engine_throughput", limit, best_of(limit, 5), true);
    return 0;
  }
  print("engine_throughput", 30'000, best_of(30'000, 10), true);
  print("engine_throughput_100k_budget", 100'000, best_of(100'000, 3), false);
  return 0;
}
