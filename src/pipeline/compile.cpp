// The compile pipeline: it orchestrates the core, the e-graph and the search, and sits
// above all three. It reads top to bottom; each stage is a function:
//   1. find repeated structure (identical layers are searched once);
//   2. for each dim-bucket combination, for each distinct segment:
//        saturate_segment: lower to the e-graph, load the core and backend rule files,
//          run the backend's rule stages (done once per segment, reused by every bucket);
//        search_segment: the genetic search over the segment's choices, evaluating each
//          generation as a batch on one profiling runtime whose inputs are set once;
//        verify_choice: the chosen program against the unrewritten one on adversarial data;
//   3. stitch the segment programs, plan memory, and load every plan (all resident).
// A segment whose program an earlier compile chose under the same key (segment, dims,
// runtime, rules, options, build) is loaded from the program cache instead of step 2.
#include "luminal/compile.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <unordered_map>

#include "luminal/egraph/egraph.hpp"
#include "luminal/error.hpp"
#include "luminal/graph.hpp"
#include "luminal/plan/memory_planner.hpp"
#include "luminal/profiling_worker.hpp"
#include "luminal/program_cache.hpp"
#include "luminal/runtime.hpp"
#include "luminal/search/genetic.hpp"
#include "luminal/search/hlir_egraph.hpp"
#include "luminal/search/segments.hpp"

namespace luminal {
namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }
// Adds the seconds from its construction to its destruction to `to`: a phase timer that
// counts early returns too.
struct PhaseTimer {
  double& to;
  clock_type::time_point from = clock_type::now();
  ~PhaseTimer() { to += since(from); }
};

// verbose: names an output whose comparison took over 50 ms (what `read and compare` and
// verification spend is otherwise invisible: an 8B layer once exported its weights).
void note_slow_comparison(bool verbose, const char* what, NodeId id, const HostTensor& t,
                          clock_type::time_point started) {
  const double seconds = since(started);
  if (verbose && seconds > 0.05)
    std::fprintf(stderr, "\n  %s output %u (%s, %zu elements): compared in %.2f s", what, static_cast<unsigned>(id),
                 std::string(dtype_name(t.dtype)).c_str(), t.numel(), seconds);
}

// " CudaAttention:1 Mul:3 ...": the ops a program computes (backend ops by name), for the
// verbose log.
std::string op_counts(const Graph& program) {
  std::map<std::string, int> kinds;
  for (const Node& n : program.nodes())
    if (n.op == OpKind::BackendOp) kinds[n.backend->name]++;
    else if (n.op != OpKind::Input && n.op != OpKind::Output) kinds[std::string(op_name(n.op))]++;
  std::string out;
  for (const auto& [name, count] : kinds) out += " " + name + ":" + std::to_string(count);
  return out;
}

using BucketRanges = std::map<std::string, std::pair<int64_t, int64_t>>;

// Every combination of buckets, as (ranges, representative dims, upper dims).
struct BucketCombo {
  BucketRanges ranges;
  DimMap dims;   // representative values: what the search profiles with
  DimMap upper;  // upper ends: what memory is planned for
};
std::vector<BucketCombo> bucket_combinations(const CompileOptions& o, const DimMap& base) {
  std::vector<BucketCombo> combos = {{{}, base, base}};
  for (const auto& [dim, buckets] : o.dim_buckets_) {
    LUMINAL_CHECK(!buckets.empty(), "dim_buckets: no buckets for '", dim, "'");
    for (size_t i = 0; i < buckets.size(); ++i) {
      LUMINAL_CHECK(buckets[i].min <= buckets[i].max, "dim_buckets: bucket [", buckets[i].min, ", ", buckets[i].max,
                    "] of '", dim, "' is empty");
      LUMINAL_CHECK(buckets[i].contains(buckets[i].rep()), "dim_buckets: representative ", buckets[i].rep(),
                    " of '", dim, "' is outside its bucket");
      for (size_t j = 0; j < i; ++j)
        LUMINAL_CHECK(buckets[i].max < buckets[j].min || buckets[j].max < buckets[i].min,
                      "dim_buckets: overlapping buckets for '", dim, "': [", buckets[j].min, ", ", buckets[j].max,
                      "] and [", buckets[i].min, ", ", buckets[i].max, "]");
    }
    std::vector<BucketCombo> next;
    for (const auto& c : combos)
      for (const auto& b : buckets) {
        BucketCombo n = c;
        n.ranges[dim] = {b.min, b.max};
        n.dims[dim] = b.rep();
        n.upper[dim] = b.max;
        next.push_back(std::move(n));
      }
    combos = std::move(next);
  }
  return combos;
}

// A segment lowered and saturated once, then searched for every bucket.
struct SaturatedSegment {
  std::unique_ptr<Graph> graph;  // the lowered graph points here
  search::LoweredGraph lowered;
  search::ChoiceSpace space;
  std::vector<std::string> rules_fired;  // for reports when a choice fails verification
};

