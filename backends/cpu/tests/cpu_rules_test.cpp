// Every rule the CPU backend loads (the core rules, its matmul rules and the generated
// fusion rules) verified by the rule verifier, its rewritten programs run on the CPU
// backend against the unrewritten ones on the reference interpreter.
#include <gtest/gtest.h>

#include "rule_verifier.hpp"
#include "luminal/cpu/cpu_runtime.hpp"
#include "luminal/luminal.hpp"
#include "luminal/search/hlir_egraph.hpp"

using namespace luminal;

TEST(CpuRules, EveryRuleIsSoundOnTheCpuBackend) {
  cpu::CpuRuntime cpu;
  std::vector<std::string> files = search::core_rule_files();
  for (auto& f : cpu.rule_files()) files.push_back(f);
  verify::VerifyOptions o;
  o.instances = 6;
  o.max_programs = 6;
  auto results = verify::verify_rule_files(files, cpu, o);
  std::string report = verify::format_report(results);
  int sound = 0;
  for (const auto& r : results) {
    if (!r.disabled.empty() || r.ruleset == "fast-math") continue;
    EXPECT_NE(r.status, verify::Status::Unsound) << r.name << "\n" << report;
    sound += r.status == verify::Status::Sound;
  }
  // Every fusion rule that starts a region (all operands fresh: the "-0" rules) must fire
  // and be sound. Rules that grow a region need a Fused operand, which the generator does
  // not build (they are exercised by the kernel genome fuzzing, tests/search); the matmul
  // rules need operand layouts it rarely draws (exercised by CpuBackend.MatmulLayouts).
  for (const char* name : {"fuse-Exp2-0", "fuse-Sin-0", "fuse-Add-0", "fuse-Mul-0", "fuse-Mod-0", "fuse-SumReduce-0",
                           "fuse-MaxReduce-0", "fuse-Cast-0", "fuse-LessThan-0"}) {
    bool ok = false;
    for (const auto& r : results) ok = ok || (r.name == name && r.status == verify::Status::Sound);
    EXPECT_TRUE(ok) << name << " was not exercised or not sound\n" << report;
  }
  std::printf("%s", report.c_str());
}
