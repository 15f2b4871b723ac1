// Genome fuzzing through the kernel IR and the kernel test backend (genome_fuzz.hpp): at
// least 500 candidates per block, every one of them run, all equal to the reference.
#include "genome_fuzz.hpp"
#include "kernel_backend.hpp"

using namespace luminal;
using namespace luminal::testing;

namespace {
FuzzResult fuzz(TestModel& m, int candidates) {
  KernelTestRuntime backend;
  return fuzz_genomes_on(m, backend, candidates);
}
}  // namespace

TEST(KernelGenomeFuzz, Mlp) {
  TestModel m;
  build_mlp(m);
  auto r = fuzz(m, 500);
  EXPECT_GE(r.ran, 500 * 9 / 10);
  EXPECT_GT(r.with_fused, r.ran / 4);  // the fused kernels really ran
  EXPECT_GT(r.distinct, 50);
}

TEST(KernelGenomeFuzz, AttentionBlock) {
  TestModel m;
  build_attention(m);
  auto r = fuzz(m, 500);
  EXPECT_GE(r.ran, 500 * 9 / 10);
  EXPECT_GT(r.with_fused, r.ran / 4);
  EXPECT_GT(r.distinct, 50);
}

TEST(KernelGenomeFuzz, TransformerBlock) {
  TestModel m;
  build_transformer_block(m);
  auto r = fuzz(m, 500);
  EXPECT_GE(r.ran, 500 * 9 / 10);
  EXPECT_GT(r.with_fused, r.ran / 4);
  EXPECT_GT(r.distinct, 50);
}
