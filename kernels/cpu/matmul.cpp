// matmul on the CPU: C[b] = op(A[b]) * op(B[b]), C contiguous [batch, m, n], op(A) m x k,
// op(B) k x n (MatmulParams in core/backend.h), for f32 and f64; plus gemm() (kernels/cpu/gemm.h),
// the one routine both matmul and conv2d call.
//
// How a fast GEMM is built (the Goto/BLIS design):
//   A multiply-add needs two operands from memory, and this CPU can do 32 f32 flops per cycle per
//   core but load far fewer bytes per cycle from L2, let alone DRAM. The whole design is about
//   reusing each loaded value many times from registers and L1.
//   1. Micro-kernel: a 6 x 16 tile of C lives in 12 AVX2 registers (6 rows x 2 vectors of 8
//      floats) for the whole k loop. Each step loads 16 values of B (2 vectors), broadcasts 6
//      values of A, and does 12 FMAs: 96 multiply-adds for 22 loaded floats. 12 independent
//      accumulators also cover the FMA latency (4 cycles x 2 FMA pipes needs >= 8).
//   2. Packing: the kernel wants, per k step, 6 consecutive values of A and 16 of B. Before the
//      kernel runs, a block of op(A) and a panel of op(B) are copied into contiguous buffers in
//      exactly that order ("slivers"). Transposition, leading dimensions and batch strides are all
//      absorbed by packing, so one kernel serves every layout; partial tiles are zero-padded, so
//      edge tiles run the same kernel and only the copy back to C is special.
//   3. Cache blocking, loops from outside in (sizes for f32, AMD EPYC Zen 3: 32 KiB L1d and
//      512 KiB L2 per core, 32 MiB shared L3):
//        jc: n in steps of NC = 4096  -> a KC x NC panel of B (4 MiB) is packed once, lives in L3
//        pc: k in steps of KC = 256   -> one rank-KC update of C per step
//        ic: m in steps of MC = 144   -> a MC x KC block of A (144 KiB) is packed, lives in L2
//        jr: NR = 16 columns          -> a KC x NR sliver of B (16 KiB, half of L1) stays in L1
//        ir: MR = 6 rows              -> the micro-kernel streams a 6 x KC sliver of A from L2
//      KC sets how long a C tile stays in registers (C is loaded and stored once per KC steps) and
//      is capped by the B sliver fitting in L1 beside the streaming A sliver; MC by the A block
//      fitting in L2 with room for B slivers passing through.
//   4. Threads: the packed B panel is shared; each thread takes a range of rows (or, for short
//      and wide products, of columns) of C and packs its own A blocks into its own L2. Packing B
//      is itself spread over the threads.
//   f64 runs the same loops with a 6 x 8 tile (12 registers of 4 doubles) and MC = 72.
//
// The AVX2+FMA kernels are compiled for that ISA alone (target attribute) and chosen at run time,
// so the library still runs on any x86-64 through the portable kernel; KILN_CPU_NO_AVX2=1 forces
// the portable kernel (for testing it on AVX2 machines). Products smaller than kSmallWork
// multiply-adds skip packing for a direct loop. f32 accumulates in float, as BLAS does: over k
// terms the error grows like sqrt(k) * 6e-8, well inside what float training tolerates.
//
// Today's figures, f32 1024^3 on 2 threads: kiln 190-192 GFLOP/s [fig cpu.matmul.gflops] for A.B, A^T.B and
// A.B^T, PyTorch on OpenBLAS 192-193 GFLOP/s [fig cpu.matmul.torch-gflops] on the same machine (cpu-bench
// and scripts/bench_cpu_torch.py, the recorded run docs/runs/2026-11-26-cpu; docs/benchmarks.md). One
// thread against the peak of a loop of FMAs: NOTES.md.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

#include "kiln/core/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cpu/parallel.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KILN_HAVE_X86 1
#else
#define KILN_HAVE_X86 0
#endif

