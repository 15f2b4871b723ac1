// The OpenBLAS implementation of gemm(), for the search to measure against ours.
//
// Thread policy (one pool, no oversubscription): OpenBLAS runs single-threaded
// (openblas_set_num_threads(1) before its first call), and blas_gemm cuts C into blocks
// that the global ThreadPool's tasks compute, one cblas_sgemm each, bias and epilogue
// included. OpenBLAS's own threads would spin for ~0.1 s after every call on the cores
// the pool uses next. blas_gemm may not be called from inside a pool task (it throws).
#pragma once

#include "luminal/cpu/gemm.hpp"

namespace luminal::cpu {

// Whether blas_gemm can run these arguments: F32 B, and each operand with a unit
// stride along one of its two dims (what cblas_sgemm's lda/ldb express).
bool blas_supports(const GemmArgs& args);
// Runs `args` through cblas_sgemm (a call per block of C, on the pool) and returns true,
// or returns false without touching C when !blas_supports(args).
bool blas_gemm(const GemmArgs& args);
// The thread count OpenBLAS was given (1: the pool provides the parallelism).
int blas_threads();

}  // namespace luminal::cpu
