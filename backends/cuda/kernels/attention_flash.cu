// The CudaAttention op over many query rows (a prefill) on tensor cores. attention_rows.cu
// states the op's contract and its params layout (the same 29 int64s, read from device
// memory); this kernel computes the same thing:
//   f[j]   = round_T(q[b, r, :] . k[b, :, j]) * scale[b, g, i, j] + mask[b, g, i, j]
//   e[j]   = exp2((f[j] + max_j f * -1) * log2 e)
//   p[j]   = round_T(e[j] * (1 / sum_j e[j]))
//   out[b, r, :] = round_T(sum_j p[j] * v[b, j, :])
// A block takes 64 rows of one batch (four warps of 16) and walks the keys in tiles of 64,
// k and v staged in shared memory, with mma.sync m16n8k16 (F32 accumulators) for q . k^T
// and p . v. Two passes, not flash-attention's one: the first keeps each row's running
// maximum and sum (the sum rescaled when the maximum grows), the second computes the
// scores again and forms every probability from the row's final maximum and sum, rounded
// to T before its product with v, as the primitives round it (flash-attention's
// unnormalised, rescaled accumulator would round differently). Only the order of the sums
// and the sum's rescaling differ from the primitives.
//
// Masked tiles (a causal prefill's upper half) are skipped only where skipping cannot
// change a bit: a warp skips q . k^T for 64 keys when all its 16 x 64 mask entries are -inf
// and the scores there are provably finite (|q . k| <= depth * max|q| * max|k|, a scalar
// finite scale), since -inf + a finite score is -inf, exactly what the mask holds; and the
// product with v when every probability of the slice is +0 and v's slice is finite (0 *
// inf would be NaN). An infinite or NaN q, k or v, or a score that could overflow, makes it
// compute the tile as the primitives do.
//
// Takes (the runtime checks): T F16 or BF16, depth = width = D (64 or 128), q contiguous
// along depth, k and v contiguous along depth and width, every offset and row stride a
// multiple of 8 elements (16-byte rows). sm_80 and later.
namespace lk {

constexpr int kFlashWarps = 4;
constexpr int kFlashRows = 16 * kFlashWarps;  // query rows per block
constexpr int kFlashKeys = 64;                // keys per tile

template <class T> struct IsBf16 { static constexpr bool value = false; };
template <> struct IsBf16<__nv_bfloat16> { static constexpr bool value = true; };

// c += a b, one m16n8k16 tensor-core step with F32 accumulators (sm_80 mma.sync).
template <class T> struct Mma {
  static __device__ __forceinline__ void run(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#if defined(LK_FLASH_PROBE_NO_MMA)  // the probe's measure of everything but the tensor cores
    c[0] += __uint_as_float(a[0] ^ b0) * 0.0f;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define LK_MMA_M16N8K16(TYPE)                                                                                \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
               "{%8,%9}, {%0,%1,%2,%3};"                                                                     \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                               \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
    if constexpr (IsBf16<T>::value) LK_MMA_M16N8K16("bf16");
    else LK_MMA_M16N8K16("f16");
#undef LK_MMA_M16N8K16
#else
    __trap();
#endif
  }
  // Two floats rounded to T in one register, the first in the low half.
  static __device__ __forceinline__ unsigned pack(float lo, float hi) {
    const T l = from_float<T>(lo), h = from_float<T>(hi);
    return unsigned(*reinterpret_cast<const unsigned short*>(&l)) |
           (unsigned(*reinterpret_cast<const unsigned short*>(&h)) << 16);
  }
};

// Above this, twice the bound on |q . k| may round to an infinite T (F16: 65504).
template <class T> struct ScoreLimit;
template <> struct ScoreLimit<__half> { static constexpr float value = 60000.0f; };
template <> struct ScoreLimit<__nv_bfloat16> { static constexpr float value = 1e37f; };

// Four 8 x 8 matrices of 16-bit elements from shared memory (sm_75 ldmatrix): lanes 8i to
// 8i + 7 give the addresses of matrix i's rows (16 bytes each); lane l receives, in r[i],
// row l / 4, columns 2 (l % 4) and + 1 of matrix i (with Trans, of its transpose): an mma
// operand register.
template <bool Trans>
__device__ __forceinline__ void load_matrices(unsigned (&r)[4], const void* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#else
  __trap();
#endif
}

// Two adjacent elements of T as one 32-bit register (the first in the low half).
template <class T>
__device__ __forceinline__ unsigned load_pair(const T* p) {
  return *reinterpret_cast<const unsigned*>(p);
}

// 16 bytes global -> shared without registers (sm_80 cp.async); `in` false zero-fills.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool in) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(src), "r"(in ? 16 : 0) : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
// Until at most `pending` of this thread's committed groups are still in flight.
template <int pending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" ::"n"(pending) : "memory");
#endif
}

