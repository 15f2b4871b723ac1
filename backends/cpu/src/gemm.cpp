// The GEMM driver: validation, ISA choice, blocking, packing and threading. The inner
// loops live in the per-ISA kernel tables (kernels_*.cpp).
//
// Blocked path (BLIS-style): for each block of kNc columns and Kernels::kc depth steps, B is
// packed into kc x NR panels (converted to F32 on the way) and A into MR x kc panels,
// both in parallel; then tasks over (batch, block of kMcRows rows, range of B panels)
// run the micro-kernel over their tiles, B panel outer so it stays in L1 while the A
// panels stream from L2. The epilogue runs on each tile after its last depth block,
// while the tile is still in cache. A B packed beforehand by pack_b() (a persisted
// weight) skips the B packing: the same panels, all blocks laid out one after another.
//
// GEMV path (m <= kGemvMaxRows): packing B would cost more than using it, so B is read
// once, in place, split over N across the pool: bandwidth, not FLOPs, bounds it.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>

#include "kernels.hpp"
#include "luminal/cpu/gemm.hpp"
#include "luminal/cpu/thread_pool.hpp"
#include "luminal/error.hpp"

namespace luminal::cpu {
namespace {

constexpr int64_t kMcRows = 144;       // rows per task block (rounded down to MR)
constexpr int64_t kNc = 4096;          // columns per packed B block
constexpr int64_t kGemvMaxRows = 8;      // m at or below this takes the GEMV path (measured: docs/CPU_BACKEND.md)
constexpr int64_t kGemvRowsChunk = 256;  // GEMV (rows layout) columns per task
constexpr int64_t kGemvColsChunk = 32;   // GEMV (columns layout) columns per task
constexpr int64_t kPackBudget = int64_t{32} << 20;  // bytes of packed panels per round of batches

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// A grow-only 64-byte aligned buffer per calling thread; pool tasks only write into it.
float* workspace(size_t floats) {
  struct Buffer {
    float* data = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buffer;
  if (buffer.size < floats) {
    std::free(buffer.data);
    const size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    buffer.data = static_cast<float*>(std::aligned_alloc(64, bytes));
    LUMINAL_CHECK(buffer.data != nullptr, "gemm: cannot allocate ", bytes, " bytes of packing space");
    buffer.size = floats;
  }
  return buffer.data;
}

const void* b_element(const GemmArgs& g, int64_t batch, int64_t p, int64_t j) {
  const int64_t eb = static_cast<int64_t>(dtype_bytes(g.b_dtype));
  return static_cast<const char*>(g.b) + (batch * g.b_batch_stride + p * g.b_row_stride + j * g.b_col_stride) * eb;
}

// B block (depth [pc, pc + kc), columns [jc, jc + nc)) packed as panels of NR columns:
// panel q holds dst[q * kc * NR + p * NR + j]. Work items are chosen along B's
// contiguous dim, so every read is a long stream: rows of B when its columns are
// contiguous (row-major), panels when its rows are (a transposed Linear weight).
struct BPacking {
  bool by_rows;
  int64_t items_per_copy;
};
constexpr int64_t kPackRowsPerItem = 8;

BPacking b_packing(const GemmArgs& g, int64_t kc, int64_t n_panels) {
  if (g.b_col_stride == 1) return {true, ceil_div(kc, kPackRowsPerItem)};
  return {false, n_panels};
}

void pack_b_rows(const detail::Kernels& kern, const GemmArgs& g, int64_t batch, int64_t pc, int64_t kc, int64_t p0,
                 int64_t p1, int64_t jc, int64_t nc, float* dst) {
  const int64_t nr = kern.nr;
  alignas(64) float row[kNc];
  for (int64_t p = p0; p < p1; ++p) {
    kern.convert(b_element(g, batch, pc + p, jc), g.b_dtype, row, nc);
    for (int64_t q = 0, j = 0; j < nc; ++q, j += nr) {
      const int64_t nv = std::min(nr, nc - j);
      float* out = dst + q * kc * nr + p * nr;
      std::memcpy(out, row + j, static_cast<size_t>(nv) * sizeof(float));
      std::fill(out + nv, out + nr, 0.f);
    }
  }
}

void pack_b_panel(const detail::Kernels& kern, const GemmArgs& g, int64_t batch, int64_t pc, int64_t kc, int64_t j0,
                  int64_t nv, float* dst) {
  const int64_t nr = kern.nr;
  if (g.b_row_stride == 1) {
    // Each column is a short contiguous run (kc values); fetch a few columns ahead,
    // since the hardware prefetcher has no time to learn such short streams.
    constexpr int64_t kColumnsAhead = 4;
    const int64_t run_bytes = kc * static_cast<int64_t>(dtype_bytes(g.b_dtype));
    LUMINAL_ASSERT(kc <= detail::kMaxDepthBlock, "depth block ", kc, " exceeds the column buffer");
    alignas(64) float column[detail::kMaxDepthBlock];
    for (int64_t j = 0; j < nr; ++j) {
      if (j + kColumnsAhead < nv) {
        const char* ahead = static_cast<const char*>(b_element(g, batch, pc, j0 + j + kColumnsAhead));
        for (int64_t byte = 0; byte < run_bytes; byte += 64) __builtin_prefetch(ahead + byte);
      }
      if (j < nv) {
        kern.convert(b_element(g, batch, pc, j0 + j), g.b_dtype, column, kc);
        for (int64_t p = 0; p < kc; ++p) dst[p * nr + j] = column[p];
      } else {
        for (int64_t p = 0; p < kc; ++p) dst[p * nr + j] = 0.f;
      }
    }
    return;
  }
  for (int64_t p = 0; p < kc; ++p) {
    for (int64_t j = 0; j < nr; ++j) {
      if (j < nv) {
        kern.convert(b_element(g, batch, pc + p, j0 + j), g.b_dtype, dst + p * nr + j, 1);
      } else {
        dst[p * nr + j] = 0.f;
      }
    }
  }
}

// Work item x of B's block (depth [pc, pc + kc), columns [jc, jc + nc)) packed into the
// block's panels at dst.
void pack_b_item(const detail::Kernels& kern, const GemmArgs& g, const BPacking& bp, int64_t batch, int64_t pc,
                 int64_t kc, int64_t jc, int64_t nc, int64_t x, float* dst) {
  if (bp.by_rows) {
    const int64_t p0 = x * kPackRowsPerItem;
    pack_b_rows(kern, g, batch, pc, kc, p0, std::min(kc, p0 + kPackRowsPerItem), jc, nc, dst);
  } else {
    pack_b_panel(kern, g, batch, pc, kc, jc + x * kern.nr, std::min<int64_t>(kern.nr, nc - x * kern.nr),
                 dst + x * kc * kern.nr);
  }
}

// Where a pack_b() copy keeps the block at (jc, pc): blocks of kNc columns (a multiple
// of NR) one after the other, each holding its depth blocks in order.
int64_t packed_block_offset(const GemmArgs& g, int64_t nr, int64_t jc, int64_t pc) {
  return jc * g.k + pc * round_up(std::min(kNc, g.n - jc), nr);
}

bool b_shared_by_batches(const GemmArgs& g) { return g.batch == 1 || g.b_batch_stride == 0; }

// Panel of A rows [i0, i0 + mv) over depth [pc, pc + kc): dst[p * MR + r].
void pack_a_panel(const detail::Kernels& kern, const GemmArgs& g, int64_t batch, int64_t pc, int64_t kc, int64_t i0,
                  int64_t mv, float* dst) {
  const int64_t mr = kern.mr;
  const float* a = g.a + batch * g.a_batch_stride;
  if (g.a_col_stride == 1 && kern.pack_a != nullptr) {
    kern.pack_a(mv, kc, a + i0 * g.a_row_stride + pc, g.a_row_stride, dst);
    return;
  }
  if (g.a_col_stride == 1) {
    for (int64_t r = 0; r < mr; ++r) {
      if (r < mv) {
        const float* src = a + (i0 + r) * g.a_row_stride + pc;
        for (int64_t p = 0; p < kc; ++p) dst[p * mr + r] = src[p];
      } else {
        for (int64_t p = 0; p < kc; ++p) dst[p * mr + r] = 0.f;
      }
    }
    return;
  }
  for (int64_t p = 0; p < kc; ++p) {
    for (int64_t r = 0; r < mr; ++r) {
      dst[p * mr + r] = r < mv ? a[(i0 + r) * g.a_row_stride + (pc + p) * g.a_col_stride] : 0.f;
    }
  }
}

bool has_epilogue(const GemmArgs& g) { return g.bias != nullptr || g.epilogue != Epilogue::None; }

// A packed B panel: F32, or F16/BF16 kept by pack_b for the table's micro_half.
struct BPanel {
  const void* data;
  DType dtype = DType::F32;
};

// The first `rows` rows of a full-width tile over the panel, into c (row stride ldc).
void micro_tile(const detail::Kernels& kern, int64_t rows, int64_t kc, const float* a_panel, BPanel b, float* c,
                int64_t ldc, bool accumulate) {
  if (b.dtype != DType::F32) {
    kern.micro_half(rows, kc, a_panel, static_cast<const uint16_t*>(b.data), b.dtype, c, ldc, accumulate);
  } else if (rows == kern.mr) {
    kern.micro(kc, a_panel, static_cast<const float*>(b.data), c, ldc, accumulate);
  } else {
    kern.micro_rows(rows, kc, a_panel, static_cast<const float*>(b.data), c, ldc, accumulate);
  }
}

// One tile (mv rows, nv columns) of C over a depth block of packed panels:
// C = (first ? 0 : C) + A B, then the epilogue when this is the last depth block. A tile
// narrower than the panel is computed into `tile` (mr x nr floats) and copied.
void run_tile(const detail::Kernels& kern, const GemmArgs& g, int64_t mv, int64_t j, int64_t nv, int64_t kc,
              const float* a_panel, BPanel b_panel, float* c_tile, bool first, bool last, float* tile) {
  const int64_t mr = kern.mr, nr = kern.nr;
  const bool rows_direct = b_panel.dtype != DType::F32 || kern.micro_rows != nullptr;
  if (nv == nr && (mv == mr || rows_direct)) {
    micro_tile(kern, mv, kc, a_panel, b_panel, c_tile, g.c_row_stride, !first);
  } else {
    micro_tile(kern, mr, kc, a_panel, b_panel, tile, nr, false);
    for (int64_t r = 0; r < mv; ++r) {
      float* dst = c_tile + r * g.c_row_stride;
      const float* src = tile + r * nr;
      for (int64_t x = 0; x < nv; ++x) dst[x] = first ? src[x] : dst[x] + src[x];
    }
  }
  if (last && has_epilogue(g)) {
    for (int64_t r = 0; r < mv; ++r) {
      kern.epilogue(c_tile + r * g.c_row_stride, nv, g.bias ? g.bias + j : nullptr, g.epilogue);
    }
  }
}

// g.packed_b where it fits these arguments and this kernel table, else null.
const PackedB* usable_packed_b(const detail::Kernels& kern, const GemmArgs& g) {
  const PackedB* pre = g.packed_b;
  if (pre != nullptr && (pre->isa != kern.isa || pre->k != g.k || pre->n != g.n || !b_shared_by_batches(g)))
    return nullptr;
  return pre;
}

// A product whose B was packed beforehand.
struct PrepackedProduct {
  const GemmArgs* g;
  const PackedB* pre;
};

// B packed beforehand (a weight): A is packed whole, every depth block at once, and the
// product is then one parallel region, where packing per depth block joins the pool twice
// per block (a join waits for the slowest thread, and a neighbour on a shared machine makes
// that often). Tasks cover (batch, block of rows, range of B panels) and run every depth
// block over their tiles in turn, the B panel outer so it stays in L1 while the A panels
// stream from L2. Weights larger than the L3 stream from memory: while a B panel is in use,
// the next one the task needs is fetched into L2, a slice per row panel.
// Several products of one A (siblings: gemm_group) share the A packing and the region.
void gemm_prepacked(const detail::Kernels& kern, std::span<const PrepackedProduct> products, ThreadPool& pool) {
  const GemmArgs& g0 = *products[0].g;  // A, m, k and the batch are the products' own
  const int64_t mr = kern.mr, nr = kern.nr, depth_block = kern.kc;
  const int64_t m_panels = ceil_div(g0.m, mr);
  // Batch bi's depth block at pc keeps panel s at packed_a[bi * a_floats + pc * m_panels * mr + s * kc * mr].
  const int64_t a_floats = m_panels * mr * g0.k;
  const int64_t depth_blocks = ceil_div(g0.k, depth_block);
  float* packed_a = workspace(static_cast<size_t>(g0.batch * a_floats));
  pool.parallel_for(0, g0.batch * depth_blocks * m_panels, 4, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t bi = item / (depth_blocks * m_panels), s = item % m_panels;
      const int64_t pc = item / m_panels % depth_blocks * depth_block, kc = std::min(depth_block, g0.k - pc);
      pack_a_panel(kern, g0, bi, pc, kc, s * mr, std::min(mr, g0.m - s * mr),
                   packed_a + bi * a_floats + pc * m_panels * mr + s * kc * mr);
    }
  });
  const int64_t mc = std::max<int64_t>(mr, kMcRows / mr * mr);
  const int64_t m_blocks = ceil_div(m_panels, mc / mr);  // of equal size, as in gemm_blocked
  // Each product's tasks, one after another: enough to balance the pool, each at least 4 B
  // panels wide. The pool hands out tasks as threads free up, so products of unequal
  // widths still balance.
  const int64_t want = 4 * static_cast<int64_t>(pool.num_threads());
  struct Split {
    int64_t n_panels, n_splits, panels_per_split, first_task;
  };
  std::vector<Split> splits;
  int64_t tasks = 0;
  for (const PrepackedProduct& pr : products) {
    Split sp;
    sp.n_panels = ceil_div(pr.g->n, nr);
    sp.n_splits = std::clamp<int64_t>(ceil_div(want, g0.batch * m_blocks), 1, std::max<int64_t>(1, sp.n_panels / 4));
    sp.panels_per_split = ceil_div(sp.n_panels, sp.n_splits);
    sp.first_task = tasks;
    tasks += g0.batch * m_blocks * sp.n_splits;
    splits.push_back(sp);
  }
  pool.parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    alignas(64) float tile[16 * 64];
    LUMINAL_ASSERT(mr * nr <= 16 * 64, "micro-tile larger than the edge buffer");
    size_t product = 0;
    for (int64_t task_id = begin; task_id < end; ++task_id) {
      while (product + 1 < products.size() && splits[product + 1].first_task <= task_id) ++product;
      const GemmArgs& g = *products[product].g;
      const PackedB& pre = *products[product].pre;
      const Split& sp = splits[product];
      const int64_t task = task_id - sp.first_task;
      // Where panel q (columns from q * nr) of the depth block at pc starts.
      const int64_t esize = static_cast<int64_t>(dtype_bytes(pre.dtype));
      auto b_panel = [&](int64_t q, int64_t pc) {
        const int64_t j = q * nr, jc = j / kNc * kNc;
        return pre.panels.get() +
               (packed_block_offset(g, nr, jc, pc) + (j - jc) * std::min(depth_block, g.k - pc)) * esize;
      };
      const int64_t bi = task / (m_blocks * sp.n_splits);
      const int64_t ib = task / sp.n_splits % m_blocks, split = task % sp.n_splits;
      const int64_t q_begin = split * sp.panels_per_split, q_end = std::min(sp.n_panels, q_begin + sp.panels_per_split);
      const int64_t s_begin = ib * m_panels / m_blocks, s_end = (ib + 1) * m_panels / m_blocks;
      const float* a_batch = packed_a + bi * a_floats;
      float* c = g.c + bi * g.c_batch_stride;
      for (int64_t pc = 0; pc < g.k; pc += depth_block) {
        const int64_t kc = std::min(depth_block, g.k - pc);
        const bool first = pc == 0, last = pc + kc == g.k;
        for (int64_t q = q_begin; q < q_end; ++q) {
          const int64_t j = q * nr, nv = std::min(nr, g.n - j);
          const std::byte* panel = b_panel(q, pc);
          // The panel after this one: the next column panel, or the task's first of the next depth block.
          const bool more = q + 1 < q_end || pc + kc < g.k;
          const std::byte* next = q + 1 < q_end ? b_panel(q + 1, pc) : more ? b_panel(q_begin, pc + kc) : nullptr;
          const int64_t next_lines =
              more ? (q + 1 < q_end ? kc : std::min(depth_block, g.k - pc - kc)) * nr * esize / 64 : 0;
          const int64_t lines_per_tile = ceil_div(next_lines, s_end - s_begin);
          for (int64_t s = s_begin; s < s_end; ++s) {
            const int64_t l_begin = (s - s_begin) * lines_per_tile, l_end = std::min(next_lines, l_begin + lines_per_tile);
            for (int64_t l = l_begin; l < l_end; ++l) __builtin_prefetch(next + l * 64, 0, 2);  // 64-byte lines
            const int64_t i = s * mr;
            run_tile(kern, g, std::min(mr, g.m - i), j, nv, kc, a_batch + pc * m_panels * mr + s * kc * mr,
                     {panel, pre.dtype}, c + i * g.c_row_stride + j, first, last, tile);
          }
        }
      }
    }
  });
}