std::shared_ptr<SaturatedSegment> saturate_segment(const Graph& segment, const Runtime& target,
                                                   const CompileOptions& o, CompileReport& report) {
  auto t0 = clock_type::now();
  auto s = std::make_shared<SaturatedSegment>();
  s->graph = std::make_unique<Graph>(segment);
  s->lowered = search::lower_to_egraph(*s->graph, [&](egraph::EGraph& eg) { target.register_primitives(eg); });
  std::vector<std::string> files = search::core_rule_files();
  for (auto& f : target.rule_files()) files.push_back(std::move(f));
  search::load_rule_files(s->lowered, files);
  report.build_egraph_s += since(t0);

  auto t1 = clock_type::now();
  egraph::EGraph& eg = *s->lowered.egraph;
  for (const RuleStage& stage : target.rule_stages(o)) {
    std::vector<egraph::Schedule> sets;
    for (const auto& r : stage.rulesets) {
      LUMINAL_CHECK(eg.has_ruleset(r), "compile: rule stage '", stage.name, "' names unknown rule set '", r, "'");
      sets.push_back(egraph::Schedule::run(r));
    }
    egraph::RunOptions run;
    run.node_limit = static_cast<size_t>(stage.node_limit);
    run.time_limit_s = stage.time_limit_s;
    egraph::RunReport rr = eg.run(egraph::Schedule::saturate(sets), run);
    report.egraph_stop = stage.name + ": " + egraph::stop_reason_name(rr.stop);
    for (const auto& rule : rr.rules)
      if (rule.applications > 0) s->rules_fired.push_back(rule.name);
  }
  report.saturate_s += since(t1);
  report.egraph_nodes += static_cast<int64_t>(eg.num_nodes());
  report.egraph_classes += static_cast<int64_t>(eg.num_classes());
  s->space = search::choice_space(s->lowered);
  return s;
}


// The coarsest float precision a segment computes in (BF16, F16, else F32): an F32 output
// computed from BF16 values carries their rounding, and is judged at it. Inputs do not
// count: BF16 weights widened to F32 are stored in BF16, computed with in F32 exactly.
DType segment_precision(const Graph& g) {
  DType p = DType::F32;
  for (const Node& n : g.nodes()) {
    if (n.op == OpKind::Input) continue;
    if (n.dtype == DType::BF16) return DType::BF16;
    if (n.dtype == DType::F16) p = DType::F16;
  }
  return p;
}

// The compile's profiling worker (Runtime::profiling_worker), started by the first
// segment search that needs it and shared by the rest: one process start and one device
// context per compile, not per segment.
struct WorkerSlot {
  bool checked = false;
  std::unique_ptr<ProfilingWorker> worker;
  ProfilingWorker* get(const Runtime& rt) {
    if (!checked) {
      checked = true;
      const char* in_process = std::getenv("LUMINAL_PROFILE_IN_PROCESS");
      std::vector<std::string> command = rt.profiling_worker();
      if (!command.empty() && !(in_process && *in_process && std::string(in_process) != "0"))
        worker = std::make_unique<ProfilingWorker>(std::move(command));
    }
    return worker.get();
  }
};

// Runs candidates of one segment at one bucket on a single runtime whose inputs are set
// once; remembers every program it has seen.
class SegmentProfiler {
 public:
  SegmentProfiler(const SaturatedSegment& seg, const Runtime& target, const CompileOptions& o, DimMap dims,
                  CompileReport& report, WorkerSlot& workers)
      : seg_(seg), o_(o), dims_(std::move(dims)), report_(report), rt_(target.fresh()),
        precision_(segment_precision(*seg.graph)), workers_(workers) {}

  // The inputs are made once, by the runtime, where it keeps them (after the first
  // program is loaded, so the runtime knows them).
  void set_inputs(InputValues values, uint64_t seed) {
    input_values_ = values;
    seed_ = seed;
  }

  // The segment's search ends at `deadline`: a generation still running then stops between
  // candidates (once one candidate has run), so one generation of slow candidates cannot
  // overrun the budget many times over.
  void set_deadline(clock_type::time_point deadline) { deadline_ = deadline; }

  // A program compiled with the first batch though not profiled: the unrewritten program
  // that verification will run. Compiled there, in parallel with the first candidates, it
  // costs little; compiled when verification loads it, it cost the 8B model's cold compile
  // ~2.5 s (1.9 s for one segment's 118 nodes on the H100's host, session 19) when the
  // search had stopped after its first candidate.
  void also_prepare(const Graph* program) { also_prepare_ = program; }