// The largest |x| among 16-bit floats (F16 and BF16 alike), as magnitude bits: both formats
// order non-negative values as their bit patterns, an infinity above every finite value and
// NaN above an infinity. Two lanes of 16 bits per instruction.
__device__ __forceinline__ unsigned pair_magnitude(unsigned pair) { return pair & 0x7fff7fffu; }
__device__ __forceinline__ unsigned max_magnitude(const uint4& u) {
  return __vmaxu2(__vmaxu2(pair_magnitude(u.x), pair_magnitude(u.y)), __vmaxu2(pair_magnitude(u.z), pair_magnitude(u.w)));
}
__device__ __forceinline__ unsigned fold_magnitude(unsigned pairs) { return max(pairs & 0xffffu, pairs >> 16); }
// Magnitude bits of an infinity; NaN lies above.
template <class T> struct InfMagnitude;
template <> struct InfMagnitude<__half> { static constexpr unsigned value = 0x7c00u; };
template <> struct InfMagnitude<__nv_bfloat16> { static constexpr unsigned value = 0x7f80u; };
// Magnitude bits as a float, +inf for an infinity or NaN.
template <class T>
__device__ __forceinline__ float magnitude_value(unsigned bits) {
  if (bits >= InfMagnitude<T>::value) return __int_as_float(0x7f800000);
  if constexpr (IsBf16<T>::value) return __uint_as_float(bits << 16);
  else return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}

