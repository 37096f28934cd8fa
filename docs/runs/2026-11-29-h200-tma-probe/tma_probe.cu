// probe: which TMA box shapes fault
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
__device__ inline uint32_t su(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
__global__ void k(const __grid_constant__ CUtensorMap m, int x0, int y0, int z0, int bytes, float* out) {
  extern __shared__ __align__(1024) uint8_t sm[];
  __shared__ uint64_t bar;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(su(&bar)));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(su(&bar)), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
        ::"r"(su(sm)), "l"(reinterpret_cast<uint64_t>(&m)), "r"(x0), "r"(y0), "r"(z0), "r"(su(&bar)) : "memory");
    asm volatile("{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n@!p bra W;\n}\n" ::"r"(su(&bar)) : "memory");
    out[0] = reinterpret_cast<float*>(sm)[1];
  }
}
int main(int argc, char** argv) {
  int v = atoi(argv[1]);
  void* f; cudaDriverEntryPointQueryResult q;
  cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q);
  auto enc = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  float* x; cudaMalloc(&x, 64ull << 20); float* out; cudaMalloc(&out, 4);
  cuuint64_t dims[3] = {676, 2048, 1}, str[2] = {2704, 2704ull * 2048};
  cuuint32_t box[3] = {156, 22, 1}, unit[3] = {1, 1, 1};
  CUtensorMapSwizzle sw = CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMapL2promotion l2 = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  int x0 = 26, y0 = 3, z0 = 0;
  if (argc > 2) { x0 = atoi(argv[2]); y0 = atoi(argv[3]); }
  switch (v) {
    case 0: break;                                   // as the kernel
    case 1: box[0] = 160; break;                     // a power-of-two-ish inner box (bytes 640)
    case 2: box[0] = 128; break;
    case 3: box[1] = 16; break;
    case 4: l2 = CU_TENSOR_MAP_L2_PROMOTION_NONE; break;
    case 5: x0 = 0; y0 = 0; break;
    case 6: box[0] = 64; break;
    case 7: box[0] = 32; sw = CU_TENSOR_MAP_SWIZZLE_128B; break;  // like the gy map
    case 8: box[0] = 156; box[1] = 1; break;
    case 9: box[0] = 256; break;
    case 10: box[0] = 152; break;
    case 11: box[0] = 96; break;
  }
  CUtensorMap m;
  CUresult r = enc(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, x, dims, str, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, sw, l2,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  int bytes = box[0] * box[1] * box[2] * 4;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 100000);
  k<<<1, 32, 100000>>>(m, x0, y0, z0, bytes, out);
  cudaError_t e = cudaDeviceSynchronize();
  printf("x0 %d y0 %d variant %d box {%u,%u,%u} encode %d -> %s\n", x0, y0, v, box[0], box[1], box[2], (int)r, cudaGetErrorString(e));
}