  std::vector<search::Evaluation> evaluate(std::span<const search::Genome> batch) {
    std::vector<search::Evaluation> out(batch.size());
    struct Fresh {
      size_t index;
      uint64_t hash;
      search::Extracted program;
    };
    std::vector<Fresh> fresh;
    auto t0 = clock_type::now();
    auto batch_start = t0;
    for (size_t k = 0; k < batch.size(); ++k) {
      auto program = search::extract(seg_.lowered, seg_.space, batch[k]);
      if (!program) {
        out[k] = {std::nullopt, search::Rejection::Invalid, "cyclic choice"};
        continue;
      }
      prepare_for_profiling(program->program);
      uint64_t h = search::structural_hash(program->program);
      if (auto it = seen_.find(h); it != seen_.end()) {
        out[k] = it->second;
        out[k].duplicate = true;
        continue;
      }
      auto dup = std::find_if(fresh.begin(), fresh.end(), [&](const Fresh& f) { return f.hash == h; });
      if (dup != fresh.end()) {
        pending_dups_.emplace_back(k, dup->index);
        continue;
      }
      // Estimated memory decides before anything runs.
      if (o_.memory_limit_bytes_) {
        CostEstimate est = rt_->estimate(program->program, dims_);
        if (est.memory_bytes > *o_.memory_limit_bytes_) {
          out[k] = {std::nullopt, search::Rejection::Memory,
                    "needs " + std::to_string(est.memory_bytes) + " bytes, limit " +
                        std::to_string(*o_.memory_limit_bytes_)};
          seen_[h] = out[k];
          continue;
        }
      }
      fresh.push_back({k, h, std::move(*program)});
    }
    phase_s_[kExtract] += since(batch_start);
    auto prepare_start = clock_type::now();
    std::vector<const Graph*> programs;
    for (const auto& f : fresh) programs.push_back(&f.program.program);
    if (also_prepare_) programs.push_back(std::exchange(also_prepare_, nullptr));
    if (!past_deadline()) {
      try {
        rt_->prepare(programs);
      } catch (const DeviceLost&) {
        throw;
      } catch (const std::exception&) {
        // A backend reports per-program failures from load_program; a batch-wide one
        // shows again there.
      }
    }
    report_.setup_s += since(t0);
    phase_s_[kPrepare] += since(prepare_start);
    for (auto& f : fresh) {
      if (past_deadline()) {  // not run, and not remembered: a later search may run it
        out[f.index] = {std::nullopt, search::Rejection::Timeout, "not run: the segment's search time was up"};
        continue;
      }
      out[f.index] = run(f.program);
      seen_[f.hash] = out[f.index];
      if (out[f.index].seconds) any_viable_ = true;
    }
    for (auto [k, of] : pending_dups_) {
      out[k] = out[of];
      out[k].duplicate = true;
    }
    pending_dups_.clear();
    return out;
  }

  Runtime& runtime() { return *rt_; }
  // Why each profiling worker this segment started was lost (a candidate faulted it).
  const std::vector<std::string>& worker_losses() const { return worker_losses_; }

  // verbose: where the segment's search time went, beside the search's own work (choosing
  // genomes), which is what is left of its wall time.
  void print_phases(double search_wall_s) const {
    double sum = 0;
    for (double v : phase_s_) sum += v;
    std::fprintf(stderr,
                 "\n  search phases: extract %.2f s, prepare (compile) %.2f s, load %.2f s, inputs %.2f s, "
                 "profile %.2f s, read and compare %.2f s, the search itself %.2f s",
                 phase_s_[kExtract], phase_s_[kPrepare], phase_s_[kLoad], phase_s_[kInputs], phase_s_[kProfile],
                 phase_s_[kRead], search_wall_s - sum);
  }

 private:
  // Every input persists while profiling, so all trials see the same data.
  static void prepare_for_profiling(Graph& program) {
    for (NodeId i = 0; i < program.size(); ++i)
      if (program.node(i).op == OpKind::Input) program.mutable_node(i).persist = true;
  }

