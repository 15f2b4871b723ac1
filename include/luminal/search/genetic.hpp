// The genetic search over extraction choices. Engine-agnostic: a genome is one choice
// per slot (an e-class with several e-nodes); the caller turns a genome into a program,
// runs it on the device and reports a time or a rejection.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "luminal/compile.hpp"

namespace luminal::search {

using Genome = std::vector<uint32_t>;

enum class Rejection : uint8_t { Throws, Timeout, NaN, Mismatch, Memory, Invalid, kCount };
std::string_view rejection_name(Rejection r);

struct Evaluation {
  std::optional<double> seconds;  // set when the candidate ran
  Rejection rejection = Rejection::Throws;
  std::string detail;             // e.g. the exception message
  bool duplicate = false;         // the same program as an earlier genome: not profiled again
};

struct SearchReport {
  int64_t candidates = 0;        // profiled (accepted + rejected)
  int64_t duplicates_skipped = 0;  // genomes seen before, or programs equal to an earlier one
  int64_t resampled_generations = 0;  // generations drawn at random after one was wholly rejected
  std::array<int64_t, static_cast<size_t>(Rejection::kCount)> rejected{};
  double best_seconds = 0;
  double first_seconds = 0;      // the initial viable candidate
  double search_seconds = 0;
  std::string stop_reason;       // "graph limit", "time limit", "single candidate", ...
  std::string first_rejection_detail;
  std::string summary() const;
};

struct SearchResult {
  Genome best;
  SearchReport report;
};

// Evaluates a generation at once, so a backend can compile its programs in parallel.
using BatchEvaluator = std::function<std::vector<Evaluation>(std::span<const Genome>)>;

struct SearchSetup {
  std::vector<Genome> seeds;      // tried first, in order, until one is viable (e.g. cheapest, unrewritten)
  Genome fallback;                // returned when nothing is viable (correct by construction)
  double time_limit_s = 0;        // this search's share of the compile's budget (0: options')
  // Returned instead of `fallback` when nothing is viable and this genome was tried and
  // rejected only for running past the profile timeout: slowness (a loaded machine, a big
  // program) says nothing against it, and the unrewritten fallback is usually far slower
  // (a materialised broadcast product per matmul). The caller verifies it as any choice.
  std::optional<Genome> slow_fallback;
};

// `choices[i]` is the number of options of slot i (>= 1). `evaluate` is called on
// candidates; it must be deterministic for the result to be. Same seed, same choice.
SearchResult genetic_search(const std::vector<uint32_t>& choices, const CompileOptions& options, SearchSetup setup,
                            const BatchEvaluator& evaluate);
// One candidate at a time, seeded with the all-first-choice genome.
SearchResult genetic_search(const std::vector<uint32_t>& choices, const CompileOptions& options,
                            const std::function<Evaluation(const Genome&)>& evaluate);

// Incremental genome hash: XOR of per-(slot, choice) hashes, so a mutation updates it in O(1).
uint64_t slot_hash(size_t slot, uint32_t choice);
uint64_t genome_hash(const Genome& g);

}  // namespace luminal::search