namespace kiln::cpu {
namespace {

// Below this many multiply-adds a direct loop beats packing. The packed path wins from small sizes
// on: 8x8x8 already, and by far at 32x32x32 (measurements: NOTES.md).
constexpr int64_t kSmallWork = 512;
// From this many multiply-adds on, the pool helps: 48x48x48 already runs faster on 2 threads than
// on one (measurements: NOTES.md). Below it, one thread.
constexpr int64_t kParallelWork = int64_t{1} << 16;

template <class T> struct Blocking;
template <> struct Blocking<float> {
  static constexpr int64_t MR = 6, NR = 16;  // 12 ymm accumulators of 8 floats
  static constexpr int64_t KC = 256;         // B sliver KC x NR x 4 B = 16 KiB, half of L1d
  static constexpr int64_t MC = 144;         // A block MC x KC x 4 B = 144 KiB of 512 KiB L2
  static constexpr int64_t NC = 4096;        // B panel KC x NC x 4 B = 4 MiB of 32 MiB L3
};
template <> struct Blocking<double> {
  static constexpr int64_t MR = 6, NR = 8;  // 12 ymm accumulators of 4 doubles
  static constexpr int64_t KC = 256;        // B sliver 256 x 8 x 8 B = 16 KiB
  static constexpr int64_t MC = 72;         // A block 72 x 256 x 8 B = 144 KiB
  static constexpr int64_t NC = 2048;       // B panel 256 x 2048 x 8 B = 4 MiB
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// A growable, 64-byte aligned scratch buffer; one per thread and role, kept between calls so
// the hot path never allocates (a fresh multi-MiB malloc would also page-fault on every call).
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { release(); }

  template <class T> T* get(int64_t count) {
    size_t bytes = static_cast<size_t>(count) * sizeof(T);
    if (bytes > capacity_) {
      release();
      data_ = ::operator new(bytes, std::align_val_t{64});
      capacity_ = bytes;
    }
    return static_cast<T*>(data_);
  }

 private:
  void release() {
    if (data_) ::operator delete(data_, std::align_val_t{64});
    data_ = nullptr;
    capacity_ = 0;
  }
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

thread_local Scratch t_packed_a;  // this thread's MC x KC block of A
thread_local Scratch t_packed_b;  // the KC x NC panel of B, owned by the thread that called gemm

// ---- packing A -----------------------------------------------------------------------------

// Packs rows [i0, i0 + mc) x columns [p0, p0 + kc) of op(A) as MR-row slivers: sliver s holds, for
// each p in turn, the MR values op(A)[i0 + s*MR + r][p0 + p], r = 0..MR-1. Rows past the block
// are zeros. op(A)[i][p] is a[p*lda + i] when trans_a, else a[i*lda + p].
template <class T>
void pack_a(bool trans_a, const T* a, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
            T* dst) {
  constexpr int64_t MR = Blocking<T>::MR;
  for (int64_t s = 0; s < mc; s += MR, dst += MR * kc) {
    int64_t rows = std::min(MR, mc - s);
    if (trans_a) {
      // The MR values of one p are adjacent in memory: copy them in one run per p.
      for (int64_t p = 0; p < kc; ++p) {
        const T* src = a + (p0 + p) * lda + i0 + s;
        for (int64_t r = 0; r < MR; ++r) dst[p * MR + r] = r < rows ? src[r] : T(0);
      }
    } else {
      // Each row is contiguous in p: read MR rows side by side, write with stride MR (the
      // destination, MR x kc values, stays in L1).
      for (int64_t r = 0; r < MR; ++r) {
        if (r < rows) {
          const T* src = a + (i0 + s + r) * lda + p0;
          for (int64_t p = 0; p < kc; ++p) dst[p * MR + r] = src[p];
        } else {
          for (int64_t p = 0; p < kc; ++p) dst[p * MR + r] = T(0);
        }
      }
    }
  }
}

// ---- micro-kernels -------------------------------------------------------------------------
// Each computes the full MR x NR tile  acc = sum_p a[p*MR + i] * b[p*NR + j]  from packed slivers
// and writes C = acc (overwrite) or C += acc. C's rows are ldc apart.

template <class T>
using MicroKernel = void (*)(int64_t kc, const T* a, const T* b, T* c, int64_t ldc, bool overwrite);

// Portable version: plain C++ any compiler can vectorise for the baseline ISA (SSE2 on x86-64).
template <class T>
void micro_kernel_portable(int64_t kc, const T* a, const T* b, T* c, int64_t ldc, bool overwrite) {
  constexpr int64_t MR = Blocking<T>::MR, NR = Blocking<T>::NR;
  T acc[MR][NR] = {};
  for (int64_t p = 0; p < kc; ++p, a += MR, b += NR)
    for (int64_t i = 0; i < MR; ++i)
      for (int64_t j = 0; j < NR; ++j) acc[i][j] += a[i] * b[j];
  for (int64_t i = 0; i < MR; ++i)
    for (int64_t j = 0; j < NR; ++j) c[i * ldc + j] = overwrite ? acc[i][j] : c[i * ldc + j] + acc[i][j];
}

// Packs one full sliver of a transposed B: NR columns of op(B) that are NR rows of b, ldb apart,
// each contiguous in p. dst[p*NR + c] = src[c*ldb + p] for p < kc: a transpose, which scalar code
// does one element at a time.
template <class T>
void pack_b_sliver_transposed_portable(const T* src, int64_t ldb, int64_t kc, T* dst) {
  constexpr int64_t NR = Blocking<T>::NR;
  for (int64_t c = 0; c < NR; ++c)
    for (int64_t p = 0; p < kc; ++p) dst[p * NR + c] = src[c * ldb + p];
}

#if KILN_HAVE_X86
// One AVX2 register of T and the operations the micro-kernel needs: 8 floats or 4 doubles.
template <class T> struct Avx2;
template <> struct Avx2<float> {
  using Reg = __m256;
  static constexpr int64_t kLanes = 8;
  __attribute__((target("avx2,fma"))) static Reg zero() { return _mm256_setzero_ps(); }
  __attribute__((target("avx2,fma"))) static Reg load(const float* p) { return _mm256_load_ps(p); }
  __attribute__((target("avx2,fma"))) static Reg loadu(const float* p) { return _mm256_loadu_ps(p); }
  __attribute__((target("avx2,fma"))) static Reg broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  __attribute__((target("avx2,fma"))) static Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  __attribute__((target("avx2,fma"))) static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  __attribute__((target("avx2,fma"))) static void storeu(float* p, Reg v) { _mm256_storeu_ps(p, v); }
};
template <> struct Avx2<double> {
  using Reg = __m256d;
  static constexpr int64_t kLanes = 4;
  __attribute__((target("avx2,fma"))) static Reg zero() { return _mm256_setzero_pd(); }
  __attribute__((target("avx2,fma"))) static Reg load(const double* p) { return _mm256_load_pd(p); }
  __attribute__((target("avx2,fma"))) static Reg loadu(const double* p) { return _mm256_loadu_pd(p); }
  __attribute__((target("avx2,fma"))) static Reg broadcast(const double* p) { return _mm256_broadcast_sd(p); }
  __attribute__((target("avx2,fma"))) static Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_pd(a, b, c); }
  __attribute__((target("avx2,fma"))) static Reg add(Reg a, Reg b) { return _mm256_add_pd(a, b); }
  __attribute__((target("avx2,fma"))) static void storeu(double* p, Reg v) { _mm256_storeu_pd(p, v); }
};

// 6 x 2 registers: 6 x 16 floats or 6 x 8 doubles; acc[i][h] holds C[i][h L .. h L + L - 1],
// L the lanes of a register.
template <class T>
__attribute__((target("avx2,fma"))) void micro_kernel_avx2(int64_t kc, const T* a, const T* b, T* c, int64_t ldc,
                                                            bool overwrite) {
  using V = Avx2<T>;
  constexpr int64_t L = V::kLanes;
  static_assert(Blocking<T>::MR == 6 && Blocking<T>::NR == 2 * L);
  typename V::Reg acc[6][2];
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) acc[i][0] = acc[i][1] = V::zero();
  for (int64_t p = 0; p < kc; ++p, a += 6, b += 2 * L) {
    // Packed B is 64-byte aligned and each step is 64 bytes: aligned loads.
    const typename V::Reg b0 = V::load(b), b1 = V::load(b + L);
#pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) {
      const typename V::Reg ai = V::broadcast(a + i);
      acc[i][0] = V::fmadd(ai, b0, acc[i][0]);
      acc[i][1] = V::fmadd(ai, b1, acc[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) {
    T* row = c + i * ldc;
    if (!overwrite) {
      acc[i][0] = V::add(acc[i][0], V::loadu(row));
      acc[i][1] = V::add(acc[i][1], V::loadu(row + L));
    }
    V::storeu(row, acc[i][0]);
    V::storeu(row + L, acc[i][1]);
  }
}
// The transposed B sliver for f32, 8 x 8 blocks at a time: load 8 rows of 8 values, transpose
// them in registers (3 rounds of shuffles), store 8 rows of 8. Several times faster than the
// scalar copy (measurement: NOTES.md), which matters for A.B^T and conv2d's weight gradient, where
// this packing is a quarter of the work otherwise.
__attribute__((target("avx2,fma"))) void pack_b_sliver_transposed_f32_avx2(const float* src,
                                                                            int64_t ldb, int64_t kc,
                                                                            float* dst) {
  int64_t p = 0;
  for (; p + 8 <= kc; p += 8) {
    for (int64_t half = 0; half < 16; half += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + (half + i) * ldb + p);
      // Round 1: interleave pairs of rows; round 2: pairs of pairs; round 3: swap 128-bit halves.
      __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
      __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
      __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
      __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
      __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      // column p+i of the 8 rows, for i = 0..7
      __m256 col[8] = {_mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
                       _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
                       _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
                       _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) _mm256_store_ps(dst + (p + i) * 16 + half, col[i]);
    }
  }
  for (; p < kc; ++p)
    for (int64_t c = 0; c < 16; ++c) dst[p * 16 + c] = src[c * ldb + p];
}
#endif

bool cpu_has_avx2_fma() {
  static const bool yes = [] {
    if (const char* env = std::getenv("KILN_CPU_NO_AVX2"); env && *env && *env != '0') return false;
#if KILN_HAVE_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
  }();
  return yes;
}

// The routines that differ by ISA, chosen once per process.
template <class T>
using PackSliverTransposed = void (*)(const T* src, int64_t ldb, int64_t kc, T* dst);

template <class T> struct Kernels {
  MicroKernel<T> micro = micro_kernel_portable<T>;
  PackSliverTransposed<T> pack_b_transposed = pack_b_sliver_transposed_portable<T>;
};

template <class T> const Kernels<T>& kernels() {
  static const Kernels<T> chosen = [] {
    Kernels<T> k;
#if KILN_HAVE_X86
    if (cpu_has_avx2_fma()) {
      if constexpr (std::is_same_v<T, float>) {
        k.pack_b_transposed = pack_b_sliver_transposed_f32_avx2;
      }
      k.micro = micro_kernel_avx2<T>;
    }
#endif
    return k;
  }();
  return chosen;
}

// ---- packing B -----------------------------------------------------------------------------

// Packs slivers [s_begin, s_end) of the kc x nc block of op(B) at (p0, j0): sliver s holds, for
// each p in turn, the NR values op(B)[p0 + p][j0 + s*NR + c], c = 0..NR-1; columns past nc are
// zeros. op(B)[p][j] is b[j*ldb + p] when trans_b, else b[p*ldb + j].
template <class T>
void pack_b(const Kernels<T>& isa, bool trans_b, const T* b, int64_t ldb, int64_t p0, int64_t kc,
            int64_t j0, int64_t nc, int64_t s_begin, int64_t s_end, T* packed) {
  constexpr int64_t NR = Blocking<T>::NR;
  for (int64_t s = s_begin; s < s_end; ++s) {
    T* dst = packed + s * NR * kc;
    int64_t j = j0 + s * NR;
    int64_t cols = std::min(NR, nc - s * NR);
    if (!trans_b && cols == NR) {
      // The common case: NR contiguous values per p, a straight copy.
      for (int64_t p = 0; p < kc; ++p) std::memcpy(dst + p * NR, b + (p0 + p) * ldb + j, sizeof(T) * NR);
    } else if (!trans_b) {
      for (int64_t p = 0; p < kc; ++p)
        for (int64_t c = 0; c < NR; ++c) dst[p * NR + c] = c < cols ? b[(p0 + p) * ldb + j + c] : T(0);
    } else if (cols == NR) {
      // Column j of op(B) is row j of b, contiguous in p: a transpose.
      isa.pack_b_transposed(b + j * ldb + p0, ldb, kc, dst);
    } else {
      for (int64_t p = 0; p < kc; ++p)
        for (int64_t c = 0; c < NR; ++c) dst[p * NR + c] = c < cols ? b[(j + c) * ldb + p0 + p] : T(0);
    }
  }
}

// ---- the blocked product -------------------------------------------------------------------

// Runs the micro-kernel over an mc x [j_begin, j_end) region of C against a packed A block and
// the packed B panel. j_begin is a multiple of NR. Loop order: a B sliver (jr) stays in L1 while
// all A slivers of the block (ir) stream past it from L2.
template <class T>
void macro_kernel(MicroKernel<T> kernel, int64_t mc, int64_t j_begin, int64_t j_end, int64_t kc,
                  const T* packed_a, const T* packed_b, T* c, int64_t ldc, bool overwrite) {
  constexpr int64_t MR = Blocking<T>::MR, NR = Blocking<T>::NR;
  alignas(64) T edge[MR * NR];
  for (int64_t jr = j_begin; jr < j_end; jr += NR) {
    int64_t nr = std::min(NR, j_end - jr);
    const T* b_sliver = packed_b + jr * kc;
    for (int64_t ir = 0; ir < mc; ir += MR) {
      int64_t mr = std::min(MR, mc - ir);
      const T* a_sliver = packed_a + ir * kc;
      T* c_tile = c + ir * ldc + jr;
      if (mr == MR && nr == NR) {
        kernel(kc, a_sliver, b_sliver, c_tile, ldc, overwrite);
        continue;
      }
      // Edge tile: the kernel fills a full tile (the padding rows/columns are zeros) and only
      // the part inside C is copied back.
      kernel(kc, a_sliver, b_sliver, edge, NR, true);
      for (int64_t i = 0; i < mr; ++i)
        for (int64_t j = 0; j < nr; ++j)
          c_tile[i * ldc + j] = overwrite ? edge[i * NR + j] : c_tile[i * ldc + j] + edge[i * NR + j];
    }
  }
}

// How the threads split one B panel's product: a tm x tn grid over (row tiles, column slivers).
// Minimises the tiles per thread; splitting columns costs a little more (every thread in a row
// of the grid packs the same A blocks), hence the 3% [nofig] handicap.
void thread_grid(int threads, int64_t row_tiles, int64_t col_slivers, int& tm, int& tn) {
  double best = -1;
  for (int rows = 1; rows <= threads; ++rows) {
    if (threads % rows != 0) continue;
    int cols = threads / rows;
    double cost = static_cast<double>(ceil_div(row_tiles, rows) * ceil_div(col_slivers, cols)) *
                  (cols > 1 ? 1.03 : 1.0);
    if (best < 0 || cost <= best) {
      best = cost;
      tm = rows;
      tn = cols;
    }
  }
}

template <class T>
void gemm_blocked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a,
                  int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  using B = Blocking<T>;
  const Kernels<T>& isa = kernels<T>();
  const int threads = m * n * k >= kParallelWork ? num_threads() : 1;

