// Genome fuzzing on the CPU backend: random extractions of the e-graph grown by the core
// rules, the CPU matmul rules and the fusion rules, run natively (kernels, our GEMM,
// OpenBLAS), all equal to the reference interpreter on adversarial inputs. At least 500
// candidates per block.
#include "genome_fuzz.hpp"
#include "luminal/cpu/cpu_runtime.hpp"

using namespace luminal;
using namespace luminal::testing;

namespace {
FuzzResult fuzz(TestModel& m) {
  cpu::CpuRuntime backend;
  return fuzz_genomes_on(m, backend, 500);
}
}  // namespace

TEST(CpuGenomeFuzz, Mlp) {
  TestModel m;
  build_mlp(m);
  auto r = fuzz(m);
  EXPECT_GE(r.ran, 450);
  EXPECT_GT(r.with_fused, r.ran / 4);
  EXPECT_GT(r.distinct, 50);
}

TEST(CpuGenomeFuzz, AttentionBlock) {
  TestModel m;
  build_attention(m);
  auto r = fuzz(m);
  EXPECT_GE(r.ran, 450);
  EXPECT_GT(r.distinct, 50);
}

TEST(CpuGenomeFuzz, TransformerBlock) {
  TestModel m;
  build_transformer_block(m);
  auto r = fuzz(m);
  EXPECT_GE(r.ran, 450);
  EXPECT_GT(r.distinct, 50);
}