  search::Evaluation run(const search::Extracted& candidate) {
    search::Evaluation e;
    double load_s = 0;
    ProfileResult r;
    // verbose: where each candidate's time goes (a model-sized segment's first candidate
    // can spend its budget loading or warming up, not in the timed runs).
    const auto candidate_start = clock_type::now();
    auto trace = [&](const search::Evaluation& ev) {
      // The first few of each segment, and any that takes a second or more, or is rejected.
      const double total_s = since(candidate_start);
      // LUMINAL_TRACE_CANDIDATES=1 (with verbose): every candidate, with its steps by kind.
      static const bool trace_all = [] {
        const char* v = std::getenv("LUMINAL_TRACE_CANDIDATES");
        return v && *v && std::string(v) != "0";
      }();
      if (!o_.verbose_ || (!trace_all && traced_++ >= 3 && ev.seconds && total_s < 1.0)) return;
      const std::string verdict = ev.seconds ? std::to_string(*ev.seconds * 1e3) + " ms"
                                             : std::string(search::rejection_name(ev.rejection)) + ": " + ev.detail;
      std::fprintf(stderr, "\n  candidate of %zu nodes: load %.2f s, warm-up %.2f s, %.2f s in all, %s",
                   candidate.program.size(), load_s, r.warmup_seconds, total_s, verdict.c_str());
      if (trace_all) std::fprintf(stderr, "%s", op_counts(candidate.program).c_str());
    };
    ProfileOptions po;
    po.trials = o_.trials_;
    po.warmup = o_.warmup_;
    po.timeout = o_.profile_timeout_;
    std::vector<std::pair<NodeId, HostTensor>> outs;
    if (isolated(candidate)) {
      // In the worker: load, inputs (on a new worker's first candidate), profile, outputs.
      auto t0 = clock_type::now();
      CandidateRequest q{&candidate.program, candidate.io_of, seg_.graph.get(), dims_, seed_, input_values_, po,
                         !worker_used_};
      worker_used_ = true;
      // A fault can hang a device as well as stop it: a worker silent far past the profile
      // timeout (loading, making inputs and compiling count too) is given up.
      CandidateOutcome got =
          worker_->run(q, std::chrono::duration<double>(60.0 + 10.0 * o_.profile_timeout_.count()));
      phase_s_[kProfile] += since(t0);
      r = got.result;
      if (got.status == CandidateOutcome::Status::WorkerLost) worker_losses_.push_back(got.message);
      if (got.status != CandidateOutcome::Status::Ok) {
        e.rejection = search::Rejection::Throws;
        e.detail = got.status == CandidateOutcome::Status::WorkerLost
                       ? "the candidate took down its profiling worker (the next candidate starts a fresh one): " + got.message
                       : got.message;
        trace(e);
        return e;
      }
      outs = std::move(got.outputs);
    } else {
      try {
        auto t0 = clock_type::now();
        rt_->load_program(0, candidate.program, candidate.io_of);
        phase_s_[kLoad] += since(t0);
        if (!inputs_filled_) {
          auto fill_start = clock_type::now();
          for (NodeId i = 0; i < seg_.graph->size(); ++i)
            if (seg_.graph->node(i).op == OpKind::Input)
              rt_->fill_profiling_input(i, seg_.graph->node(i), dims_, seed_ + i, input_values_);
          inputs_filled_ = true;
          phase_s_[kInputs] += since(fill_start);
        }
        load_s = since(t0);
        report_.setup_s += load_s;
        auto profile_start = clock_type::now();
        r = rt_->profile(dims_, po);
        phase_s_[kProfile] += since(profile_start);
        PhaseTimer read_time{phase_s_[kRead]};
        if (!r.timed_out)
          for (NodeId i = 0; i < candidate.program.size(); ++i) {
            const Node& n = candidate.program.node(i);
            if (n.op != OpKind::Output || candidate.io_of[i] == kNoNode) continue;
            outs.emplace_back(candidate.io_of[i], rt_->get_tensor(candidate.io_of[i]));
          }
      } catch (const DeviceLost& ex) {
        throw DeviceLost(detail::concat("compile: a candidate program (", candidate.program.size(),
                                        " nodes) faulted the device while it was profiled, so the search cannot go on: ",
                                        ex.what()));
      } catch (const std::exception& ex) {
        e.rejection = search::Rejection::Throws;
        e.detail = ex.what();
        trace(e);
        return e;
      }
    }
    if (r.timed_out) {
      e.rejection = search::Rejection::Timeout;
      e.detail = "over the profile timeout";
      trace(e);
      return e;
    }
    // The first program that runs (the cheapest) sets the reference values; the others
    // must agree with it, NaN for NaN.
    PhaseTimer read_time{phase_s_[kRead]};
    if (reference_.empty()) {
      reference_ = std::move(outs);
    } else {
      for (auto& [id, t] : outs)
        for (auto& [rid, rt] : reference_)
          if (rid == id && is_float(t.dtype)) {
            const auto started = clock_type::now();
            if (auto why = compare_outputs(t, rt, precision_)) {
              e.rejection = search::Rejection::Mismatch;
              e.detail = *why;
              trace(e);
              return e;
            }
            note_slow_comparison(o_.verbose_, "candidate", id, t, started);
          }
    }
    e.seconds = r.seconds;
    trace(e);
    return e;
  }

  // Whether `candidate` runs in the compile's profiling worker: the runtime names one, the
  // segment and the program can be sent (no CustomOp), and LUMINAL_PROFILE_IN_PROCESS is
  // not set.
  bool isolated(const search::Extracted& candidate) {
    if (!worker_checked_) {
      worker_checked_ = true;
      if (serialize_graph(*seg_.graph)) worker_ = workers_.get(*rt_);
    }
    if (!worker_) return false;
    for (const Node& n : candidate.program.nodes())
      if (n.op == OpKind::CustomOp) return false;
    return true;
  }

  const SaturatedSegment& seg_;
  const CompileOptions& o_;
  DimMap dims_;
  CompileReport& report_;
  std::unique_ptr<Runtime> rt_;
  DType precision_;  // the coarsest the segment computes in: outputs are judged at it
  InputValues input_values_ = InputValues::Uniform;
  bool inputs_filled_ = false;
  int traced_ = 0;  // candidates described on stderr (verbose)
  std::optional<clock_type::time_point> deadline_;
  bool any_viable_ = false;  // a candidate has run: the search has a result to keep
  bool past_deadline() const { return any_viable_ && deadline_ && clock_type::now() > *deadline_; }
  enum Phase { kExtract, kPrepare, kLoad, kInputs, kProfile, kRead, kPhases };
  double phase_s_[kPhases] = {};
  uint64_t seed_ = 0;
  std::vector<std::pair<NodeId, HostTensor>> reference_;
  std::unordered_map<uint64_t, search::Evaluation> seen_;
  std::vector<std::pair<size_t, size_t>> pending_dups_;
  std::vector<std::string> worker_losses_;
  WorkerSlot& workers_;
  const Graph* also_prepare_ = nullptr;  // compiled with the next batch (also_prepare)
  bool worker_checked_ = false;
  bool worker_used_ = false;             // this segment's first request tells the worker
  ProfilingWorker* worker_ = nullptr;    // profiles candidates in a child process (isolated)
};