  // Equal k blocks (k = 288 runs as 144 + 144, not 256 + 32): a short last block would pay the
  // C load/store of a full pass for little work.
  const int64_t kc_max = ceil_div(k, ceil_div(k, B::KC));
  const int64_t nc_max = std::min(B::NC, round_up(n, B::NR));
  T* packed_b = t_packed_b.get<T>(kc_max * nc_max);

  for (int64_t jc = 0; jc < n; jc += B::NC) {
    const int64_t nc = std::min(B::NC, n - jc);
    const int64_t slivers = ceil_div(nc, B::NR);
    const int64_t row_tiles = ceil_div(m, B::MR);
    int tm = 1, tn = 1;
    thread_grid(threads, row_tiles, slivers, tm, tn);

    for (int64_t pc = 0; pc < k; pc += kc_max) {
      const int64_t kc = std::min(kc_max, k - pc);
      // C is overwritten by the first rank-kc update unless the caller accumulates.
      const bool overwrite = !accumulate && pc == 0;

      parallel_for(slivers, threads > 1 ? 4 : slivers, [&](int64_t s0, int64_t s1) {
        pack_b(isa, trans_b, b, ldb, pc, kc, jc, nc, s0, s1, packed_b);
      });

      parallel_for(tm * tn, 1, [&](int64_t part_begin, int64_t part_end) {
        for (int64_t part = part_begin; part < part_end; ++part) {
          const int64_t ti = part / tn, tj = part % tn;
          const int64_t i_begin = std::min(m, ti * row_tiles / tm * B::MR);
          const int64_t i_end = std::min(m, (ti + 1) * row_tiles / tm * B::MR);
          const int64_t j_begin = tj * slivers / tn * B::NR;
          const int64_t j_end = std::min(nc, (tj + 1) * slivers / tn * B::NR);
          if (i_begin >= i_end || j_begin >= j_end) continue;
          // Equal MR-aligned row blocks of at most MC rows (512 rows: 4 x 128, not 3 x 144 + 80).
          const int64_t rows = i_end - i_begin;
          const int64_t mc_step = round_up(ceil_div(rows, ceil_div(rows, B::MC)), B::MR);
          T* packed_a = t_packed_a.get<T>(mc_step * kc);
          for (int64_t ic = i_begin; ic < i_end; ic += mc_step) {
            const int64_t mc = std::min(mc_step, i_end - ic);
            pack_a(trans_a, a, lda, ic, mc, pc, kc, packed_a);
            macro_kernel(isa.micro, mc, j_begin, j_end, kc, packed_a, packed_b, c + ic * ldc + jc, ldc,
                         overwrite);
          }
        }
      });
    }
  }
}

// Small products: a direct loop; packing would cost as much as the product.
template <class T>
void gemm_small(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a,
                int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  for (int64_t i = 0; i < m; ++i) {
    T* c_row = c + i * ldc;
    if (!accumulate) std::fill(c_row, c_row + n, T(0));
    for (int64_t p = 0; p < k; ++p) {
      const T a_ip = trans_a ? a[p * lda + i] : a[i * lda + p];
      if (trans_b) {
        for (int64_t j = 0; j < n; ++j) c_row[j] += a_ip * b[j * ldb + p];
      } else {
        const T* b_row = b + p * ldb;
        for (int64_t j = 0; j < n; ++j) c_row[j] += a_ip * b_row[j];
      }
    }
  }
}

template <class T>
void matmul_typed(const TensorRef& a, const TensorRef& b, const TensorRef& out, const MatmulParams& p,
                  const Epilogue& e) {
  const T* a_data = a.data<T>();
  const T* b_data = b.data<T>();
  const T* bias = e.bias.defined() ? e.bias.data<T>() : nullptr;
  T* c_data = out.data<T>();
  const int64_t work = p.m * p.n * p.k;
  auto one = [&](int64_t i) {
    T* c = c_data + i * p.m * p.n;
    gemm(p.trans_a, p.trans_b, p.m, p.n, p.k, a_data + i * p.batch_stride_a, p.lda,
         b_data + i * p.batch_stride_b, p.ldb, c, p.n, false);
    // the epilogue while the product is still in cache: the bias along each row, then relu
    if (bias || e.activation != Activation::none)
      for (int64_t r = 0; r < p.m; ++r)
        for (int64_t j = 0; j < p.n; ++j) c[r * p.n + j] = apply_epilogue(c[r * p.n + j], bias, j, e);
  };
  if (p.batch == 1 || work >= kParallelWork) {
    // Each product is worth the whole pool on its own.
    for (int64_t i = 0; i < p.batch; ++i) one(i);
    return;
  }
  // Many small products: one per thread at a time (each gemm then runs single-threaded).
  const int64_t grain = std::max<int64_t>(1, kParallelWork / std::max<int64_t>(work, 1));
  parallel_for(p.batch, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) one(i);
  });
}

}  // namespace