template <class T, int D>
__device__ __forceinline__ void attention_flash(const T* __restrict__ q, const T* __restrict__ k,
                                                const T* __restrict__ v, const float* __restrict__ mask,
                                                const float* __restrict__ scale, T* __restrict__ out,
                                                const long long* __restrict__ p) {
  static_assert(D % 16 == 0 && D <= 128, "depth must be a multiple of 16 up to 128");
  constexpr int kPitch = D + 8;  // shared rows 16 bytes past a multiple of 128: no bank conflicts
  constexpr int kChunks = D / 8;  // 16-byte chunks per key
  constexpr float kLog2e = 1.4426950408889634f;
  __shared__ __align__(16) T ks[kFlashKeys * kPitch];
  __shared__ __align__(16) T vs[kFlashKeys * kPitch];
  // The largest |k| and |v| of a staged tile (as bits, NaN as inf), in three slots by tile
  // (clear_ahead below).
  __shared__ unsigned tile_max_k[3], tile_max_v[3];

  const long long batch = p[0], rows = p[1], seq = p[3], keys = p[4];
  const long long tiles = (rows + kFlashRows - 1) / kFlashRows;
  const long long b = blockIdx.x / tiles, tile = blockIdx.x % tiles;
  if (b >= batch) return;  // blocks past the grid the dims ask for
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;

  // This thread's two rows of its warp's 16 (g and g + 8), clamped into range for reading.
  long long row[2];
  bool live[2];
  const float *mask_row[2], *scale_row[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long r = tile * kFlashRows + warp * 16 + g + 8 * h;
    live[h] = r < rows;
    row[h] = live[h] ? r : rows - 1;
    const long long gi = row[h] / seq, i = row[h] % seq;
    mask_row[h] = mask + p[19] + b * p[20] + gi * p[21] + i * p[22];
    scale_row[h] = scale + p[24] + b * p[25] + gi * p[26] + i * p[27];
  }
  const long long mask_j = p[23], scale_j = p[28];

  // q's A fragments (row-major 16 x 16 per step of the depth): a0 (g, 2t), a1 (g + 8, 2t),
  // a2 (g, 2t + 8), a3 (g + 8, 2t + 8). Rows past the end read as zeros.
  unsigned qa[D / 16][4];
  {
    const T* qb = q + p[7] + b * p[8];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const T* qr = qb + row[h] * p[9] + kk * 16 + 2 * t;
        qa[kk][h] = live[h] ? load_pair(qr) : 0u;
        qa[kk][2 + h] = live[h] ? load_pair(qr + 8) : 0u;
      }
  }
  // The warp's largest |q| (NaN as inf), for the bound on the scores of masked tiles.
  unsigned q_bits = 0;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e) q_bits = __vmaxu2(q_bits, pair_magnitude(qa[kk][e]));
  q_bits = fold_magnitude(q_bits);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) q_bits = max(q_bits, __shfl_xor_sync(0xffffffffu, q_bits, offset));
  const float q_max = magnitude_value<T>(q_bits);
  const T* kb = k + p[11] + b * p[12];
  const T* vb = v + p[15] + b * p[16];
  const long long k_js = p[14], v_js = p[17];

  // Keys [j0, j0 + 64) of k or v into shared memory with cp.async (no registers held; the
  // copy runs while the warps compute), keys past the end zero-filled (a probability of 0
  // times a zero, never times whatever lies past v). Pass 1 alternates k between the two
  // buffers (the next tile lands while this one's scores are computed); pass 2 keeps k in
  // one and v in the other, the next k landing during p . v and the next v during the
  // scores.
  // Thread tid copies keys first_key + u * kKeyStep, u < kPer, at depth chunk_d.
  constexpr int kPer = kFlashKeys * kChunks / (kFlashWarps * 32);  // 16-byte chunks per thread
  constexpr int kKeyStep = kFlashWarps * 32 / kChunks;
  static_assert(kFlashWarps * 32 % kChunks == 0, "a thread's chunks share their depth offset");
  const int first_key = tid / kChunks, chunk_d = (tid % kChunks) * 8;
  auto issue = [&](T* dst, const T* src, long long js, long long j0) {
    const T* from = src + (j0 + first_key) * js + chunk_d;
    T* to = dst + first_key * kPitch + chunk_d;
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const bool in = j0 + first_key + u * kKeyStep < keys;
      cp_async16(to + u * kKeyStep * kPitch, in ? from : src, in);
      from += kKeyStep * js;
    }
    cp_async_commit();
  };
  // Where `needed` (block-uniform: some warp may skip, decided by the barrier before), the
  // largest |x| of a staged tile (magnitude bits) into `slot`, by every thread over the
  // chunks it copied, once they have landed, then a barrier that makes it visible.
  auto gather_max = [&](bool needed, const T* buf, unsigned* slot) {
    if (!needed) return;
    unsigned m = 0;
#pragma unroll
    for (int u = 0; u < kPer; ++u)
      m = __vmaxu2(m, max_magnitude(*reinterpret_cast<const uint4*>(buf + (first_key + u * kKeyStep) * kPitch + chunk_d)));
    m = fold_magnitude(m);
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, offset));
    if (lane == 0) atomicMax(slot, m);
    __syncthreads();
  };
  // Tile n (counted over both passes) gathers into slot n % 3 and, after its first barrier,
  // clears slot (n + 2) % 3: read last by tile n - 1 (before this barrier), gathered into
  // next by tile n + 2 (after its first barrier, which follows this one).
  auto clear_ahead = [&](int n) {
    if (tid == 0) tile_max_k[(n + 2) % 3] = tile_max_v[(n + 2) % 3] = 0u;
  };
  if (tid == 0) tile_max_k[0] = tile_max_k[1] = tile_max_v[0] = tile_max_v[1] = 0u;
  __syncthreads();  // before any thread gathers into them

  // f for the tile's keys: s[nt][e] is row g + 8 (e / 2), key j0 + 8 nt + 2t + e % 2 (the
  // accumulator layout); keys past the end are -inf. In two steps, so that the mask's
  // loads are all in flight while the tile is staged (one round trip, not one per 8-key
  // slice): first s holds the mask, then the rounded products are scaled and added to it.
  // A mask contiguous along the keys is read two keys a load. A scale of one value (every
  // stride 0: the models' 1 / sqrt(depth)) is read once.
  const bool scalar_scale = p[25] == 0 && p[26] == 0 && p[27] == 0 && scale_j == 0;
  const float scale0 = __ldg(scale_row[0]);
  bool mask_pairs = mask_j == 1;
