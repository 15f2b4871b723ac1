#include "luminal/search/genetic.hpp"

#include <algorithm>
#include <cstdio>
#include <random>
#include <sstream>
#include <unordered_set>

#include "luminal/error.hpp"

namespace luminal::search {

std::string_view rejection_name(Rejection r) {
  switch (r) {
    case Rejection::Throws: return "threw";
    case Rejection::Timeout: return "timed out";
    case Rejection::NaN: return "produced NaN";
    case Rejection::Mismatch: return "wrong values";
    case Rejection::Memory: return "over the memory limit";
    case Rejection::Invalid: return "invalid (cycle)";
    default: return "?";
  }
}

uint64_t slot_hash(size_t slot, uint32_t choice) {
  uint64_t x = (static_cast<uint64_t>(slot) << 32) ^ choice ^ 0x9E3779B97F4A7C15ull;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t genome_hash(const Genome& g) {
  uint64_t h = 0;
  for (size_t i = 0; i < g.size(); ++i) h ^= slot_hash(i, g[i]);
  return h;
}

std::string SearchReport::summary() const {
  std::ostringstream os;
  os << "search: " << candidates << " candidates, best " << best_seconds * 1e3 << " ms (first "
     << first_seconds * 1e3 << " ms), " << search_seconds << " s";
  int64_t total_rejected = 0;
  for (auto r : rejected) total_rejected += r;
  if (total_rejected) {
    os << "; rejected " << total_rejected << ":";
    for (size_t i = 0; i < rejected.size(); ++i)
      if (rejected[i]) os << " " << rejection_name(static_cast<Rejection>(i)) << "=" << rejected[i];
  }
  if (duplicates_skipped) os << "; duplicates skipped " << duplicates_skipped;
  os << "; stopped: " << stop_reason;
  return os.str();
}

namespace {
struct Scored {
  Genome genome;
  uint64_t hash;
  double seconds;
};

void progress(const CompileOptions& o, const SearchReport& r, double elapsed, double limit) {
  if (!o.verbose_) return;
  int64_t budget = o.search_graph_limit_;
  int width = 30;
  double frac = std::max(budget > 0 ? static_cast<double>(std::min<int64_t>(r.candidates, budget)) / budget : 1.0,
                         limit > 0 ? std::min(elapsed / limit, 1.0) : 1.0);
  int filled = static_cast<int>(width * frac);
  std::fprintf(stderr, "\r  search [%s%s] %lld/%lld candidates, %.1f/%.0f s, best %.3f ms",
               std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
               static_cast<long long>(r.candidates), static_cast<long long>(budget), elapsed, limit,
               r.best_seconds * 1e3);
  std::fflush(stderr);
}
}  // namespace

SearchResult genetic_search(const std::vector<uint32_t>& choices, const CompileOptions& o,
                            const std::function<Evaluation(const Genome&)>& evaluate) {
  SearchSetup setup;
  setup.seeds = {Genome(choices.size(), 0)};
  setup.fallback = setup.seeds.front();
  return genetic_search(choices, o, std::move(setup), [&](std::span<const Genome> batch) {
    std::vector<Evaluation> out;
    for (const auto& g : batch) out.push_back(evaluate(g));
    return out;
  });
}

SearchResult genetic_search(const std::vector<uint32_t>& choices, const CompileOptions& o, SearchSetup setup,
                            const BatchEvaluator& evaluate) {
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - start).count(); };
  const double time_limit = setup.time_limit_s > 0 ? setup.time_limit_s : o.search_time_limit_.count();
  std::mt19937_64 rng(o.seed_);
  SearchReport report;
  std::vector<size_t> mutable_slots;
  for (size_t i = 0; i < choices.size(); ++i) {
    LUMINAL_ASSERT(choices[i] >= 1, "slot ", i, " has no options");
    if (choices[i] > 1) mutable_slots.push_back(i);
  }
  LUMINAL_ASSERT(setup.fallback.size() == choices.size(), "fallback genome size");
  auto random_genome = [&] {
    Genome g(choices.size(), 0);
    for (size_t i : mutable_slots) g[i] = static_cast<uint32_t>(rng() % choices[i]);
    return g;
  };
  std::unordered_set<uint64_t> seen;
  std::vector<Scored> best;  // sorted by time, at most keep_best
  const uint64_t slow_fallback_hash = setup.slow_fallback ? genome_hash(*setup.slow_fallback) : 0;
  bool slow_fallback_timed_out = false;
  // Evaluate a batch; returns how many were viable.
  auto consider = [&](std::vector<std::pair<Genome, uint64_t>> batch) -> int {
    std::vector<Genome> genomes;
    for (auto& [g, h] : batch) genomes.push_back(g);
    std::vector<Evaluation> evals = evaluate(genomes);
    LUMINAL_ASSERT(evals.size() == batch.size(), "evaluator returned ", evals.size(), " results for ", batch.size());
    int viable = 0;
    for (size_t k = 0; k < batch.size(); ++k) {
      Evaluation& e = evals[k];
      if (e.duplicate) {
        report.duplicates_skipped++;
        if (e.seconds) viable++;
        continue;
      }
      report.candidates++;
      if (!e.seconds) {
        if (setup.slow_fallback && batch[k].second == slow_fallback_hash && batch[k].first == *setup.slow_fallback)
          slow_fallback_timed_out = e.rejection == Rejection::Timeout;
        report.rejected[static_cast<size_t>(e.rejection)]++;
        if (report.first_rejection_detail.empty()) report.first_rejection_detail = e.detail;
        continue;
      }
      viable++;
      best.push_back({std::move(batch[k].first), batch[k].second, *e.seconds});
      std::stable_sort(best.begin(), best.end(), [](const Scored& a, const Scored& b) { return a.seconds < b.seconds; });
      if (best.size() > static_cast<size_t>(std::max(o.keep_best_, 1))) best.pop_back();
      report.best_seconds = best.front().seconds;
    }
    progress(o, report, elapsed(), time_limit);
    return viable;
  };