// Does the blocked path take g with B packed beforehand as one region (A packed whole)?
bool prepacked_fits(const detail::Kernels& kern, const GemmArgs& g) {
  return static_cast<int64_t>(sizeof(float)) * g.batch * ceil_div(g.m, kern.mr) * kern.mr * g.k <= kPackBudget;
}

void gemm_blocked(const detail::Kernels& kern, const GemmArgs& g, ThreadPool& pool) {
  const int64_t mr = kern.mr, nr = kern.nr;
  const int64_t mc = std::max<int64_t>(mr, kMcRows / mr * mr);
  const int64_t m_panels = ceil_div(g.m, mr);
  // Row blocks of equal size (in panels, at most mc rows each): 1024 rows in blocks of 144
  // left a last block of 16, and the pool's two threads 4 full blocks against 3 and the
  // short one (sgemm 1024^3: 0.85-0.87 of OpenBLAS on two threads, ~0.97 on one).
  const int64_t m_blocks = ceil_div(m_panels, mc / mr);
  const bool b_broadcast = g.b_batch_stride == 0;
  const int64_t depth_block = kern.kc;
  const int64_t kc_max = std::min(depth_block, g.k);
  const int64_t nc_max = round_up(std::min(kNc, g.n), nr);
  const int64_t a_floats = round_up(m_panels * mr * kc_max, 16);  // keeps B panels 64-byte aligned
  const PackedB* pre = usable_packed_b(kern, g);
  if (pre != nullptr && prepacked_fits(kern, g)) {
    const PrepackedProduct product{&g, pre};
    gemm_prepacked(kern, {&product, 1}, pool);
    return;
  }
  const int64_t b_floats = pre != nullptr ? 0 : kc_max * nc_max;
  const int64_t per_batch = (a_floats + (b_broadcast ? 0 : b_floats)) * int64_t{sizeof(float)};
  const int64_t group = std::clamp<int64_t>(kPackBudget / std::max<int64_t>(per_batch, 1), 1, g.batch);
  const int threads = pool.num_threads();

  for (int64_t b0 = 0; b0 < g.batch; b0 += group) {
    const int64_t gb = std::min(group, g.batch - b0);
    const int64_t b_copies = b_broadcast ? 1 : gb;
    float* packed_a = workspace(static_cast<size_t>(gb * a_floats + b_copies * b_floats));
    float* packed_b = packed_a + gb * a_floats;
    for (int64_t jc = 0; jc < g.n; jc += kNc) {
      const int64_t nc = std::min(kNc, g.n - jc);
      const int64_t n_panels = ceil_div(nc, nr);
      // Enough tasks to balance the pool, each at least 4 B panels wide.
      const int64_t want = 4 * static_cast<int64_t>(threads);
      const int64_t n_splits =
          std::clamp<int64_t>(ceil_div(want, gb * m_blocks), 1, std::max<int64_t>(1, n_panels / 4));
      const int64_t panels_per_split = ceil_div(n_panels, n_splits);
      for (int64_t pc = 0; pc < g.k; pc += depth_block) {
        const int64_t kc = std::min(depth_block, g.k - pc);
        const bool first = pc == 0, last = pc + kc == g.k;
        // Pack: B panels of every distinct batch, then A panels of every batch.
        const BPacking bp = b_packing(g, kc, n_panels);
        const int64_t b_items = pre != nullptr ? 0 : b_copies * bp.items_per_copy;
        pool.parallel_for(0, b_items + gb * m_panels, 4, [&](int64_t begin, int64_t end) {
          for (int64_t item = begin; item < end; ++item) {
            if (item < b_items) {
              const int64_t bi = item / bp.items_per_copy, x = item % bp.items_per_copy;
              pack_b_item(kern, g, bp, b0 + bi, pc, kc, jc, nc, x, packed_b + bi * b_floats);
            } else {
              const int64_t bi = (item - b_items) / m_panels, s = (item - b_items) % m_panels;
              pack_a_panel(kern, g, b0 + bi, pc, kc, s * mr, std::min(mr, g.m - s * mr),
                           packed_a + bi * a_floats + s * kc * mr);
            }
          }
        });
        pool.parallel_for(0, gb * m_blocks * n_splits, 1, [&](int64_t begin, int64_t end) {
          alignas(64) float tile[16 * 64];
          LUMINAL_ASSERT(mr * nr <= 16 * 64, "micro-tile larger than the edge buffer");
          for (int64_t task = begin; task < end; ++task) {
            const int64_t bi = task / (m_blocks * n_splits);
            const int64_t ib = task / n_splits % m_blocks, split = task % n_splits;
            const int64_t q_begin = split * panels_per_split;
            const int64_t q_end = std::min(n_panels, q_begin + panels_per_split);
            const float* a_block = packed_a + bi * a_floats;
            // A weight packed beforehand, of its panels' dtype, or this round's F32 panels.
            const DType b_dtype = pre != nullptr ? pre->dtype : DType::F32;
            const int64_t b_esize = static_cast<int64_t>(dtype_bytes(b_dtype));
            const std::byte* b_block =
                pre != nullptr
                    ? pre->panels.get() + packed_block_offset(g, nr, jc, pc) * b_esize
                    : reinterpret_cast<const std::byte*>(packed_b + (b_broadcast ? 0 : bi) * b_floats);
            float* c = g.c + (b0 + bi) * g.c_batch_stride;
            const int64_t s_begin = ib * m_panels / m_blocks, s_end = (ib + 1) * m_panels / m_blocks;
            for (int64_t q = q_begin; q < q_end; ++q) {
              const int64_t j = jc + q * nr, nv = std::min(nr, g.n - j);
              for (int64_t s = s_begin; s < s_end; ++s) {
                const int64_t i = s * mr, mv = std::min(mr, g.m - i);
                float* c_tile = c + i * g.c_row_stride + j;
                run_tile(kern, g, mv, j, nv, kc, a_block + s * kc * mr, {b_block + q * kc * nr * b_esize, b_dtype},
                         c_tile, first, last, tile);
              }
            }
          }
        });
      }
    }
  }
}

