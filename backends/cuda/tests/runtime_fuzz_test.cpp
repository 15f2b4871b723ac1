// Genome fuzzing on the device: random extractions of the e-graph grown by the core
// rules, the CUDA matmul rules and the fusion rules, run by the CUDA runtime (emitted
// kernels, cuBLASLt, our GEMV, CUDA graphs), all equal to the reference interpreter on
// adversarial inputs. At least 500 candidates per block. Skips without a GPU.
#include "genome_fuzz.hpp"
#include "luminal_cuda/cuda_runtime.hpp"
#include "test_util.hpp"

using namespace luminal;
using namespace luminal::testing;

namespace {
FuzzResult fuzz(TestModel& m) {
  cuda::CudaRuntime backend;
  return fuzz_genomes_on(m, backend, 500);
}
}  // namespace

TEST(CudaGenomeFuzz, Mlp) {
  LUMINAL_REQUIRE_GPU();
  TestModel m;
  build_mlp(m);
  auto r = fuzz(m);
  EXPECT_GE(r.ran, 450);
  EXPECT_GT(r.with_fused, r.ran / 4);
  EXPECT_GT(r.distinct, 50);
}

TEST(CudaGenomeFuzz, AttentionBlock) {
  LUMINAL_REQUIRE_GPU();
  TestModel m;
  build_attention(m);
  auto r = fuzz(m);
  EXPECT_GE(r.ran, 450);
  EXPECT_GT(r.distinct, 50);
}

TEST(CudaGenomeFuzz, TransformerBlock) {
  LUMINAL_REQUIRE_GPU();
  TestModel m;
  build_transformer_block(m);
  auto r = fuzz(m);
  EXPECT_GE(r.ran, 450);
  EXPECT_GT(r.distinct, 50);
}