template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
          const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    // An empty sum: C = 0, or C unchanged when accumulating.
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
    return;
  }
  if (m * n * k < kSmallWork)
    gemm_small(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
  else
    gemm_blocked(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                          const float*, int64_t, float*, int64_t, bool);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                           const double*, int64_t, double*, int64_t, bool);

void CpuBackend::matmul(const TensorRef& a, const TensorRef& b, const TensorRef& out, const MatmulParams& p,
                        const Epilogue& e) {
  KILN_CHECK(a.dtype == out.dtype && b.dtype == out.dtype, DTypeError,
             "cpu backend: matmul needs one dtype, got ", a.dtype, ", ", b.dtype, " -> ", out.dtype);
  KILN_CHECK(!e.bias.defined() || (e.bias.dtype == out.dtype && e.bias.numel() == p.n), ShapeError,
             "cpu backend: matmul's bias must be [", p.n, "] ", out.dtype, ", got ", e.bias.shape, " ", e.bias.dtype);
  switch (out.dtype) {
    case DType::f32: return matmul_typed<float>(a, b, out, p, e);
    case DType::f64: return matmul_typed<double>(a, b, out, p, e);
    default: KILN_FAIL(DTypeError, "cpu backend: matmul does not support dtype ", out.dtype);
  }
}

}  // namespace kiln::cpu