  // 1. A viable initial candidate: the seeds in order (each obeys the timeout like any
  // other candidate), then random genomes if none is viable.
  for (const Genome& g : setup.seeds) {
    LUMINAL_ASSERT(g.size() == choices.size(), "seed genome size");
    uint64_t h = genome_hash(g);
    if (!seen.insert(h).second) continue;
    if (consider({{g, h}}) > 0 || elapsed() > time_limit) break;
  }
  int64_t attempts = 0;
  const int64_t max_candidates = std::max<int64_t>(o.search_graph_limit_, 10);
  const int64_t max_attempts = max_candidates * 100;
  while (best.empty() && !mutable_slots.empty() && attempts < max_attempts && elapsed() <= time_limit &&
         report.candidates < max_candidates) {
    std::vector<std::pair<Genome, uint64_t>> batch;
    while (static_cast<int>(batch.size()) < std::max(o.generation_size_, 1) && attempts++ < max_attempts) {
      Genome g = random_genome();
      uint64_t h = genome_hash(g);
      if (seen.insert(h).second) batch.emplace_back(std::move(g), h);
    }
    if (batch.empty()) break;
    consider(std::move(batch));
  }
  if (best.empty()) {
    // Nothing could be profiled: keep the slow fallback if only the clock was against it,
    // else the fallback (the unrewritten program), which is correct by construction.
    const bool slow = slow_fallback_timed_out;
    report.stop_reason = "no candidate could be profiled (" + report.first_rejection_detail + "); " +
                         (slow ? "kept the cheapest program (it was only over the profile timeout)"
                               : "kept the baseline");
    report.search_seconds = elapsed();
    if (o.verbose_) std::fprintf(stderr, "\n%s\n", report.summary().c_str());
    return {slow ? *setup.slow_fallback : setup.fallback, report};
  }
  report.first_seconds = report.best_seconds;

  // 2. Generations of mutated offspring of the best candidates; a generation that is
  // wholly rejected is followed by one drawn at random (resampling), so one bad
  // neighbourhood does not end the search.
  bool resample = false;
  if (mutable_slots.empty()) report.stop_reason = "single candidate";
  while (report.stop_reason.empty()) {
    if (report.candidates >= o.search_graph_limit_) { report.stop_reason = "graph limit"; break; }
    if (elapsed() > time_limit) { report.stop_reason = "time limit"; break; }
    int64_t budget = std::min<int64_t>(o.search_graph_limit_ - report.candidates, o.generation_size_);
    std::vector<std::pair<Genome, uint64_t>> offspring;
    int64_t tries = 0;
    while (static_cast<int64_t>(offspring.size()) < budget && tries++ < budget * 100) {
      Genome g;
      uint64_t h;
      if (resample) {
        g = random_genome();
        h = genome_hash(g);
      } else {
        const Scored& parent = best[offspring.size() % best.size()];
        g = parent.genome;
        h = parent.hash;
        int n_mut = 1 + static_cast<int>(rng() % static_cast<uint64_t>(std::max(o.mutations_, 1)));
        for (int m = 0; m < n_mut; ++m) {
          size_t slot = mutable_slots[rng() % mutable_slots.size()];
          uint32_t c = static_cast<uint32_t>(rng() % choices[slot]);
          h ^= slot_hash(slot, g[slot]) ^ slot_hash(slot, c);
          g[slot] = c;
        }
      }
      if (!seen.insert(h).second) {
        report.duplicates_skipped++;
        continue;
      }
      offspring.emplace_back(std::move(g), h);
    }
    if (offspring.empty()) { report.stop_reason = "search space exhausted"; break; }
    int viable = consider(std::move(offspring));
    resample = viable == 0;
    if (resample) report.resampled_generations++;
  }
  report.search_seconds = elapsed();
  if (o.verbose_) std::fprintf(stderr, "\n%s\n", report.summary().c_str());
  return {best.front().genome, report};
}

}  // namespace luminal::search