void gemm_gemv(const detail::Kernels& kern, const GemmArgs& g, ThreadPool& pool) {
  const bool rows_layout = g.b_col_stride == 1;
  const int64_t chunk = rows_layout ? kGemvRowsChunk : kGemvColsChunk;
  const int64_t chunks = ceil_div(g.n, chunk);
  const int64_t ldb = rows_layout ? g.b_row_stride : g.b_col_stride;
  // The kernels read A rows contiguously; copy a strided A (m * k floats: small here).
  const bool a_contiguous = g.a_col_stride == 1;
  const float* a_copy = nullptr;
  if (!a_contiguous) {
    float* copy = workspace(static_cast<size_t>(g.batch * g.m * g.k));
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t i = 0; i < g.m; ++i) {
        for (int64_t p = 0; p < g.k; ++p) {
          copy[(b * g.m + i) * g.k + p] = g.a[b * g.a_batch_stride + i * g.a_row_stride + p * g.a_col_stride];
        }
      }
    }
    a_copy = copy;
  }
  pool.parallel_for(0, g.batch * chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / chunks, j0 = task % chunks * chunk, w = std::min(chunk, g.n - j0);
      const float* a = a_contiguous ? g.a + b * g.a_batch_stride : a_copy + b * g.m * g.k;
      const int64_t lda = a_contiguous ? g.a_row_stride : g.k;
      float* c = g.c + b * g.c_batch_stride + j0;
      const void* b_chunk = b_element(g, b, 0, j0);
      (rows_layout ? kern.gemv_rows : kern.gemv_cols)(g.m, g.k, a, lda, b_chunk, g.b_dtype, ldb, w, c, g.c_row_stride);
      if (has_epilogue(g)) {
        for (int64_t i = 0; i < g.m; ++i) {
          kern.epilogue(c + i * g.c_row_stride, w, g.bias ? g.bias + j0 : nullptr, g.epilogue);
        }
      }
    }
  });
}

