// matmul of the Vulkan backend (shaders/matmul.comp): C[b] = epilogue(op(A[b]) op(B[b])).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/precision.h"
#include "kiln/kernels/vulkan/vulkan_backend.h"

namespace kiln::vulkan {

namespace {

struct Params {  // matmul.comp's
  int32_t batch = 0, m = 0, n = 0, k = 0;
  int32_t lda = 0, ldb = 0, batch_stride_a = 0, batch_stride_b = 0;
  int32_t a_offset = 0, b_offset = 0, out_offset = 0, bias_offset = 0;
  int32_t trans_a = 0, trans_b = 0, has_bias = 0, relu = 0;
  int32_t splits = 1, k_chunk = 0;
};

struct ReduceParams {  // matmul.comp's REDUCE
  int32_t total = 0, n = 0, splits = 0, out_offset = 0, bias_offset = 0, has_bias = 0, relu = 0;
};

}  // namespace

void VulkanBackend::matmul(const TensorRef& a, const TensorRef& b, const TensorRef& out, const MatmulParams& mp,
                           const Epilogue& e) {
  for (const TensorRef* t : {&a, &b, &out})
    KILN_CHECK(t->dtype == DType::f32, DTypeError, "vulkan matmul: ", t->dtype,
               " is not supported by the Vulkan backend yet (f32 so far)");
  KILN_CHECK(!e.bias.defined() || e.bias.dtype == DType::f32, DTypeError, "vulkan matmul: the bias is ", e.bias.dtype);
  Params p;
  p.batch = index32(mp.batch, "matmul");
  p.m = index32(mp.m, "matmul");
  p.n = index32(mp.n, "matmul");
  p.k = index32(mp.k, "matmul");
  p.lda = index32(mp.lda, "matmul");
  p.ldb = index32(mp.ldb, "matmul");
  p.batch_stride_a = index32(mp.batch_stride_a, "matmul");
  p.batch_stride_b = index32(mp.batch_stride_b, "matmul");
  index32(out.numel(), "matmul");
  index32(a.offset + (mp.batch - 1) * mp.batch_stride_a + (mp.trans_a ? mp.k * mp.lda : mp.m * mp.lda), "matmul");
  index32(b.offset + (mp.batch - 1) * mp.batch_stride_b + (mp.trans_b ? mp.n * mp.ldb : mp.k * mp.ldb), "matmul");
  p.a_offset = index32(a.offset, "matmul");
  p.b_offset = index32(b.offset, "matmul");
  p.out_offset = index32(out.offset, "matmul");
  p.trans_a = mp.trans_a;
  p.trans_b = mp.trans_b;
  p.has_bias = e.bias.defined();
  p.bias_offset = e.bias.defined() ? index32(e.bias.offset, "matmul") : 0;
  p.relu = e.activation == Activation::relu;
  // f16 products on the matrix units when allowed and offered (matmul_coop.comp's 64 x 128
  // tiles), else gemm.glsl's f32
  const bool coop = allow_f16_products() && cooperative_matrix();
  const GemmTile tile = coop ? GemmTile{64, 128, 0} : gemm_tile(mp.m, mp.n);
  const int64_t tiles = tile.count(mp.batch, mp.m, mp.n);
  const SplitK split = split_k(tiles, mp.k, mp.batch * mp.m * mp.n);
  p.splits = static_cast<int32_t>(split.splits);
  p.k_chunk = static_cast<int32_t>(split.k_chunk);
  // a row-major A and a transposed B have consecutive k side by side: loaded k-fastest
  const std::vector<int32_t> constants =
      coop ? std::vector<int32_t>{} : std::vector<int32_t>{tile.m, tile.n, tile.thread, !mp.trans_a, mp.trans_b};
  const char* shader = coop ? "matmul_coop" : "matmul";
  if (split.splits == 1) {
    // without a bias, binding 4 takes A again, unread
    record({shader, constants, &p, sizeof p,
            {allocation(a), allocation(b), allocation(out), e.bias.defined() ? allocation(e.bias) : allocation(a)},
            std::min<int64_t>(tiles, 65535) * kWorkgroupSize});
    return;
  }
  Workspace ws(*this, static_cast<size_t>(split.splits * mp.batch * mp.m * mp.n) * sizeof(float));
  record({shader, constants, &p, sizeof p, {allocation(a), allocation(b), ws.allocation(), allocation(a)},
          std::min<int64_t>(tiles * split.splits, 65535) * kWorkgroupSize});
  record_split_sum(ws.allocation(), split.splits, mp.batch * mp.m * mp.n, mp.n, out, e);
}

GemmTile gemm_tile(int64_t m, int64_t n) {
  if (m <= 32 && n > 32) return {32, 128, 4};  // e.g. 32 input channels: a 64-row tile would be half empty
  if (m <= 32 || n <= 32) return {32, 32, 2};  // small outputs: smaller tiles, more of them
  return {64, 64, 4};
}

SplitK split_k(int64_t tiles, int64_t k, int64_t outputs) {
  // few tiles and a long k: split it so that about 256 workgroups run, each over at least 128 k,
  // the workspace (splits partial outputs) under 64 MiB
  if (tiles >= 128 || k < 256) return {1, k};
  int64_t splits = std::min((256 + tiles - 1) / tiles, k / 128);
  splits = std::max<int64_t>(1, std::min(splits, (int64_t{16} << 20) / std::max<int64_t>(outputs, 1)));
  const int64_t chunk = ((k + splits - 1) / splits + 15) / 16 * 16;  // whole steps of 16
  return {(k + chunk - 1) / chunk, chunk};
}

void VulkanBackend::record_split_sum(const Allocation* workspace, int64_t splits, int64_t total, int64_t n,
                                     const TensorRef& out, const Epilogue& e) {
  ReduceParams r;
  r.total = index32(total, "matmul");
  r.n = index32(n, "matmul");
  r.splits = index32(splits, "matmul");
  r.out_offset = index32(out.offset, "matmul");
  r.has_bias = e.bias.defined();
  r.bias_offset = e.bias.defined() ? index32(e.bias.offset, "matmul") : 0;
  r.relu = e.activation == Activation::relu;
  record({"matmul_reduce", {}, &r, sizeof r,
          {workspace, allocation(out), e.bias.defined() ? allocation(e.bias) : workspace}, total});
}

}  // namespace kiln::vulkan
