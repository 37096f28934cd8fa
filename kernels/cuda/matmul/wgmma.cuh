// wgmma, Hopper's warpgroup matrix multiply-accumulate, as inline PTX, with what feeds it in a
// warp-specialised kernel (mbarriers, the copy engine's bulk copies, setmaxnreg): what matmul
// version 13 (and 15, its bf16 form) and conv2d versions 10 to 12 share. Each wrapper issues one
// asynchronous product of a warpgroup (four warps, 128 threads): d (64 x N f32 accumulators, N / 2
// a thread) += A (64 x K) * B (K x N), B always read from shared memory through a matrix
// descriptor, A from shared memory too or from registers. wgmma_fence before the first product
// whose registers were written otherwise, wgmma_commit to close a group of products,
// wgmma_wait<N> until at most N groups are in flight, and fence_accumulators before the
// accumulators are read.
//
// The accumulators' layout: N / 8 mma.sync 16 x 8 tiles side by side, warp w of the warpgroup
// holding rows 16w .. 16w + 15 (thread lane: rows lane / 4 and + 8, columns 2 (lane % 4) and + 1
// of each tile, d[4j + 2h + e] for tile j, row half h, column e). A from registers: for TF32 (k 8)
// four registers in mma.sync m16n8k8's A fragment layout per warp, rows 16w .. 16w + 15
// (tensor_core.cuh's mma_16x8x8 names the four registers' places).
//
// These instructions exist only in the arch-specific target sm_90a: KILN_WGMMA is defined in the
// device pass that compiles for it, and a file that includes this builds its kernels to a trap in
// the others (kernels/cuda/CMakeLists.txt says which files get sm_90a).
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only: nothing links libcuda)

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KILN_WGMMA 1
#endif

namespace kiln::cuda::matmul {

// A tensor map, what a TMA copy reads its tensor through: `rank` extents (innermost first), the
// byte strides of all but the innermost (multiples of 16, as must be the data's address), the box
// a copy brings (its innermost extent a multiple of 16 bytes, each at most 256), and the swizzle
// the box lands in; the copies fill what lies outside the tensor with zeros. `who` names the
// kernel in the error if the driver refuses the map.
CUtensorMap tiled_map(CUtensorMapDataType type, int rank, const void* data, const uint64_t* dims,
                      const uint64_t* strides, const uint32_t* box, CUtensorMapSwizzle swizzle, const char* who);

#ifdef KILN_WGMMA
__device__ inline uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ inline void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Makes this thread's writes to shared memory (stores, cp.async) visible to the tensor cores'
// reads of it (wgmma operands come through the async proxy): after the writes, before the
// barrier that lets a warpgroup issue the products.
__device__ inline void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Tells the compiler that the accumulators may change under it (the tensor cores write them
// asynchronously), so that no read of them moves across a wait.
template <int R>
__device__ inline void fence_accumulators(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// ---- mbarriers: an arrival count and a byte count (tx) per phase; waiters name the phase parity ----
__device__ inline void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}
// The producer's arrival, announcing `bytes` still to come from the copy engine.
__device__ inline void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}
// `bytes` more to come from the copy engine in the current phase, without an arrival.
__device__ inline void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}
__device__ inline void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
__device__ inline void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
}
// A walk round a ring of stages [base, end), each with its mbarriers: the stage in use and its lap
// (the times round so far), whose parity a wait on the stage takes (a wait on the stage's release
// from the lap before takes lap - 1's). `next` steps it without a division: a 32-bit division by a
// count known only at run time is a dozen instructions or more, and a ring's sides step every stage.
struct RingWalk {
  int stage = 0, lap = 0;
  __device__ void next(int end, int base = 0) {
    if (++stage == end) stage = base, ++lap;
  }
};
// An arrival on `bar` once every cp.async this thread has issued has landed (noinc: the barrier's
// arrival count includes it).
__device__ inline void cp_async_arrive(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// The copy engine's bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) from
// global to shared memory, its bytes counted on `bar` as they land.
__device__ inline void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

// The copy engine's copy of the box at (x0, y0, z) of a 3-D tensor map (tiled_map) into shared
// memory (16-byte aligned; 1024 under the 128-byte swizzle), its bytes counted on `bar` as they land.
__device__ inline void tma_load(void* dst, const CUtensorMap* map, int x0, int y0, int z, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x0), "r"(y0), "r"(z), "r"(smem_u32(bar))
      : "memory");
}