// Run `program` on `rt` over inputs the runtime makes itself (on the device, where it can:
// a model's segment has gigabytes of weights, which host-made values would spend most of a
// compile generating and copying); the outputs by segment id, or the error message. The
// inputs are made again for every program, so state a program updates in place (a KV
// cache) does not reach the next one.
// With `trace` (verbose), where its time went: loading (compiling kernels), making the
// inputs, running, reading the outputs back.
std::variant<std::vector<std::pair<NodeId, HostTensor>>, std::string> run_on_made_inputs(
    Runtime& rt, search::Extracted program, const Graph& segment, const DimMap& dims, uint64_t seed,
    InputValues values, const char* trace = nullptr) {
  try {
    auto t0 = clock_type::now();
    for (NodeId i = 0; i < program.program.size(); ++i)
      if (program.program.node(i).op == OpKind::Input) program.program.mutable_node(i).persist = true;
    rt.load_program(0, program.program, program.io_of);
    const double load_s = since(t0);
    t0 = clock_type::now();
    for (NodeId i = 0; i < segment.size(); ++i)
      if (segment.node(i).op == OpKind::Input) rt.fill_profiling_input(i, segment.node(i), dims, seed + i, values);
    const double fill_s = since(t0);
    t0 = clock_type::now();
    rt.execute(dims);
    const double run_s = since(t0);
    t0 = clock_type::now();
    std::vector<std::pair<NodeId, HostTensor>> outs;
    for (NodeId i = 0; i < program.program.size(); ++i)
      if (program.program.node(i).op == OpKind::Output && program.io_of[i] != kNoNode)
        outs.emplace_back(program.io_of[i], rt.get_tensor(program.io_of[i]));
    if (trace)
      std::fprintf(stderr, "\n  verify, %s program of %zu nodes: load %.2f s, inputs %.2f s, run %.2f s, read %.2f s", trace,
                   program.program.size(), load_s, fill_s, run_s, since(t0));
    return outs;
  } catch (const DeviceLost&) {
    throw;  // not a verdict on the program: nothing can run on that device any more
  } catch (const std::exception& e) {
    return std::string(e.what());
  }
}

// The chosen program must agree with the unrewritten one on adversarial inputs; nullopt
// when it does, else why not.
std::optional<std::string> verify_choice(const SaturatedSegment& seg, const Runtime& target, const DimMap& dims,
                                         const search::Genome& chosen, const search::Genome& source, uint64_t seed,
                                         bool verbose) {
  auto a = search::extract(seg.lowered, seg.space, chosen);
  auto b = search::extract(seg.lowered, seg.space, source);
  LUMINAL_ASSERT(a && b, "verify: programs must extract");
  const DType precision = segment_precision(*seg.graph);
  const InputValues special = is_half_float(precision) ? InputValues::SpecialHalf : InputValues::Special;
  // verbose: the parts of verification that the per-program lines do not show.
  double fresh_s = 0, compare_s = 0, teardown_s = 0;
  struct PrintOnExit {
    bool on;
    double &fresh, &compare, &teardown;
    ~PrintOnExit() {
      if (on)
        std::fprintf(stderr, "\n  verify phases: new runtimes %.2f s, comparing %.2f s, releasing runtimes %.2f s", fresh,
                     compare, teardown);
    }
  } print_phases{verbose, fresh_s, compare_s, teardown_s};
  for (int round = 0; round < 2; ++round) {  // values of both signs, then special values
    std::unique_ptr<Runtime> rt;
    {
      PhaseTimer fresh_time{fresh_s};
      rt = target.fresh();  // one runtime for both programs: the inputs' buffers are reused
    }
    struct ReleaseTimed {  // declared after rt: runs first, then times rt's release
      std::unique_ptr<Runtime>& rt;
      double& seconds;
      ~ReleaseTimed() {
        auto t = clock_type::now();
        rt.reset();
        seconds += since(t);
      }
    } release{rt, teardown_s};
    const uint64_t round_seed = seed + 1000 * round;
    const InputValues values = round == 1 ? special : InputValues::Uniform;
    // The unrewritten program runs where the backend says (its oracle, e.g. the reference
    // interpreter, or this runtime); both make the same inputs from the seed.
    std::unique_ptr<Runtime> oracle = target.verification_oracle(*seg.graph, dims);
    auto want = run_on_made_inputs(oracle ? *oracle : *rt, *b, *seg.graph, dims, round_seed, values,
                                   verbose ? (oracle ? "unrewritten (oracle)" : "unrewritten") : nullptr);
    if (want.index() == 1) return std::nullopt;  // the unrewritten program itself rejects these inputs
    auto got = run_on_made_inputs(*rt, *a, *seg.graph, dims, round_seed, values, verbose ? "chosen" : nullptr);
    if (got.index() == 1) return "it throws where the unrewritten program does not: " + std::get<1>(got);
    PhaseTimer compare_time{compare_s};
    for (auto& [id, t] : std::get<0>(got))
      for (auto& [wid, w] : std::get<0>(want)) {
        if (id != wid) continue;
        const auto started = clock_type::now();
        if (!is_float(t.dtype)) {
          if (t.to_i64() != w.to_i64()) return "output " + std::to_string(id) + " differs";
        } else if (auto why = compare_outputs(t, w, precision)) {
          return "output " + std::to_string(id) + ", " + *why;
        }
        note_slow_comparison(verbose, "verify,", id, t, started);
      }
  }
  return std::nullopt;
}