// Many tiny products (a DLRM's pairwise interactions: 2048 batches of 4 x 4 x 4): a GEMV
// or micro-kernel call per batch costs more (~50 ns) than the batch's arithmetic, so whole
// batches run as plain loops. Each C element is one float sum over k, in order.
constexpr int64_t kTinyProduct = 256;  // m * n * k at most
constexpr int64_t kTinyMinBatch = 8;

void gemm_tiny(const detail::Kernels& kern, const GemmArgs& g, ThreadPool& pool) {
  const float* b_f32 = static_cast<const float*>(g.b);
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, g.m * g.n * g.k));
  pool.parallel_for(0, g.batch, grain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const float* a = g.a + b * g.a_batch_stride;
      const float* bb = b_f32 + b * g.b_batch_stride;
      float* c = g.c + b * g.c_batch_stride;
      for (int64_t i = 0; i < g.m; ++i) {
        float* row = c + i * g.c_row_stride;
        for (int64_t j = 0; j < g.n; ++j) {
          float sum = 0.f;
          for (int64_t p = 0; p < g.k; ++p) sum += a[i * g.a_row_stride + p * g.a_col_stride] * bb[p * g.b_row_stride + j * g.b_col_stride];
          row[j] = sum;
        }
        if (has_epilogue(g)) kern.epilogue(row, g.n, g.bias, g.epilogue);
      }
    }
  });
}

