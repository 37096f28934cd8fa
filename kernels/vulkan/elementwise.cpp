// The elementwise kernels of the Vulkan backend (shaders/elementwise.comp): fill, arange, copy,
// unary, unary_backward and binary. The host side describes each tensor as a Layout (shapes
// collapsed as kernels/cpu/elementwise.cpp does) and records one dispatch.
#include <bit>
#include <cstdint>
#include <limits>
#include <string_view>

#include "kiln/core/error.h"
#include "kiln/kernels/vulkan/vulkan_backend.h"

namespace kiln::vulkan {

namespace {

constexpr int kMaxDims = 8;

// shaders/layout.glsl's Layout, field for field (std430: 4-byte members, no padding)
struct Layout {
  int32_t rank = 0, offset = 0, contiguous = 1, unused = 0;
  int32_t size[kMaxDims] = {}, stride[kMaxDims] = {};
};

// elementwise.comp's Params
struct Params {
  int32_t numel = 0;
  uint32_t bits = 0;
  float alpha = 0, unused = 0;
  float range[4] = {};  // arange: start (hi, lo), step (hi, lo)
  Layout out, a, b;
};
static_assert(sizeof(Layout) == 80 && sizeof(Params) == 32 + 3 * 80);

// t as a shader walks it: size-1 dimensions dropped, neighbours that lie back to back merged.
Layout layout_of(const TensorRef& t, std::string_view op) {
  if (t.numel() == 0) return Layout{};  // nothing to walk (the dispatch is skipped)
  int64_t sizes[64], strides[64];
  int rank = 0;
  int64_t last = t.offset;  // the largest offset the walk reaches
  for (size_t d = 0; d < static_cast<size_t>(t.shape.rank()); ++d) {
    const int64_t n = t.shape[d], s = t.strides[d];
    if (n == 1) continue;
    last += (n - 1) * s;
    if (rank > 0 && strides[rank - 1] == s * n) {
      sizes[rank - 1] *= n;
      strides[rank - 1] = s;
    } else {
      sizes[rank] = n;
      strides[rank] = s;
      ++rank;
    }
  }
  KILN_CHECK(rank <= kMaxDims, ShapeError, "vulkan ", op, ": a tensor of shape ", t.shape,
             " walks ", rank, " dimensions after merging; the Vulkan kernels take up to ", kMaxDims);
  Layout l;
  l.rank = rank;
  l.offset = index32(t.offset, op);
  index32(last, op);
  l.contiguous = rank == 0 || (rank == 1 && strides[0] == 1);
  for (int d = 0; d < rank; ++d) {
    l.size[d] = index32(sizes[d], op);
    KILN_CHECK(strides[d] >= 0, ShapeError, "vulkan ", op, ": negative strides are not taken");
    l.stride[d] = index32(strides[d], op);
  }
  return l;
}

// Which dtypes an op takes so far: f32 everywhere; fill, arange and copy also i32, and fill and copy u8.
enum class Takes { f32, f32_i32, f32_i32_u8 };

void check_dtype(const TensorRef& t, Takes takes, std::string_view op) {
  const bool ok = t.dtype == DType::f32 || (takes != Takes::f32 && t.dtype == DType::i32) ||
                  (takes == Takes::f32_i32_u8 && t.dtype == DType::u8);
  KILN_CHECK(ok, DTypeError, "vulkan ", op, ": ", t.dtype, " is not supported by the Vulkan backend yet (",
             takes == Takes::f32 ? "f32" : takes == Takes::f32_i32 ? "f32 and i32" : "f32, i32 and u8", " so far)");
}

// elementwise.comp's dtype codes (SRC_TYPE, OUT_TYPE)
int32_t type_code(DType t) { return t == DType::f32 ? 0 : t == DType::i32 ? 1 : 2; }

// A double as two floats whose sum carries about 48 of its bits.
void split(double v, float* hi, float* lo) {
  *hi = static_cast<float>(v);
  *lo = static_cast<float>(v - static_cast<double>(*hi));
}

}  // namespace

void VulkanBackend::fill(const TensorRef& out, double value) {
  check_dtype(out, Takes::f32_i32_u8, "fill");
  Params p;
  p.numel = index32(out.numel(), "fill");
  p.out = layout_of(out, "fill");
  p.bits = out.dtype == DType::f32  ? std::bit_cast<uint32_t>(static_cast<float>(value))
           : out.dtype == DType::i32 ? static_cast<uint32_t>(static_cast<int32_t>(value))
                                     : static_cast<uint32_t>(static_cast<uint8_t>(value));
  record({"elementwise_fill", {0, 0, type_code(out.dtype)}, &p, sizeof p, {allocation(out)}, p.numel});
}

void VulkanBackend::arange(const TensorRef& out, double start, double step) {
  check_dtype(out, Takes::f32_i32, "arange");
  Params p;
  p.numel = index32(out.numel(), "arange");
  p.out = layout_of(out, "arange");
  split(start, &p.range[0], &p.range[1]);
  split(step, &p.range[2], &p.range[3]);
  record({"elementwise_arange", {0, 0, out.dtype == DType::i32}, &p, sizeof p, {allocation(out)}, p.numel});
}

void VulkanBackend::copy(const TensorRef& src, const TensorRef& out) {
  KILN_CHECK(src.numel() == out.numel(), ShapeError, "vulkan copy: src ", src.shape, " has ", src.numel(),
             " elements but out ", out.shape, " has ", out.numel());
  check_dtype(src, Takes::f32_i32_u8, "copy");
  check_dtype(out, Takes::f32_i32_u8, "copy");
  Params p;
  p.numel = index32(out.numel(), "copy");
  p.out = layout_of(out, "copy");
  p.a = layout_of(src, "copy");
  record({"elementwise_copy", {0, type_code(src.dtype), type_code(out.dtype)}, &p, sizeof p,
          {allocation(src), allocation(out)}, p.numel});
}

void VulkanBackend::unary(UnaryOp op, const TensorRef& x, const TensorRef& out, double alpha) {
  check_dtype(x, Takes::f32_i32, unary_op_name(op));
  KILN_CHECK(out.dtype == x.dtype, DTypeError, "vulkan ", unary_op_name(op), ": out is ", out.dtype, ", x ", x.dtype);
  const bool i32 = x.dtype == DType::i32;
  KILN_CHECK(!i32 || op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::sign || op == UnaryOp::relu ||
                 op == UnaryOp::add_scalar || op == UnaryOp::mul_scalar || op == UnaryOp::isfinite,
             DTypeError, "vulkan unary ", unary_op_name(op), " does not take i32 (only the ops that stay integers)");
  Params p;
  p.numel = index32(out.numel(), unary_op_name(op));
  p.out = layout_of(out, unary_op_name(op));
  p.a = layout_of(x, unary_op_name(op));
  p.alpha = static_cast<float>(alpha);
  p.bits = static_cast<uint32_t>(static_cast<int32_t>(alpha));  // i32: alpha truncated, as the CPU
  record({"elementwise_unary", {static_cast<int32_t>(op), 0, 0, i32}, &p, sizeof p,
          {allocation(x), allocation(out), fault_slot()}, p.numel});
}

void VulkanBackend::unary_backward(UnaryOp op, const TensorRef& x, const TensorRef& grad, const TensorRef& out,
                                   double alpha) {
  KILN_CHECK(op == UnaryOp::relu || op == UnaryOp::leaky_relu || op == UnaryOp::gelu, ValueError,
             "vulkan backend: unary_backward has no kernel for ", unary_op_name(op),
             " (only relu, leaky_relu and gelu; the others are compositions of ops)");
  for (const TensorRef* t : {&x, &grad, &out}) check_dtype(*t, Takes::f32, "unary_backward");
  Params p;
  p.numel = index32(out.numel(), "unary_backward");
  p.out = layout_of(out, "unary_backward");
  p.a = layout_of(x, "unary_backward");
  p.b = layout_of(grad, "unary_backward");
  p.alpha = static_cast<float>(alpha);
  record({"elementwise_unary_backward", {static_cast<int32_t>(op)}, &p, sizeof p,
          {allocation(x), allocation(grad), allocation(out)}, p.numel});
}

void VulkanBackend::binary(BinaryOp op, const TensorRef& a, const TensorRef& b, const TensorRef& out) {
  for (const TensorRef* t : {&a, &b, &out}) check_dtype(*t, Takes::f32_i32, binary_op_name(op));
  KILN_CHECK(a.dtype == b.dtype && b.dtype == out.dtype, DTypeError, "vulkan ", binary_op_name(op), ": ", a.dtype,
             ", ", b.dtype, " -> ", out.dtype, "; one dtype");
  Params p;
  p.numel = index32(out.numel(), binary_op_name(op));
  p.out = layout_of(out, binary_op_name(op));
  p.a = layout_of(a, binary_op_name(op));
  p.b = layout_of(b, binary_op_name(op));
  record({"elementwise_binary", {static_cast<int32_t>(op), 0, 0, a.dtype == DType::i32}, &p, sizeof p,
          {allocation(a), allocation(b), allocation(out), fault_slot()}, p.numel});
}

}  // namespace kiln::vulkan