// The dims a choice is verified at: a bucketed dim at most kVerifyDimCap (within its
// bucket), others as searched. Verification runs the unrewritten program, whose
// materialised products grow with the dims (a 512-token prefill of an 8B layer multiplies
// 512 x 4096 x 4096 elements); a rewrite that is wrong is wrong at an odd size above a warp
// too, and 37 is not a multiple of any tile, where 512 is.
constexpr int64_t kVerifyDimCap = 37;
DimMap verification_dims(const DimMap& dims, const BucketRanges& ranges) {
  DimMap out = dims;
  for (const auto& [dim, range] : ranges) {
    auto it = out.find(dim);
    if (it != out.end()) it->second = std::clamp(std::min(it->second, kVerifyDimCap), range.first, range.second);
  }
  return out;
}

// Search one segment at one bucket; returns the chosen program.
search::SegmentProgram search_segment(const SaturatedSegment& seg, const Runtime& target, const CompileOptions& o,
                                      const DimMap& dims, const BucketRanges& ranges, double time_left_s,
                                      CompileReport& report, WorkerSlot& workers) {
  auto t0 = clock_type::now();
  const search::ChoiceSpace& space = seg.space;
  report.choice_slots += static_cast<int64_t>(space.slots.size());
  search::Genome cheapest = search::cheapest_genome(
      seg.lowered, space, &dims,
      [&target](std::string_view name, std::span<const int64_t> shape) { return target.backend_op_cost(name, shape); });
  search::Genome source = search::source_genome(seg.lowered, space);
  search::Genome best = cheapest;
  std::string missing_dim;
  for (const Node& n : seg.graph->nodes())
    for (const auto& d : n.shape)
      for (const auto& v : d.variables())
        if (!dims.count(v) && missing_dim.empty()) missing_dim = v;
  const bool verify = missing_dim.empty() && (o.verify_ == VerifyMode::Always ||
                                              (o.verify_ == VerifyMode::Auto && seg.graph->size() <= 4096));
  if (!missing_dim.empty() && !space.slots.empty()) {
    report.notes.push_back("search skipped: dimension '" + missing_dim +
                           "' has no value at compile time (set_dim or dim_buckets); kept the cheapest program");
  } else if (!space.slots.empty()) {
    std::vector<uint32_t> choices;
    for (const auto& opts : space.options) choices.push_back(static_cast<uint32_t>(opts.size()));
    SegmentProfiler profiler(seg, target, o, dims, report, workers);
    profiler.set_inputs(InputValues::Uniform, o.seed_ + 17);
    std::optional<search::Extracted> unrewritten;
    if (verify && !target.verification_oracle(*seg.graph, verification_dims(dims, ranges))) {
      unrewritten = search::extract(seg.lowered, space, source);
      if (unrewritten) profiler.also_prepare(&unrewritten->program);
    }
    search::SearchSetup setup;
    setup.seeds = {cheapest, source};
    setup.fallback = source;
    setup.slow_fallback = cheapest;
    setup.time_limit_s = std::max(time_left_s, 1e-3);
    profiler.set_deadline(clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                                   std::chrono::duration<double>(setup.time_limit_s)));
    search::SearchResult result = search::genetic_search(
        choices, o, setup, [&](std::span<const search::Genome> batch) { return profiler.evaluate(batch); });
    best = result.best;
    if (o.verbose_) profiler.print_phases(since(t0));
    report.candidates += result.report.candidates;
    report.duplicates += result.report.duplicates_skipped;
    for (auto r : result.report.rejected) report.rejected += r;
    for (const auto& why : profiler.worker_losses())
      report.notes.push_back("search: rejected a candidate that took down its profiling worker: " + why);
  }
  report.search_s += since(t0);

  // Verify the choice on adversarial data against the unrewritten program.
  if (verify && best != source) {
    auto t1 = clock_type::now();
    report.verified++;
    if (auto why = verify_choice(seg, target, verification_dims(dims, ranges), best, source, o.seed_ + 101, o.verbose_)) {
      report.verify_failures++;
      std::string rules;
      for (const auto& r : seg.rules_fired) rules += (rules.empty() ? "" : ", ") + r;
      report.notes.push_back("rejected the chosen program, which disagrees with the unrewritten one on adversarial "
                             "inputs (" + *why + "); rules applied in this segment: " + rules);
      best = source;
    }
    report.verify_s += since(t1);
  }
  auto program = search::extract(seg.lowered, space, best);
  LUMINAL_ASSERT(program.has_value(), "the chosen program is cyclic");
  // verbose: which ops the segment runs (did a backend's op make it into the program?).
  if (o.verbose_)
    std::fprintf(stderr, "\n  chosen program of %zu nodes:%s", program->program.size(),
                 op_counts(program->program).c_str());
  report.segments_compiled++;
  return {std::move(program->program), std::move(program->io_of)};
}


bool program_cache_enabled(const CompileOptions& o) {
  if (o.program_cache_) return *o.program_cache_;
  const char* env = std::getenv("LUMINAL_PROGRAM_CACHE");
  return !(env && std::string_view(env) == "0");
}