// ---- ISA and path selection ----
std::atomic<int> g_active_isa{-1};
std::atomic<GemmPath> g_forced_path{GemmPath::Auto};

Isa parse_isa(std::string_view name) {
  if (name == "generic") return Isa::Generic;
  if (name == "avx2") return Isa::Avx2;
  if (name == "avx512") return Isa::Avx512;
  fail("LUMINAL_CPU_ISA: unknown instruction set '", name, "' (expected generic, avx2 or avx512)");
}

const detail::Kernels& kernels_for(Isa isa) {
  switch (isa) {
#if defined(LUMINAL_CPU_HAVE_X86_KERNELS)
    case Isa::Avx512: return detail::avx512_kernels();
    case Isa::Avx2: return detail::avx2_kernels();
#endif
    default: return detail::generic_kernels();
  }
}

// Does gemm() take the tiny-products path (gemm_tiny)? Never when a path is forced.
bool takes_tiny(const GemmArgs& g) {
  return g_forced_path.load(std::memory_order_relaxed) == GemmPath::Auto && g.batch >= kTinyMinBatch &&
         g.m * g.n * g.k <= kTinyProduct && g.b_dtype == DType::F32;
}

// Does gemm() take the GEMV path for these arguments?
bool takes_gemv(const GemmArgs& g) {
  const bool gemv_layout = g.b_col_stride == 1 || g.b_row_stride == 1;
  const GemmPath path = g_forced_path.load(std::memory_order_relaxed);
  const bool small_m = path == GemmPath::Auto ? g.m <= kGemvMaxRows : path == GemmPath::Gemv;
  return small_m && gemv_layout;
}

}  // namespace

