// matmul of the Vulkan backend (shaders/matmul.comp): C[b] = epilogue(op(A[b]) op(B[b])).
#include <cstdint>

#include "core/error.h"
#include "kernels/vulkan/vulkan_backend.h"

namespace kiln::vulkan {

namespace {

struct Params {  // matmul.comp's
  int32_t batch = 0, m = 0, n = 0, k = 0;
  int32_t lda = 0, ldb = 0, batch_stride_a = 0, batch_stride_b = 0;
  int32_t a_offset = 0, b_offset = 0, out_offset = 0, bias_offset = 0;
  int32_t trans_a = 0, trans_b = 0, has_bias = 0, relu = 0;
};

constexpr int64_t kTile = 64;

int32_t narrow(int64_t v) {
  KILN_CHECK(v >= 0 && v < (int64_t{1} << 31), ShapeError, "vulkan matmul: ", v,
             " does not fit the 32-bit indices of the Vulkan kernels");
  return static_cast<int32_t>(v);
}

const Allocation* allocation(const TensorRef& t) { return static_cast<const Allocation*>(t.buffer); }

}  // namespace

void VulkanBackend::matmul(const TensorRef& a, const TensorRef& b, const TensorRef& out, const MatmulParams& mp,
                           const Epilogue& e) {
  for (const TensorRef* t : {&a, &b, &out})
    KILN_CHECK(t->dtype == DType::f32, DTypeError, "vulkan matmul: ", t->dtype,
               " is not supported by the Vulkan backend yet (f32 so far)");
  KILN_CHECK(!e.bias.defined() || e.bias.dtype == DType::f32, DTypeError, "vulkan matmul: the bias is ", e.bias.dtype);
  Params p;
  p.batch = narrow(mp.batch);
  p.m = narrow(mp.m);
  p.n = narrow(mp.n);
  p.k = narrow(mp.k);
  p.lda = narrow(mp.lda);
  p.ldb = narrow(mp.ldb);
  p.batch_stride_a = narrow(mp.batch_stride_a);
  p.batch_stride_b = narrow(mp.batch_stride_b);
  narrow(out.numel());
  narrow(a.offset + (mp.batch - 1) * mp.batch_stride_a + (mp.trans_a ? mp.k * mp.lda : mp.m * mp.lda));
  narrow(b.offset + (mp.batch - 1) * mp.batch_stride_b + (mp.trans_b ? mp.n * mp.ldb : mp.k * mp.ldb));
  p.a_offset = narrow(a.offset);
  p.b_offset = narrow(b.offset);
  p.out_offset = narrow(out.offset);
  p.trans_a = mp.trans_a;
  p.trans_b = mp.trans_b;
  p.has_bias = e.bias.defined();
  p.bias_offset = e.bias.defined() ? narrow(e.bias.offset) : 0;
  p.relu = e.activation == Activation::relu;
  const int64_t tiles = mp.batch * ((mp.m + kTile - 1) / kTile) * ((mp.n + kTile - 1) / kTile);
  // without a bias, binding 4 takes A again, unread
  record({"matmul", {}, &p, sizeof p,
          {allocation(a), allocation(b), allocation(out), e.bias.defined() ? allocation(e.bias) : allocation(a)},
          std::min<int64_t>(tiles, 65535) * kWorkgroupSize});
}

}  // namespace kiln::vulkan
