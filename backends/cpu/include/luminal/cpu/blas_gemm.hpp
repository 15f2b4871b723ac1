// The OpenBLAS implementation of gemm(), for the search to measure against ours.
//
// Thread policy (no oversubscription): before its first call, OpenBLAS is told the
// global ThreadPool's thread count (openblas_set_num_threads), and it is never called
// from inside a pool task (that would run T OpenBLAS threads on each of T pool
// threads); such a call throws. Bias and epilogue are applied after cblas_sgemm, on the
// pool, once OpenBLAS has returned.
#pragma once

#include "luminal/cpu/gemm.hpp"

namespace luminal::cpu {

// Whether blas_gemm can run these arguments: F32 B, and each operand with a unit
// stride along one of its two dims (what cblas_sgemm's lda/ldb express).
bool blas_supports(const GemmArgs& args);
// Runs `args` through cblas_sgemm (one call per batch) and returns true, or returns
// false without touching C when !blas_supports(args).
bool blas_gemm(const GemmArgs& args);
// The thread count OpenBLAS was given.
int blas_threads();

}  // namespace luminal::cpu