std::string_view epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::None: return "none";
    case Epilogue::Relu: return "relu";
    case Epilogue::GeluTanh: return "gelu_tanh";
    case Epilogue::GeluErf: return "gelu_erf";
    case Epilogue::Silu: return "silu";
  }
  return "?";
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Generic: return "generic";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Generic: return true;
#if defined(LUMINAL_CPU_HAVE_X86_KERNELS)
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case Isa::Avx512: return isa_supported(Isa::Avx2) && __builtin_cpu_supports("avx512f");
#else
    default: return false;
#endif
  }
  return false;
}

Isa best_isa() {
  for (Isa isa : {Isa::Avx512, Isa::Avx2}) {
    if (isa_supported(isa)) return isa;
  }
  return Isa::Generic;
}

void pin_isa(Isa isa) {
  LUMINAL_CHECK(isa_supported(isa), "pin_isa: this CPU (or build) lacks ", isa_name(isa));
  g_active_isa.store(static_cast<int>(isa));
}

Isa active_isa() {
  int isa = g_active_isa.load();
  if (isa < 0) {
    const char* env = std::getenv("LUMINAL_CPU_ISA");
    const Isa chosen = env != nullptr && *env != '\0' ? parse_isa(env) : best_isa();
    LUMINAL_CHECK(isa_supported(chosen), "LUMINAL_CPU_ISA=", env, ": this CPU (or build) lacks it");
    int expected = -1;
    g_active_isa.compare_exchange_strong(expected, static_cast<int>(chosen));
    isa = g_active_isa.load();
  }
  return static_cast<Isa>(isa);
}

