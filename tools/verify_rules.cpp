// luminal_verify_rules [--seed N] [--instances N] [--rule NAME]... [FILE...]
// Verifies every rule of the rule files (default: the core rule files) against the
// reference interpreter and prints one line per rule. Exit status 1 when a rule that a
// compile can run (enabled, not in the opt-in fast-math ruleset) is unsound or untested.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "luminal/reference_runtime.hpp"
#include "luminal/search/hlir_egraph.hpp"
#include "rule_verifier.hpp"

int main(int argc, char** argv) {
  luminal::verify::VerifyOptions options;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seed") options.seed = std::stoull(value());
    else if (a == "--instances") options.instances = std::stoi(value());
    else if (a == "--rule") options.only.push_back(value());
    else if (a == "--help" || a == "-h") {
      std::printf("usage: %s [--seed N] [--instances N] [--rule NAME]... [RULE_FILE...]\n", argv[0]);
      return 0;
    } else files.push_back(a);
  }
  if (files.empty()) files = luminal::search::core_rule_files();
  try {
    auto results = luminal::verify::verify_rule_files(files, luminal::ReferenceRuntime{}, options);
    std::fputs(luminal::verify::format_report(results).c_str(), stdout);
    int bad = 0;
    for (const auto& r : results)
      if (r.status != luminal::verify::Status::Sound && r.disabled.empty() && r.ruleset != "fast-math") ++bad;
    std::printf("%zu rules, %d unsound or untested among those a compile runs by default or on request\n",
                results.size(), bad);
    return bad ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
