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

void progress(const CompileOptions& o, const SearchReport& r) {
  if (!o.verbose_) return;
  int64_t limit = o.search_graph_limit_;
  int width = 30;
  int filled = limit > 0 ? static_cast<int>(width * std::min<int64_t>(r.candidates, limit) / limit) : width;
  std::fprintf(stderr, "\r  search [%s%s] %lld/%lld best %.3f ms", std::string(filled, '#').c_str(),
               std::string(width - filled, '.').c_str(), static_cast<long long>(r.candidates),
               static_cast<long long>(limit), r.best_seconds * 1e3);
  std::fflush(stderr);
}
}  // namespace

SearchResult genetic_search(const std::vector<uint32_t>& choices, const CompileOptions& o,
                            const std::function<Evaluation(const Genome&)>& evaluate) {
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - start).count(); };
  const double time_limit = o.search_time_limit_.count();
  std::mt19937_64 rng(o.seed_);
  SearchReport report;
  std::vector<size_t> mutable_slots;
  for (size_t i = 0; i < choices.size(); ++i) {
    LUMINAL_ASSERT(choices[i] >= 1, "slot ", i, " has no options");
    if (choices[i] > 1) mutable_slots.push_back(i);
  }
  auto random_genome = [&] {
    Genome g(choices.size(), 0);
    for (size_t i : mutable_slots) g[i] = static_cast<uint32_t>(rng() % choices[i]);
    return g;
  };
  std::unordered_set<uint64_t> seen;
  std::vector<Scored> best;  // sorted by time, at most keep_best
  auto consider = [&](Genome g, uint64_t h) -> bool {
    Evaluation e = evaluate(g);
    report.candidates++;
    if (!e.seconds) {
      report.rejected[static_cast<size_t>(e.rejection)]++;
      if (report.first_rejection_detail.empty()) report.first_rejection_detail = e.detail;
      return false;
    }
    best.push_back({std::move(g), h, *e.seconds});
    std::stable_sort(best.begin(), best.end(), [](const Scored& a, const Scored& b) { return a.seconds < b.seconds; });
    if (best.size() > static_cast<size_t>(std::max(o.keep_best_, 1))) best.pop_back();
    report.best_seconds = best.front().seconds;
    return true;
  };

  // 1. A viable initial candidate: the all-first-choice genome (the unrewritten
  // program, always valid), then random ones if it fails.
  Genome first(choices.size(), 0);
  seen.insert(genome_hash(first));
  bool viable = consider(first, genome_hash(first));
  int64_t attempts = 0;
  const int64_t max_attempts = std::max<int64_t>(o.search_graph_limit_, 10) * 100;
  while (!viable && !mutable_slots.empty() && attempts++ < max_attempts && elapsed() <= time_limit &&
         report.candidates < std::max<int64_t>(o.search_graph_limit_, 10)) {
    Genome g = random_genome();
    uint64_t h = genome_hash(g);
    if (!seen.insert(h).second) continue;
    viable = consider(g, h);
  }
  if (!viable) {
    // Nothing could be profiled (e.g. the inputs cannot run on ones): keep the
    // unrewritten program, which is correct by construction.
    report.stop_reason = "no candidate could be profiled (" + report.first_rejection_detail + "); kept the baseline";
    report.search_seconds = elapsed();
    if (o.verbose_) std::fprintf(stderr, "%s\n", report.summary().c_str());
    return {first, report};
  }
  report.first_seconds = report.best_seconds;
  progress(o, report);

  // 2. Generations of mutated offspring of the best candidates.
  if (mutable_slots.empty()) report.stop_reason = "single candidate";
  while (report.stop_reason.empty()) {
    if (report.candidates >= o.search_graph_limit_) { report.stop_reason = "graph limit"; break; }
    if (elapsed() > time_limit) { report.stop_reason = "time limit"; break; }
    int64_t budget = std::min<int64_t>(o.search_graph_limit_ - report.candidates, o.generation_size_);
    std::vector<std::pair<Genome, uint64_t>> offspring;
    int64_t attempts = 0;
    while (static_cast<int64_t>(offspring.size()) < budget && attempts++ < budget * 100) {
      const Scored& parent = best[offspring.size() % best.size()];
      Genome g = parent.genome;
      uint64_t h = parent.hash;
      int n_mut = 1 + static_cast<int>(rng() % static_cast<uint64_t>(std::max(o.mutations_, 1)));
      for (int m = 0; m < n_mut; ++m) {
        size_t slot = mutable_slots[rng() % mutable_slots.size()];
        uint32_t c = static_cast<uint32_t>(rng() % choices[slot]);
        h ^= slot_hash(slot, g[slot]) ^ slot_hash(slot, c);
        g[slot] = c;
      }
      if (!seen.insert(h).second) {
        report.duplicates_skipped++;
        continue;
      }
      offspring.emplace_back(std::move(g), h);
    }
    if (offspring.empty()) { report.stop_reason = "search space exhausted"; break; }
    for (auto& [g, h] : offspring) {
      consider(std::move(g), h);
      progress(o, report);
      if (elapsed() > time_limit) break;
    }
  }
  report.search_seconds = elapsed();
  if (o.verbose_) std::fprintf(stderr, "\n%s\n", report.summary().c_str());
  return {best.front().genome, report};
}

}  // namespace luminal::search