void force_gemm_path(GemmPath path) { g_forced_path.store(path); }
int64_t gemv_max_rows() { return kGemvMaxRows; }

const detail::Kernels& detail::active_kernels() { return kernels_for(active_isa()); }

GemmArgs GemmArgs::row_major(int64_t m, int64_t n, int64_t k, const float* a, const void* b, float* c, DType b_dtype) {
  GemmArgs g;
  g.m = m, g.n = n, g.k = k;
  g.a = a, g.a_row_stride = k, g.a_col_stride = 1;
  g.b = b, g.b_dtype = b_dtype, g.b_row_stride = n, g.b_col_stride = 1;
  g.c = c, g.c_row_stride = n;
  return g;
}

void validate(const GemmArgs& g) {
  LUMINAL_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0, "gemm: negative size m=", g.m, " n=", g.n, " k=", g.k);
  LUMINAL_CHECK(g.batch >= 1, "gemm: batch must be >= 1, got ", g.batch);
  LUMINAL_CHECK(g.b_dtype == DType::F32 || g.b_dtype == DType::F16 || g.b_dtype == DType::BF16,
                "gemm: B must be F32, F16 or BF16, got ", dtype_name(g.b_dtype));
  if (g.m == 0 || g.n == 0) return;
  LUMINAL_CHECK(g.c != nullptr, "gemm: C is null");
  LUMINAL_CHECK(g.m == 1 || g.c_row_stride >= g.n, "gemm: C rows overlap (row stride ", g.c_row_stride, " < n ", g.n,
                ")");
  LUMINAL_CHECK(g.batch == 1 || g.c_batch_stride >= (g.m - 1) * g.c_row_stride + g.n,
                "gemm: C batches overlap (batch stride ", g.c_batch_stride, ")");
  if (g.k > 0) LUMINAL_CHECK(g.a != nullptr && g.b != nullptr, "gemm: A or B is null");
}

void gemm(const GemmArgs& g) {
  validate(g);
  if (g.m == 0 || g.n == 0) return;
  const detail::Kernels& kern = detail::active_kernels();
  ThreadPool& pool = ThreadPool::global();
  if (g.k == 0) {  // an empty sum: C = act(0 + bias)
    for (int64_t b = 0; b < g.batch; ++b) {
      for (int64_t i = 0; i < g.m; ++i) {
        float* row = g.c + b * g.c_batch_stride + i * g.c_row_stride;
        std::fill(row, row + g.n, 0.f);
        kern.epilogue(row, g.n, g.bias, g.epilogue);
      }
    }
    return;
  }
  if (takes_tiny(g)) {
    gemm_tiny(kern, g, pool);
  } else if (takes_gemv(g)) {
    gemm_gemv(kern, g, pool);
  } else {
    gemm_blocked(kern, g, pool);
  }
}

void gemm_group(std::span<const GemmArgs> products) {
  if (products.empty()) return;
  for (const GemmArgs& g : products) validate(g);
  const GemmArgs& g0 = products[0];
  const detail::Kernels& kern = detail::active_kernels();
  // One region where every product shares A (the same operand, read the same way) and
  // takes the blocked path over its own packed B; else each runs alone.
  std::vector<PrepackedProduct> group;
  for (const GemmArgs& g : products) {
    const bool same_a = g.a == g0.a && g.m == g0.m && g.k == g0.k && g.batch == g0.batch &&
                        g.a_row_stride == g0.a_row_stride && g.a_col_stride == g0.a_col_stride &&
                        g.a_batch_stride == g0.a_batch_stride;
    const PackedB* pre = usable_packed_b(kern, g);
    if (!same_a || pre == nullptr || g.n == 0 || g.k == 0 || g.m == 0 || !gemm_packs_b(g) || !prepacked_fits(kern, g))
      break;
    group.push_back({&g, pre});
  }
  if (group.size() == products.size()) {
    gemm_prepacked(kern, group, ThreadPool::global());
    return;
  }
  for (const GemmArgs& g : products) gemm(g);
}