// The descriptor of a K-major tile of rows of 128 bytes under the 128-byte swizzle (what TMA's
// CU_TENSOR_MAP_SWIZZLE_128B writes: the 16-byte chunk c of row r at chunk c ^ (r % 8)): start
// address >> 4 (bits 0-13), leading byte offset (unused with this swizzle: 1), stride byte offset
// 1024 >> 4 between groups of 8 rows (bits 32-45), swizzle mode 1 = 128 bytes (bits 62-63). The
// tile starts on 1024 bytes, the swizzle's period; adding 2 moves the start by 32 bytes: the next
// 8 floats of k.
__device__ inline uint64_t swizzled_descriptor(uint32_t addr) {
  return uint64_t{(addr & 0x3FFFF) >> 4} | uint64_t{1} << 16 | uint64_t{1024 >> 4} << 32 | uint64_t{1} << 62;
}

// The descriptor of a K-major operand without swizzle (bits 62-63 zero) at shared address addr:
// core matrices of 8 rows by 16 bytes of k, the next 16 bytes of k `leading` bytes on (the
// leading byte offset), the next 8 rows `stride` bytes on (the stride byte offset).
__device__ inline uint64_t interleaved_descriptor(uint32_t addr, uint32_t leading, uint32_t stride) {
  return uint64_t{(addr & 0x3FFFF) >> 4} | uint64_t{leading >> 4} << 16 | uint64_t{stride >> 4} << 32;
}
// A k-step's operand packed as conv2d's weights are: [N / 8][2][8][4] floats (core matrices of 8
// rows by 4 values of k, the k-step's two side by side).
__device__ inline uint64_t packed_descriptor(uint32_t addr) { return interleaved_descriptor(addr, 128, 256); }

// Moves registers between warpgroups of a warp-specialised block: the warpgroups that need few
// give them up (dec) and those that hold accumulators take them (inc), to at most N a thread.
template <int N>
__device__ inline void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ inline void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

#define KILN_D8(i)                                                                                       \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
// A 64 x N product's accumulators, N / 2 per thread: as asm operands, and as the list of their names.
#define KILN_ACC32 KILN_D8(0), KILN_D8(8)
#define KILN_ACC64 KILN_ACC32, KILN_D8(16), KILN_D8(24)
#define KILN_ACC128 KILN_ACC64, KILN_D8(32), KILN_D8(40), KILN_D8(48), KILN_D8(56)
#define KILN_ACC256 \
  KILN_ACC128, KILN_D8(64), KILN_D8(72), KILN_D8(80), KILN_D8(88), KILN_D8(96), KILN_D8(104), KILN_D8(112), KILN_D8(120)
#define KILN_REGS32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define KILN_REGS64 \
  KILN_REGS32 ", " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KILN_REGS128 \
  KILN_REGS64 ", " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define KILN_REGS256 \
  KILN_REGS128 ", " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