#pragma unroll
  for (int h = 0; h < 2; ++h) mask_pairs = mask_pairs && (reinterpret_cast<unsigned long long>(mask_row[h]) & 7) == 0;
  float s[kFlashKeys / 8][4];
  auto load_mask = [&](long long j0) {
#if defined(LK_FLASH_PROBE_CAUSAL)  // the probe's measure of the mask's loads: the causal mask from indices
#pragma unroll
    for (int nt = 0; nt < kFlashKeys / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = j0 + nt * 8 + 2 * t + (e & 1) <= row[e >> 1] % seq ? 0.0f : LK_NEG_INF;
    return;
#endif
#pragma unroll
    for (int nt = 0; nt < kFlashKeys / 8; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const long long j = j0 + nt * 8 + 2 * t;  // even: an aligned pair when mask_pairs
        if (mask_pairs && j + 1 < keys) {
          const float2 m = __ldg(reinterpret_cast<const float2*>(mask_row[h] + j));
          s[nt][2 * h] = m.x;
          s[nt][2 * h + 1] = m.y;
        } else {
          s[nt][2 * h] = j < keys ? __ldg(mask_row[h] + j * mask_j) : LK_NEG_INF;
          s[nt][2 * h + 1] = j + 1 < keys ? __ldg(mask_row[h] + (j + 1) * mask_j) : LK_NEG_INF;
        }
      }
  };
  // Whether the warp's whole 16 x 64 block of the mask is -inf (with a scalar scale): it may
  // then skip the tile's scores if they are provably finite (skippable below).
  auto masked_block = [&]() {
    bool all_masked = scalar_scale;
#pragma unroll
    for (int nt = 0; nt < kFlashKeys / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) all_masked = all_masked && s[nt][e] == LK_NEG_INF;
    return __all_sync(0xffffffffu, all_masked);
  };
  auto skippable = [&](int n) {
    // |q . k| <= D max|q| max|k|; twice that covers the F32 sums' rounding and the rounding
    // to T (ScoreLimit: F16 rounds to inf past 65504).
    const float bound = 2.0f * D * q_max * magnitude_value<T>(tile_max_k[n % 3]);
    return bound < ScoreLimit<T>::value && bound * fabsf(scale0) < 1e37f;
  };
  auto scores = [&](const T* kbuf, long long j0) {
#pragma unroll
    for (int nt = 0; nt < kFlashKeys / 8; ++nt) {
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      // Matrix i of a load: keys nt * 8 .., depth 16 kk + 8 i ..: the B registers of two
      // depth steps.
      const T* kr = kbuf + (nt * 8 + (lane & 7)) * kPitch + (lane >> 3) * 8;
#pragma unroll
      for (int kk = 0; kk < D / 16; kk += 2) {
        unsigned b[4];
        load_matrices<false>(b, kr + kk * 16);
        Mma<T>::run(c, qa[kk], b[0], b[1]);
        Mma<T>::run(c, qa[kk + 1], b[2], b[3]);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const long long j = j0 + nt * 8 + 2 * t + (e & 1);
        const float sc = scalar_scale ? scale0 : __ldg(scale_row[e >> 1] + j * scale_j);
        s[nt][e] = j < keys ? __fadd_rn(__fmul_rn(to_float(from_float<T>(c[e])), sc), s[nt][e]) : LK_NEG_INF;
      }
    }
  };

  // Pass 1: each row's maximum and sum of exponentials. The four threads of a quad hold a
  // row's 64 scores of a tile between them (two columns each per 8-key slice). A skipped
  // tile (every score -inf) leaves both as they are: its exponentials are +0 under a finite
  // maximum, and a maximum of -inf, +inf or NaN is left alone or makes the sum NaN already.
  float mx[2] = {LK_NEG_INF, LK_NEG_INF}, sum[2] = {0.0f, 0.0f};
  int n = 0;  // tiles so far, both passes
  issue(ks, kb, k_js, 0);
#if defined(LK_FLASH_PROBE_ONE_PASS)  // the probe's measure of pass 1: pass 2 alone (wrong results)
  mx[0] = mx[1] = 0.0f, sum[0] = sum[1] = 1.0f;
  cp_async_wait<0>();
  for (long long j0 = keys; j0 < keys; j0 += kFlashKeys, ++n) {
#else
  for (long long j0 = 0; j0 < keys; j0 += kFlashKeys, ++n) {
#endif
    load_mask(j0);
    T* const cur = (n & 1) ? vs : ks;
    T* const other = (n & 1) ? ks : vs;
    cp_async_wait<0>();
    const bool masked = masked_block();
    // The tile is in; every warp is done with the buffer the next one fills.
    const bool any_masked = __syncthreads_or(masked);
    clear_ahead(n);
    if (j0 + kFlashKeys < keys) issue(other, kb, k_js, j0 + kFlashKeys);
    gather_max(any_masked, cur, &tile_max_k[n % 3]);
    if (masked && skippable(n)) continue;
    scores(cur, j0);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tile_max = LK_NEG_INF;
#pragma unroll
      for (int nt = 0; nt < kFlashKeys / 8; ++nt)
        tile_max = nan_max(nan_max(tile_max, s[nt][2 * h]), s[nt][2 * h + 1]);
      tile_max = nan_max(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = nan_max(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      const float m = nan_max(mx[h], tile_max);
      // A tile of -inf under a maximum of -inf adds nothing (its exponentials would be NaN:
      // -inf + inf); a row of -inf alone comes out NaN in pass 2, as the primitives give.
      // No branch around the shuffles: a quad agrees, a warp need not.
      const bool empty = m == LK_NEG_INF;
      const float neg = empty ? 0.0f : __fmul_rn(m, -1.0f);
      float part = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kFlashKeys / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) part = __fadd_rn(part, exp2f(__fmul_rn(__fadd_rn(s[nt][2 * h + e], neg), kLog2e)));
      part = __fadd_rn(part, __shfl_xor_sync(0xffffffffu, part, 1));
      part = __fadd_rn(part, __shfl_xor_sync(0xffffffffu, part, 2));
      if (!empty) {
        sum[h] = __fadd_rn(__fmul_rn(sum[h], exp2f(__fmul_rn(__fadd_rn(mx[h], neg), kLog2e))), part);
        mx[h] = m;
      }
    }
  }
  float neg_max[2], inv_sum[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    neg_max[h] = __fmul_rn(mx[h], -1.0f);
    inv_sum[h] = __frcp_rn(sum[h]);
  }
  // A skipped tile's probabilities, exp2(-inf + neg_max) * inv_sum, are +0 where the row's
  // maximum is finite (its sum then lies in [1, keys]); a row of -inf, +inf or NaN forms them
  // from the scores (NaN).
  const bool finite_rows = isfinite(mx[0]) && isfinite(mx[1]);

  // Pass 2: the probabilities, rounded, times v. A row's probabilities of two 8-key slices
  // are exactly the A fragment of a 16-key step (the accumulator and A layouts line up).
  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  __syncthreads();  // every warp is done with pass 1's buffers
  issue(ks, kb, k_js, 0);
  issue(vs, vb, v_js, 0);
  for (long long j0 = 0; j0 < keys; j0 += kFlashKeys, ++n) {
    const bool next = j0 + kFlashKeys < keys;
    load_mask(j0);
    cp_async_wait<1>();  // k (v may still be in flight)
    const bool masked = masked_block();
    const bool any_masked = __syncthreads_or(masked);
    clear_ahead(n);
    gather_max(any_masked, ks, &tile_max_k[n % 3]);
    const bool skipped = masked && skippable(n);
    if (!skipped) scores(ks, j0);
    unsigned pa[kFlashKeys / 16][4];
    bool all_zero = true;
    if (skipped && finite_rows) {
#pragma unroll
      for (int kk = 0; kk < kFlashKeys / 16; ++kk) pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;
    } else {
#pragma unroll
      for (int nt = 0; nt < kFlashKeys / 8; ++nt) {
        float pr[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e >> 1;
          pr[e] = __fmul_rn(exp2f(__fmul_rn(__fadd_rn(s[nt][e], neg_max[h]), kLog2e)), inv_sum[h]);
        }
        pa[nt / 2][(nt & 1) * 2 + 0] = Mma<T>::pack(pr[0], pr[1]);
        pa[nt / 2][(nt & 1) * 2 + 1] = Mma<T>::pack(pr[2], pr[3]);
        all_zero = all_zero && (pa[nt / 2][(nt & 1) * 2] | pa[nt / 2][(nt & 1) * 2 + 1]) == 0u;
      }
    }
    const bool zero = __all_sync(0xffffffffu, all_zero);
    cp_async_wait<0>();  // v: the only copy in flight (the next k is issued below)
    // v is in; every warp is done with k.
    const bool any_zero = __syncthreads_or(zero);
    if (next) issue(ks, kb, k_js, j0 + kFlashKeys);
    gather_max(any_zero, vs, &tile_max_v[n % 3]);
    // Every probability +0 and v finite: the products are zeros, which change no sum (o
    // starts at +0 and is never -0: zeros and exact cancellations add to +0).
    if (!zero || tile_max_v[n % 3] >= InfMagnitude<T>::value) {
      // Matrix i of a load, transposed: keys 16 kk + 8 (i % 2) .., columns 8 (dt + i / 2) ..:
      // the B registers of two 8-column slices.
      const T* vr = vs + (((lane >> 3) & 1) * 8 + (lane & 7)) * kPitch + (lane >> 4) * 8;
#pragma unroll
      for (int dt = 0; dt < D / 8; dt += 2)
#pragma unroll
        for (int kk = 0; kk < kFlashKeys / 16; ++kk) {
          unsigned b[4];
          load_matrices<true>(b, vr + kk * 16 * kPitch + dt * 8);
          Mma<T>::run(o[dt], pa[kk], b[0], b[1]);
          Mma<T>::run(o[dt + 1], pa[kk], b[2], b[3]);
        }
    }
    __syncthreads();  // every warp is done with v
    if (next) issue(vs, vb, v_js, j0 + kFlashKeys);
  }

  // out[b, r, dt * 8 + 2t ..]: two adjacent columns per register pair.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!live[h]) continue;
    T* orow = out + (b * rows + row[h]) * D + 2 * t;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<unsigned*>(orow + dt * 8) = Mma<T>::pack(o[dt][2 * h], o[dt][2 * h + 1]);
  }
}

}  // namespace lk

// kFlashWarps * 32 threads; batch * ceil(rows / 64) blocks or more (the extra ones leave).
#define LUMINAL_ATTENTION_FLASH_ENTRY(NAME, T, D)                                                                \
  extern "C" __global__ void __launch_bounds__(lk::kFlashWarps * 32)                                             \
      NAME(const T* q, const T* k, const T* v, const float* mask, const float* scale, T* out,                    \
           const long long* params) {                                                                            \
    LK_GRID_ENTER();                                                                                              \
    lk::attention_flash<T, D>(q, k, v, mask, scale, out, params);                                                \
  }