bool gemm_packs_b(const GemmArgs& g) {
  return g.m > 0 && g.n > 0 && g.k > 0 && !takes_tiny(g) && !takes_gemv(g) && b_shared_by_batches(g);
}

int64_t PackedB::bytes() const { return round_up(n, 32) * k * static_cast<int64_t>(dtype_bytes(dtype)); }

namespace {

// The dtype pack_b keeps B's panels in: B's own where the table widens half panels.
DType packed_dtype(const detail::Kernels& kern, const GemmArgs& g) {
  return g.b_dtype != DType::F32 && kern.micro_half != nullptr ? g.b_dtype : DType::F32;
}

// Work item x of B's block (depth [pc, pc + kc), columns [jc, jc + nc)) as half panels
// at dst: the 16-bit values copied as they are, each step's nr in half_panel_position
// order, zero past n. Items as b_packing chooses them, so reads follow B's contiguous dim.
void pack_b_half_item(const detail::Kernels& kern, const GemmArgs& g, const BPacking& bp, int64_t pc, int64_t kc,
                      int64_t jc, int64_t nc, int64_t x, uint16_t* dst) {
  const int64_t nr = kern.nr;
  auto value = [&](int64_t p, int64_t j) {  // B[pc + p, jc + j], or 0 past n
    return j < nc ? *static_cast<const uint16_t*>(b_element(g, 0, pc + p, jc + j)) : uint16_t{0};
  };
  if (bp.by_rows) {
    for (int64_t p = x * kPackRowsPerItem; p < std::min(kc, (x + 1) * kPackRowsPerItem); ++p) {
      for (int64_t q = 0; q * nr < nc; ++q) {
        uint16_t* out = dst + q * kc * nr + p * nr;
        for (int64_t j = 0; j < nr; ++j) out[half_panel_position(kern, g.b_dtype, j)] = value(p, q * nr + j);
      }
    }
    return;
  }
  uint16_t* out = dst + x * kc * nr;  // panel x: columns from x * nr
  for (int64_t j = 0; j < nr; ++j) {
    const int64_t pos = half_panel_position(kern, g.b_dtype, j);
    for (int64_t p = 0; p < kc; ++p) out[p * nr + pos] = value(p, x * nr + j);
  }
}

}  // namespace

int64_t packed_b_bytes(const GemmArgs& g) {
  return round_up(g.n, 32) * g.k * static_cast<int64_t>(dtype_bytes(packed_dtype(detail::active_kernels(), g)));
}

PackedB pack_b(const GemmArgs& g) {
  validate(g);
  LUMINAL_CHECK(b_shared_by_batches(g), "pack_b: B differs between batches (batch stride ", g.b_batch_stride, ")");
  const detail::Kernels& kern = detail::active_kernels();
  PackedB packed;
  packed.k = g.k;
  packed.n = g.n;
  packed.isa = kern.isa;
  packed.dtype = packed_dtype(kern, g);
  const int64_t esize = static_cast<int64_t>(dtype_bytes(packed.dtype));
  const size_t bytes = static_cast<size_t>(round_up(g.n, kern.nr) * g.k * esize);
  auto* panels = static_cast<std::byte*>(std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64));
  LUMINAL_CHECK(panels != nullptr, "pack_b: cannot allocate ", bytes, " bytes");
  packed.panels = std::shared_ptr<std::byte[]>(panels, [](std::byte* f) { std::free(f); });
  ThreadPool& pool = ThreadPool::global();
  for (int64_t jc = 0; jc < g.n; jc += kNc) {
    const int64_t nc = std::min(kNc, g.n - jc);
    for (int64_t pc = 0; pc < g.k; pc += kern.kc) {
      const int64_t kc = std::min<int64_t>(kern.kc, g.k - pc);
      std::byte* dst = panels + packed_block_offset(g, kern.nr, jc, pc) * esize;
      const BPacking bp = b_packing(g, kc, ceil_div(nc, kern.nr));
      pool.parallel_for(0, bp.items_per_copy, 4, [&](int64_t begin, int64_t end) {
        for (int64_t x = begin; x < end; ++x) {
          if (packed.dtype != DType::F32) {
            pack_b_half_item(kern, g, bp, pc, kc, jc, nc, x, reinterpret_cast<uint16_t*>(dst));
          } else {
            pack_b_item(kern, g, bp, 0, pc, kc, jc, nc, x, reinterpret_cast<float*>(dst));
          }
        }
      });
    }
  }
  return packed;
}

}  // namespace luminal::cpu