// Everything a chosen program depends on besides its segment and dims: the build, the
// runtime, the text of every rule file, the rule stages and the search options.
std::string program_cache_context(const Runtime& rt, const CompileOptions& o) {
  std::ostringstream os;
  os << build_identity() << '\x1f' << rt.cache_identity() << '\x1f';
  std::vector<std::string> files = search::core_rule_files();
  for (auto& f : rt.rule_files()) files.push_back(std::move(f));
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    os << f << '\x1d' << in.rdbuf() << '\x1d';
  }
  for (const RuleStage& st : rt.rule_stages(o)) {
    os << st.name << ':' << st.node_limit << ':' << st.time_limit_s;
    for (const auto& r : st.rulesets) os << ',' << r;
    os << ';';
  }
  os << o.search_graph_limit_ << ';' << o.search_time_limit_.count() << ';' << o.generation_size_ << ';'
     << o.mutations_ << ';' << o.trials_ << ';' << o.warmup_ << ';' << static_cast<int>(o.verify_) << ';'
     << o.keep_best_ << ';' << o.profile_timeout_.count() << ';' << o.seed_ << ';'
     << o.memory_limit_bytes_.value_or(-1) << ';' << o.egraph_node_limit_;
  for (const auto& r : o.rulesets_) os << ',' << r;
  return os.str();
}

}  // namespace

std::optional<std::string> compare_outputs(const HostTensor& got, const HostTensor& want, DType computed_in) {
  if (got.numel() != want.numel()) return "different sizes";
  // Judged at the coarser of the output's dtype and the precision it was computed in.
  const DType dt = want.dtype == DType::BF16 || computed_in == DType::BF16  ? DType::BF16
                   : want.dtype == DType::F16 || computed_in == DType::F16 ? DType::F16
                                                                           : want.dtype;
  const bool half = is_half_float(dt);
  const double rtol = dt == DType::BF16 ? 5e-2 : dt == DType::F16 ? 2e-2 : 1e-3;
  // The tensor's scale (mean magnitude of its finite values) joins each element's own: an
  // element that a reassociated sum cancels to near zero carries the rounding of the terms
  // it cancelled, not of its small result. A wrong value, sign, NaN or infinity still fails.
  // The tensors are read in chunks of doubles (one dtype switch per chunk, not per element:
  // the per-element reads cost ~15 ns each, seconds for a layer's outputs).
  constexpr size_t kChunk = 4096;
  std::vector<double> got_chunk(kChunk), want_chunk(kChunk);
  auto each = [&](bool with_got, auto&& visit) {
    for (size_t begin = 0; begin < want.numel(); begin += kChunk) {
      const size_t end = std::min(want.numel(), begin + kChunk);
      want.read_f64(begin, end, want_chunk.data());
      if (with_got) got.read_f64(begin, end, got_chunk.data());
      for (size_t k = begin; k < end; ++k)
        if (!visit(k, with_got ? got_chunk[k - begin] : 0.0, want_chunk[k - begin])) return;
    }
  };
  double scale = 0, peak = 0, diff2 = 0, want2 = 0;
  size_t finite = 0;
  each(false, [&](size_t, double, double b) {
    if (std::isfinite(b)) {
      scale += std::abs(b);
      peak = std::max(peak, std::abs(b));
      want2 += b * b;
      ++finite;
    }
    return true;
  });
  scale = finite ? scale / static_cast<double>(finite) : 0;
  std::optional<std::string> first, fatal;
  auto describe = [](size_t k, double a, double b) {
    std::ostringstream os;
    os << "element " << k << ": " << a << " instead of " << b;
    return os.str();
  };
  each(true, [&](size_t k, double a, double b) {
    if ((std::isnan(a) && std::isnan(b)) || a == b) return true;
    if (!std::isfinite(a) || !std::isfinite(b)) {  // NaN or infinity against anything else
      fatal = describe(k, a, b);
      return false;
    }
    diff2 += (a - b) * (a - b);
    if (!first && std::abs(a - b) > rtol * (1 + std::abs(b) + scale)) {
      first = describe(k, a, b);
      if (!half) {
        fatal = first;
        return false;
      }
    }
    return true;
  });
  if (fatal) return fatal;
  if (!first) return std::nullopt;
  // Half precision: a chain of BF16/F16 ops (a transformer layer) that rounds at other
  // points drifts per element by more than any fixed per-element bound, while a wrong
  // program (a wrong index, axis or operand) is wrong by the values' own size. So: the
  // relative L2 error over the tensor within the dtype's tolerance, and no element off by
  // more than a quarter of the tensor's largest magnitude.
  each(true, [&](size_t k, double a, double b) {
    if (std::isfinite(a) && std::isfinite(b) && std::abs(a - b) > 0.25 * peak + rtol * std::abs(b)) {
      std::ostringstream os;
      os << describe(k, a, b) << " (over a quarter of the largest magnitude, " << peak << ")";
      fatal = os.str();
      return false;
    }
    return true;
  });
  if (fatal) return fatal;
  const double relative_l2 = std::sqrt(diff2 / std::max(want2, 1e-300));
  const double l2_tol = dt == DType::BF16 ? 2e-2 : 5e-3;
  if (relative_l2 <= l2_tol) return std::nullopt;
  std::ostringstream os;
  os << *first << "; relative L2 error " << relative_l2 << " over " << l2_tol;
  return os.str();
}

