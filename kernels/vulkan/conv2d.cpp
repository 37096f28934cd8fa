// conv2d and pooling of the Vulkan backend (shaders/conv2d.comp, shaders/pool.comp).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/kernels/vulkan/vulkan_backend.h"

namespace kiln::vulkan {

namespace {

struct ConvParams {  // conv2d.comp's
  int32_t n = 0, c = 0, h = 0, w = 0;
  int32_t o = 0, kh = 0, kw = 0;
  int32_t oh = 0, ow = 0;
  int32_t sh = 0, sw = 0, ph = 0, pw = 0, dh = 0, dw = 0, groups = 0;
  int32_t x_offset = 0, w_offset = 0, y_offset = 0, bias_offset = 0, has_bias = 0;
  int32_t splits = 1, k_chunk = 0;
  Divisor kw_, taps_, ow_, ohw_, w_, hw_, sh_, sw_;  // what the index arithmetic divides by
  Divisor cg_, og_;
};

struct PoolParams {  // pool.comp's
  int32_t planes = 0, h = 0, w = 0, oh = 0, ow = 0;
  int32_t kh = 0, kw = 0, sh = 0, sw = 0, ph = 0, pw = 0, include_pad = 0;
  int32_t x_offset = 0, y_offset = 0, i_offset = 0;
};

void check_f32(std::initializer_list<const TensorRef*> ts, const char* op) {
  for (const TensorRef* t : ts)
    KILN_CHECK(t->dtype == DType::f32, DTypeError, "vulkan ", op, ": ", t->dtype,
               " is not supported by the Vulkan backend yet (f32 so far)");
}

// conv2d.comp's specialisation constants: gemm.glsl's tile and load orders (1-5), ReLU (6), and
// whether k runs tap-major (7: the channels summed over are whole steps of 16). (Not the filter's
// size: a pipeline per size meant many pipelines for the tests to compile, each slow to compile on
// lavapipe; history: kernels/vulkan/NOTES.md.)
std::vector<int32_t> conv_constants(GemmTile tile, bool a_k_fastest, bool b_k_fastest, bool relu,
                                    int64_t channels_summed) {
  return {tile.m, tile.n, tile.thread, a_k_fastest, b_k_fastest, relu, channels_summed % 16 == 0};
}

int64_t workgroups(int64_t tiles) { return std::min<int64_t>(tiles, 65535) * kWorkgroupSize; }

// x [N, C, H, W], w [O, C/G, KH, KW], y [N, O, OH, OW] as conv2d.comp takes them
ConvParams conv_params(const TensorRef& x, const TensorRef& w, const TensorRef& y, const Conv2dParams& p,
                       const char* op) {
  check_f32({&x, &w, &y}, op);
  ConvParams c;
  c.n = index32(x.shape[0], op), c.c = index32(x.shape[1], op), c.h = index32(x.shape[2], op), c.w = index32(x.shape[3], op);
  c.o = index32(w.shape[0], op), c.kh = index32(w.shape[2], op), c.kw = index32(w.shape[3], op);
  c.oh = index32(y.shape[2], op), c.ow = index32(y.shape[3], op);
  c.sh = index32(p.stride_h, op), c.sw = index32(p.stride_w, op), c.ph = index32(p.pad_h, op), c.pw = index32(p.pad_w, op);
  c.dh = index32(p.dilation_h, op), c.dw = index32(p.dilation_w, op), c.groups = index32(p.groups, op);
  index32(x.numel(), op), index32(y.numel(), op), index32(w.numel(), op);
  c.x_offset = index32(x.offset, op), c.w_offset = index32(w.offset, op), c.y_offset = index32(y.offset, op);
  c.kw_ = divisor(c.kw), c.taps_ = divisor(c.kh * c.kw), c.ow_ = divisor(c.ow), c.ohw_ = divisor(c.oh * c.ow);
  c.w_ = divisor(c.w), c.hw_ = divisor(c.h * c.w), c.sh_ = divisor(c.sh), c.sw_ = divisor(c.sw);
  c.cg_ = divisor(c.c / std::max(c.groups, 1)), c.og_ = divisor(c.o / std::max(c.groups, 1));
  return c;
}

PoolParams pool_params(const TensorRef& x, const TensorRef& y, const Pool2dParams& p, const char* op) {
  PoolParams q;
  q.planes = index32(x.shape[0] * x.shape[1], op), q.h = index32(x.shape[2], op), q.w = index32(x.shape[3], op);
  q.oh = index32(y.shape[2], op), q.ow = index32(y.shape[3], op);
  q.kh = index32(p.kernel_h, op), q.kw = index32(p.kernel_w, op), q.sh = index32(p.stride_h, op);
  q.sw = index32(p.stride_w, op), q.ph = index32(p.pad_h, op), q.pw = index32(p.pad_w, op);
  q.include_pad = p.count_include_pad;
  index32(x.numel(), op), index32(y.numel(), op);
  q.x_offset = index32(x.offset, op), q.y_offset = index32(y.offset, op);
  return q;
}

}  // namespace

void VulkanBackend::conv2d(const TensorRef& x, const TensorRef& w, const TensorRef& y, const Conv2dParams& p,
                           const Epilogue& e) {
  ConvParams c = conv_params(x, w, y, p, "conv2d");
  if (e.bias.defined()) check_f32({&e.bias}, "conv2d");
  c.has_bias = e.bias.defined();
  c.bias_offset = e.bias.defined() ? index32(e.bias.offset, "conv2d") : 0;
  // the GEMM: per group, rows O/G, columns N OH OW, a reduction over C/G KH KW (w's rows: k-fastest)
  const int64_t rows = c.o / std::max(c.groups, 1), pixels = int64_t{c.n} * c.oh * c.ow;
  const GemmTile tile = gemm_tile(rows, pixels);
  // without a bias, binding 4 takes x again, unread
  record({"conv2d_forward", conv_constants(tile, true, false, e.activation == Activation::relu, c.cg_.d), &c, sizeof c,
          {allocation(x), allocation(w), allocation(y), e.bias.defined() ? allocation(e.bias) : allocation(x)},
          workgroups(tile.count(c.groups, rows, pixels))});
}

void VulkanBackend::conv2d_backward_input(const TensorRef& grad_y, const TensorRef& w, const TensorRef& grad_x,
                                          const Conv2dParams& p) {
  ConvParams c = conv_params(grad_x, w, grad_y, p, "conv2d_backward_input");
  // the GEMM: per group, rows C/G, columns N H W, a reduction over O/G KH KW
  const int64_t rows = c.c / std::max(c.groups, 1), pixels = int64_t{c.n} * c.h * c.w;
  const GemmTile tile = gemm_tile(rows, pixels);
  record({"conv2d_backward_input", conv_constants(tile, true, false, false, c.og_.d), &c, sizeof c,
          {allocation(grad_y), allocation(w), allocation(grad_x)}, workgroups(tile.count(c.groups, rows, pixels))});
}

void VulkanBackend::conv2d_backward_weight(const TensorRef& x, const TensorRef& grad_y, const TensorRef& grad_w,
                                           const Conv2dParams& p) {
  ConvParams c = conv_params(x, grad_w, grad_y, p, "conv2d_backward_weight");
  // the GEMM: per group, rows O/G, columns C/G KH KW, a reduction over N OH OW (split when long);
  // both operands have consecutive pixels side by side: loaded k-fastest
  const int64_t rows = c.o / std::max(c.groups, 1), cols = grad_w.numel() / std::max<int64_t>(c.o, 1);
  const int64_t terms = int64_t{c.n} * c.oh * c.ow;
  const GemmTile tile = gemm_tile(rows, cols);
  const int64_t tiles = tile.count(c.groups, rows, cols);
  const SplitK split = split_k(tiles, terms, grad_w.numel());
  c.splits = index32(split.splits, "conv2d_backward_weight");
  c.k_chunk = index32(split.k_chunk, "conv2d_backward_weight");
  const std::vector<int32_t> constants = conv_constants(tile, true, true, false, 1);  // k: pixels
  if (split.splits == 1) {
    record({"conv2d_backward_weight", constants, &c, sizeof c, {allocation(x), allocation(grad_y), allocation(grad_w)},
            workgroups(tiles)});
    return;
  }
  Workspace ws(*this, static_cast<size_t>(split.splits * grad_w.numel()) * sizeof(float));
  record({"conv2d_backward_weight", constants, &c, sizeof c, {allocation(x), allocation(grad_y), ws.allocation()},
          workgroups(tiles * split.splits)});
  record_split_sum(ws.allocation(), split.splits, grad_w.numel(), cols, grad_w, Epilogue{});
}

void VulkanBackend::max_pool2d(const TensorRef& x, const TensorRef& y, const TensorRef& indices, const Pool2dParams& p) {
  check_f32({&x, &y}, "max_pool2d");
  PoolParams q = pool_params(x, y, p, "max_pool2d");
  q.i_offset = index32(indices.offset, "max_pool2d");
  record({"pool_max_forward", {}, &q, sizeof q, {allocation(x), allocation(y), allocation(indices)}, y.numel()});
}

void VulkanBackend::max_pool2d_backward(const TensorRef& grad_y, const TensorRef& indices, const TensorRef& grad_x,
                                        const Pool2dParams& p) {
  check_f32({&grad_y, &grad_x}, "max_pool2d_backward");
  PoolParams q = pool_params(grad_x, grad_y, p, "max_pool2d_backward");
  q.i_offset = index32(indices.offset, "max_pool2d_backward");
  record({"pool_max_backward", {}, &q, sizeof q, {allocation(grad_y), allocation(indices), allocation(grad_x)},
          grad_x.numel()});
}

void VulkanBackend::avg_pool2d(const TensorRef& x, const TensorRef& y, const Pool2dParams& p) {
  check_f32({&x, &y}, "avg_pool2d");
  PoolParams q = pool_params(x, y, p, "avg_pool2d");
  record({"pool_avg_forward", {}, &q, sizeof q, {allocation(x), allocation(y)}, y.numel()});
}

void VulkanBackend::avg_pool2d_backward(const TensorRef& grad_y, const TensorRef& grad_x, const Pool2dParams& p) {
  check_f32({&grad_y, &grad_x}, "avg_pool2d_backward");
  PoolParams q = pool_params(grad_x, grad_y, p, "avg_pool2d_backward");
  record({"pool_avg_backward", {}, &q, sizeof q, {allocation(grad_y), allocation(grad_x)}, grad_x.numel()});
}

}  // namespace kiln::vulkan