// d += A * B for a 64 x N x 8 product, N = 256, 128, 64 or 32 (from d's size): A (64 x 8) and B
// (N x 8) K-major in shared memory, d the warpgroup's 64 x N accumulators (N / 2 per thread, laid
// out as N / 8 mma.sync 16 x 8 tiles side by side, warp w holding rows 16w .. 16w + 15:
// store_mma_tiles' layout).
__device__ inline void wgmma_tf32(float (&d)[128], uint64_t a, uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {" KILN_REGS256 "}, %128, %129, 1, 1, 1;\n"
               : KILN_ACC256
               : "l"(a), "l"(b));
}
__device__ inline void wgmma_tf32(float (&d)[64], uint64_t a, uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {" KILN_REGS128 "}, %64, %65, 1, 1, 1;\n"
               : KILN_ACC128
               : "l"(a), "l"(b));
}
__device__ inline void wgmma_tf32(float (&d)[32], uint64_t a, uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {" KILN_REGS64 "}, %32, %33, 1, 1, 1;\n"
               : KILN_ACC64
               : "l"(a), "l"(b));
}
__device__ inline void wgmma_tf32(float (&d)[16], uint64_t a, uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 {" KILN_REGS32 "}, %16, %17, 1, 1, 1;\n"
               : KILN_ACC32
               : "l"(a), "l"(b));
}
// The same with A (64 x 8) from registers, in mma.sync's m16n8k8 fragment layout per warp (warp w
// holding rows 16w .. 16w + 15; tensor_core.cuh's mma_16x8x8 names the four registers' places).
__device__ inline void wgmma_tf32(float (&d)[128], const uint32_t (&a)[4], uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 {" KILN_REGS256
               "}, {%128, %129, %130, %131}, %132, 1, 1, 1;\n"
               : KILN_ACC256
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
__device__ inline void wgmma_tf32(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {" KILN_REGS128
               "}, {%64, %65, %66, %67}, %68, 1, 1, 1;\n"
               : KILN_ACC128
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
__device__ inline void wgmma_tf32(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {" KILN_REGS64
               "}, {%32, %33, %34, %35}, %36, 1, 1, 1;\n"
               : KILN_ACC64
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
__device__ inline void wgmma_tf32(float (&d)[16], const uint32_t (&a)[4], uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 {" KILN_REGS32 "}, {%16, %17, %18, %19}, %20, 1, 1, 1;\n"
               : KILN_ACC32
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
// bf16: d += A * B for a 64 x N x 16 product from shared memory, each operand K-major or, when its
// flag (TA, TB) is 1, MN-major (wgmma's transpose, which 16-bit types have).
template <int TA, int TB>
__device__ inline void wgmma_bf16(float (&d)[128], uint64_t a, uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" KILN_REGS256
               "}, %128, %129, 1, 1, 1, %130, %131;\n"
               : KILN_ACC256
               : "l"(a), "l"(b), "n"(TA), "n"(TB));
}
template <int TA, int TB>
__device__ inline void wgmma_bf16(float (&d)[64], uint64_t a, uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" KILN_REGS128 "}, %64, %65, 1, 1, 1, %66, %67;\n"
               : KILN_ACC128
               : "l"(a), "l"(b), "n"(TA), "n"(TB));
}
template <int TA, int TB>
__device__ inline void wgmma_bf16(float (&d)[32], uint64_t a, uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" KILN_REGS64 "}, %32, %33, 1, 1, 1, %34, %35;\n"
               : KILN_ACC64
               : "l"(a), "l"(b), "n"(TA), "n"(TB));
}
template <int TA, int TB>
__device__ inline void wgmma_bf16(float (&d)[16], uint64_t a, uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" KILN_REGS32 "}, %16, %17, 1, 1, 1, %18, %19;\n"
               : KILN_ACC32
               : "l"(a), "l"(b), "n"(TA), "n"(TB));
}
// The same with A (64 x 16) from registers, in mma.sync's m16n8k16 fragment layout per warp (two
// bf16 of neighbouring k in each register, the lower k in the low half).
__device__ inline void wgmma_bf16(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" KILN_REGS128
               "}, {%64, %65, %66, %67}, %68, 1, 1, 1, 0;\n"
               : KILN_ACC128
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
__device__ inline void wgmma_bf16(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" KILN_REGS64
               "}, {%32, %33, %34, %35}, %36, 1, 1, 1, 0;\n"
               : KILN_ACC64
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
__device__ inline void wgmma_bf16(float (&d)[16], const uint32_t (&a)[4], uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" KILN_REGS32
               "}, {%16, %17, %18, %19}, %20, 1, 1, 1, 0;\n"
               : KILN_ACC32
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
#undef KILN_REGS256
#undef KILN_REGS128
#undef KILN_REGS64
#undef KILN_REGS32
#undef KILN_ACC256
#undef KILN_ACC128
#undef KILN_ACC64
#undef KILN_ACC32
#undef KILN_D8
#endif  // KILN_WGMMA

}  // namespace kiln::cuda::matmul