std::string CompileReport::to_string() const {
  std::ostringstream os;
  os << "compile: " << total_s << " s (repeats " << find_repeats_s << ", e-graph " << build_egraph_s
     << ", saturate " << saturate_s << ", search " << search_s << " (of which compiling and loading candidates "
     << setup_s << "), verify " << verify_s << ", stitch+load "
     << stitch_load_s << "); " << segments_compiled << " segments searched (" << segments_reused
     << " reused a saturated e-graph), " << segments_cached << " from the program cache";
  if (block_copies) os << ", block of " << block_period << " nodes x " << block_copies;
  os << "; e-graph " << egraph_nodes << " nodes / " << egraph_classes << " classes (" << egraph_stop << "), "
     << choice_slots << " choice slots, " << candidates << " candidates (" << rejected << " rejected, " << duplicates
     << " duplicates), " << verified << " verified (" << verify_failures << " failed), " << plans
     << " plan(s), peak " << peak_bytes << " bytes";
  return os.str();
}

void Graph::compile_into(Runtime& runtime, const CompileOptions& options) const {
  auto start = clock_type::now();
  CompileReport report;

  // 1. Identical layers are searched once.
  auto t = clock_type::now();
  auto block = search::find_repeated_block(*this);
  if (block) {
    report.block_copies = block->count;
    report.block_period = block->period;
  }
  report.find_repeats_s = since(t);

  // 2. One plan per dim-bucket combination; a segment is saturated once for all of them.
  std::unordered_map<uint64_t, std::shared_ptr<SaturatedSegment>> saturated;
  const double budget = options.search_time_limit_.count();
  std::optional<ProgramCache> cache;
  std::string cache_context;
  if (program_cache_enabled(options)) {
    cache.emplace(options.program_cache_dir_.empty() ? ProgramCache::default_dir()
                                                     : std::filesystem::path(options.program_cache_dir_));
    cache_context = program_cache_context(runtime, options);
  }
  std::vector<Runtime::Plan> plans;
  std::vector<DimMap> uppers;
  const auto combos = bucket_combinations(options, dim_map());
  // The search budget is shared by node count: each segment search gets what is left times
  // its share of the nodes still to search (a block's copies are searched once). Handing
  // each search all that was left let the first segment spend it, leaving one candidate to
  // a decode bucket's layer.
  double nodes_to_search = static_cast<double>(size());
  if (block) nodes_to_search -= static_cast<double>(block->period) * (block->count - 1);
  nodes_to_search *= static_cast<double>(combos.size());
  WorkerSlot workers;  // the profiling worker, where the runtime has one (ends with the compile)
  for (const auto& combo : combos) {
    auto segment_search = [&](const Graph& segment) {
      const double weight = static_cast<double>(segment.size());
      const double share = std::min(1.0, weight / std::max(nodes_to_search, weight));
      nodes_to_search = std::max(0.0, nodes_to_search - weight);
      std::string cache_key;
      if (cache) {
        if (auto bytes = serialize_graph(segment)) {
          std::string all = cache_context + '\x1e' + *bytes;
          for (const auto& [dim, value] : combo.dims) all += '\x1f' + dim + '=' + std::to_string(value);
          cache_key = content_hash(all);
          if (auto hit = cache->load(cache_key)) {
            report.segments_cached++;
            return std::move(*hit);
          }
        }
      }
      uint64_t key = search::structural_hash(segment);
      auto& sat = saturated[key];
      // The worker sets up its device (a process, a context, the libraries) while this
      // segment saturates, instead of when the first candidate waits for it.
      if (ProfilingWorker* worker = workers.get(runtime)) worker->prestart();
      if (!sat) sat = saturate_segment(segment, runtime, options, report);
      else report.segments_reused++;
      double left = (budget - (report.search_s + report.saturate_s)) * share;
      search::SegmentProgram chosen =
          search_segment(*sat, runtime, options, combo.dims, combo.ranges, left, report, workers);
      if (!cache_key.empty()) cache->store(cache_key, chosen);
      return chosen;
    };
    auto [program, external] = search::compile_by_segments(*this, segment_search, block);
    plans.push_back({combo.ranges, std::move(program), std::move(external)});
    uppers.push_back(combo.upper);
  }

  // 3. Plan memory and load every plan.
  t = clock_type::now();
  report.plans = static_cast<int64_t>(plans.size());
  for (size_t p = 0; p < plans.size(); ++p) {
    try {
      report.peak_bytes = std::max(report.peak_bytes, runtime.estimate(plans[p].program, uppers[p]).memory_bytes);
    } catch (const Error& e) {  // a dim with no value at compile time: sized at execute
      report.notes.push_back(std::string("peak memory not planned: ") + e.what());
    }
  }
  runtime.load_plans(std::move(plans), uid());
  report.stitch_load_s = since(t);
  report.total_s = since(start);
  if (options.verbose_) {
    // The per-segment lines above leave their line open.
    std::fprintf(stderr, "%s%s\n", report.segments_compiled > 0 ? "\n" : "", report.to_string().c_str());
    for (const auto& note : report.notes) std::fprintf(stderr, "  note: %s\n", note.c_str());
  }
  if (options.report_) *options.report_ = report;
}

}  // namespace luminal
