#version 450
#extension GL_EXT_scalar_block_layout : require  // std430 parameter blocks
// Elementwise kernels on the Vulkan backend, one source compiled into several shader variants
// (kernels/vulkan/CMakeLists.txt passes -DFILL, -DARANGE, -DCOPY, -DUNARY, -DUNARY_BACKWARD or
// -DBINARY); the op is a specialisation constant, so each pipeline is compiled for one op with
// the others' branches folded away.
//
//   fill:           out[i] = value                (any strides; the value's bits in out's dtype)
//   arange:         out[i] = start + i * step     (contiguous)
//   copy:           out[i] = src[i]               (any strides and shapes of equal element count,
//                                                  conversions among f32, i32 and u8)
//   unary:          out[i] = f(x[i], alpha)       (f32, and i32 for the ops that stay integers)
//   unary_backward: out[i] = grad[i] * f'(x[i])   (f32; relu, leaky_relu, gelu)
//   binary:         out[i] = a[i] op b[i]         (f32 and i32; a and b broadcast with stride 0)
//
// One invocation per element in a grid-stride loop (the host caps the workgroup count at 65535,
// the least every device offers). f32 math follows kernels/cpu/elementwise.cpp; exp, log, tanh and
// erf (which GLSL lacks) are kiln's own (math.glsl), as Vulkan leaves GLSL's loose; pow is GLSL's
// (exp2(y log2 x): its error grows with |y log2 x|, which the tests' tolerance bounds).
//
// Bindings: 0 the parameters (written by the host per dispatch), then the tensors.
//
// Measured (version 1) with `vulkan-bench` (`scripts/device-run vulkan`; device time from timestamp
// queries) on the H100 of docs/runs/2026-11-26-h100 (NVIDIA's Vulkan driver, Vulkan 1.4.312), on
// [4096, 4096] f32 (64 MB), against a copy's 2.0 TB/s [fig vulkan.copy.tbps] (bytes read and written
// per second): relu 2.05 TB/s [fig vulkan.relu.tbps], add of two tensors 3.06 TB/s [fig vulkan.add.tbps]
// (three streams keep more loads in flight than a copy's one), add of a broadcast row
// 1.16 TB/s [fig vulkan.add.broadcast.tbps] (a view: the divisions of layout.glsl's at() per element,
// where contiguous tensors take none). The parameters sit in a uniform buffer: relu on
// [64, 64, 24, 24] 0.0102 ms [fig vulkan.relu.mnist.ms] (from a storage buffer, as before:
// kernels/vulkan/NOTES.md).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const int OP = 0;       // the UnaryOp or BinaryOp, as core/backend.h numbers it
layout(constant_id = 2) const int SRC_TYPE = 0;  // copy: src's dtype, F32, I32 or U8 below
layout(constant_id = 3) const int OUT_TYPE = 0;  // fill, copy, arange: out's dtype
const int F32 = 0, I32 = 1, U8 = 2;
// u8 lives four to a 32-bit word, which shaders read whole (no 8-bit storage needed) and write with
// atomicAnd / atomicOr on the element's byte, so neighbours written by other invocations survive.

#include "layout.glsl"
#include "math.glsl"

layout(std430, binding = 0) uniform Params {
  int numel;
  uint bits;      // fill: the value's 32-bit pattern
  float alpha;    // unary: the scalar
  float unused;
  vec4 range;     // arange: start and step, each as a pair of floats (hi, lo)
  Layout out_l;
  Layout a_l;
  Layout b_l;
} P;

#if defined(FILL)
layout(std430, binding = 1) buffer Out { uint out_u[]; };
#elif defined(ARANGE)
layout(std430, binding = 1) writeonly buffer Out { float out_f[]; };
layout(std430, binding = 1) writeonly buffer OutI { int out_i[]; };
#elif defined(COPY)
layout(std430, binding = 1) readonly buffer Src { float src_f[]; };
layout(std430, binding = 1) readonly buffer SrcI { int src_i[]; };
layout(std430, binding = 1) readonly buffer SrcU { uint src_u[]; };
layout(std430, binding = 2) writeonly buffer Out { float out_f[]; };
layout(std430, binding = 2) writeonly buffer OutI { int out_i[]; };
layout(std430, binding = 2) buffer OutU { uint out_u[]; };
#elif defined(UNARY)
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer XI { int x_i[]; };
layout(std430, binding = 2) writeonly buffer Out { float out_f[]; };
layout(std430, binding = 2) writeonly buffer OutI { int out_i[]; };
#else  // UNARY_BACKWARD (a = x, b = grad), BINARY
layout(std430, binding = 1) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer AI { int a_i[]; };
layout(std430, binding = 2) readonly buffer B { float b[]; };
layout(std430, binding = 2) readonly buffer BI { int b_i[]; };
layout(std430, binding = 3) writeonly buffer Out { float out_f[]; };
layout(std430, binding = 3) writeonly buffer OutI { int out_i[]; };
#endif
#if defined(UNARY) || defined(BINARY)
layout(std430, binding = 4) buffer Fault { int fault[]; };  // i32 division by zero, negative powers
layout(constant_id = 4) const int IS_I32 = 0;  // unary, binary: i32 (else f32)
#endif

// The i32 that a float holding an integer value wraps to (mod 2^32), as C++'s conversion of an
// int64 to int32 does. Inside int's range the plain conversion; beyond it v's spacing is at least
// 256, so r = v - floor(v / 2^32) * 2^32, in [0, 2^32) and a multiple of that spacing, is exact
// in float, and the uint it converts to has the bits sought.
int wrap_to_i32(float v) {
  if (abs(v) < 2147483648.0) return int(v);
  const float r = v - floor(v * (1.0 / 4294967296.0)) * 4294967296.0;
  return int(uint(r));
}

// Float to integer as the CPU converts: truncation toward zero, then the wrap.
int truncate_to_i32(float v) { return wrap_to_i32(trunc(v)); }

float normal_cdf(float v) { return 0.5 * erfc_of(-v * 0.70710678118654752); }
float normal_pdf(float v) { return exp_of(-0.5 * v * v) * 0.39894228040143268; }


#if defined(FILL) || defined(COPY)
// Byte o of the u8 array over out_u: only its 8 bits change.
void store_u8(int o, uint byte) {
  const uint shift = uint(o & 3) * 8u;
  atomicAnd(out_u[o >> 2], ~(0xffu << shift));
  atomicOr(out_u[o >> 2], (byte & 0xffu) << shift);
}
#endif


// core/backend.h's UnaryOp and BinaryOp, in its order.
const int NEG = 0, EXP = 1, LOG = 2, SQRT = 3, ABS = 4, SIGN = 5, RELU = 6, LEAKY_RELU = 7, GELU = 8,
          TANH = 9, SIGMOID = 10, POW = 11, ADD_SCALAR = 12, MUL_SCALAR = 13, ISFINITE = 14;
const int ADD = 0, SUB = 1, MUL = 2, DIV = 3, BPOW = 4, MAXIMUM = 5, MINIMUM = 6, EQ = 7, NE = 8,
          GT = 9, GE = 10, LT = 11, LE = 12;

// C's pow(x, y) for the cases GLSL leaves undefined (x < 0, x == 0): an integer y keeps the sign
// rules of a repeated product; a fractional power of a negative number is NaN.
float pow_of(float x, float y) {
  if (y == 0.0) return 1.0;
  if (x == 1.0) return 1.0;
  if (is_nan(x) || is_nan(y)) return x + y;
  const bool integer = y == trunc(y);
  const bool odd = integer && abs(y) < 16777216.0 && (int(abs(y)) & 1) == 1;
  if (x == 0.0) {
    if (y < 0.0) return odd ? 1.0 / x : 1.0 / 0.0;
    return odd ? x : 0.0;
  }
  if (x < 0.0) {
    if (!integer) return 0.0 / 0.0;
    const float m = pow(-x, y);
    return odd ? -m : m;
  }
  return pow(x, y);
}

float unary_op(float v, float alpha) {
  if (OP == NEG) return -v;
  if (OP == EXP) return exp_of(v);
  if (OP == LOG) return log_of(v);
  if (OP == SQRT) return sqrt(v);
  if (OP == ABS) return abs(v);
  if (OP == SIGN) return v > 0.0 ? 1.0 : (v < 0.0 ? -1.0 : 0.0);  // sign(NaN) = 0
  if (OP == RELU) return relu_of(v);                                  // a NaN passes
  if (OP == LEAKY_RELU) return v > 0.0 ? v : alpha * v;
  if (OP == GELU) return v * normal_cdf(v);
  if (OP == TANH) return tanh_of(v);
  if (OP == SIGMOID) return 1.0 / (1.0 + exp_of(-v));
  if (OP == POW) return pow_of(v, alpha);
  if (OP == ADD_SCALAR) return v + alpha;
  // finite: the exponent bits are not all ones (as in NaN and +-inf). The bits, not a comparison
  // such as v - v == 0.0, which a driver may fold to true: Vulkan lets it assume that floats are
  // neither NaN nor infinite. A denormal, flushed to zero or not, is finite all the same.
  if (OP == ISFINITE) return (floatBitsToUint(v) & 0x7f800000u) != 0x7f800000u ? 1.0 : 0.0;
  return v * alpha;  // MUL_SCALAR
}

float unary_backward_op(float v, float g, float alpha) {
  if (OP == RELU) return v <= 0.0 ? 0.0 : g;  // as PyTorch: 0 at exactly 0
  if (OP == LEAKY_RELU) return v > 0.0 ? g : g * alpha;
  return g * (normal_cdf(v) + v * normal_pdf(v));  // GELU
}

float binary_op(float x, float y) {
  if (OP == ADD) return x + y;
  if (OP == SUB) return x - y;
  if (OP == MUL) return x * y;
  if (OP == DIV) return x / y;
  if (OP == BPOW) return pow_of(x, y);
  if (OP == MAXIMUM) return is_nan(x) || x > y ? x : y;
  if (OP == MINIMUM) return is_nan(x) || x < y ? x : y;
  if (OP == EQ) return x == y ? 1.0 : 0.0;
  if (OP == NE) return x != y ? 1.0 : 0.0;
  if (OP == GT) return x > y ? 1.0 : 0.0;
  if (OP == GE) return x >= y ? 1.0 : 0.0;
  if (OP == LT) return x < y ? 1.0 : 0.0;
  return x <= y ? 1.0 : 0.0;  // LE
}

#if defined(UNARY) || defined(BINARY)
// i32, as kernels/cpu/elementwise.cpp: arithmetic wraps (GLSL's int does), division truncates
// toward zero and INT_MIN / -1 wraps; a division by zero or a negative power cannot throw from a
// shader: the element gets 0 and the fault slot records it (op, the element, 0, 0).
void report(int op, int element) {
  if (atomicCompSwap(fault[0], 0, op) == 0) {
    fault[1] = 0;
    fault[2] = element;
    fault[3] = 0;
  }
}
const int FAULT_DIVISION = 6, FAULT_POWER = 7;  // runtime.cpp's FaultOp

int unary_op_i(int v, int alpha) {
  if (OP == NEG) return -v;
  if (OP == ABS) return v < 0 ? -v : v;
  if (OP == SIGN) return v > 0 ? 1 : (v < 0 ? -1 : 0);
  if (OP == RELU) return v < 0 ? 0 : v;
  if (OP == ADD_SCALAR) return v + alpha;
  if (OP == ISFINITE) return 1;  // every integer is finite
  return v * alpha;  // MUL_SCALAR (the host refuses the others)
}

int binary_op_i(int x, int y, int element) {
  if (OP == ADD) return x + y;
  if (OP == SUB) return x - y;
  if (OP == MUL) return x * y;
  if (OP == DIV) {
    if (y == 0) {
      report(FAULT_DIVISION, element);
      return 0;
    }
    return y == -1 ? -x : x / y;  // -INT_MIN wraps to INT_MIN, where INT_MIN / -1 is undefined
  }
  if (OP == BPOW) {  // repeated squaring in uint: exact, and wraps
    if (y < 0) {
      report(FAULT_POWER, element);
      return 0;
    }
    uint result = 1u, base = uint(x);
    for (uint e = uint(y); e != 0u; e >>= 1) {
      if ((e & 1u) != 0u) result *= base;
      base *= base;
    }
    return int(result);
  }
  if (OP == MAXIMUM) return max(x, y);
  if (OP == MINIMUM) return min(x, y);
  if (OP == EQ) return x == y ? 1 : 0;
  if (OP == NE) return x != y ? 1 : 0;
  if (OP == GT) return x > y ? 1 : 0;
  if (OP == GE) return x >= y ? 1 : 0;
  if (OP == LT) return x < y ? 1 : 0;
  return x <= y ? 1 : 0;  // LE
}
#endif

// Error-free float arithmetic for arange's double-float: Knuth's two-sum, and Veltkamp's split of
// a float into two halves of 12 significant bits, whose products with other 12-bit numbers are
// exact. (Vulkan lets fma be a multiply and an add, so fma(a, b, -a * b) is no product's error.)
// `precise` keeps the compiler from fusing or reassociating what the error terms depend on.
vec2 two_sum(float a, float b) {
  precise float s = a + b;
  precise float v = s - a;
  precise float e = (a - (s - v)) + (b - v);
  return vec2(s, e);
}
vec2 split12(float v) {
  precise float c = 4097.0 * v;
  precise float h = c - (c - v);
  precise float l = v - h;
  return vec2(h, l);
}

void main() {
  const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x);
  for (int i = int(gl_GlobalInvocationID.x); i < P.numel; i += stride) {
#if defined(FILL)
    if (OUT_TYPE == U8) store_u8(at(P.out_l, i), P.bits);
    else out_u[at(P.out_l, i)] = P.bits;
#elif defined(ARANGE)
    // start + i * step, start and step given as (hi, lo) float pairs: i in three parts of at most
    // 12 bits and step's hi in two, so that the six products are exact, summed with their
    // rounding errors kept; about 44 bits of the double the CPU computes, then rounded once (f32:
    // within an ulp of the CPU's value; i32: exact for whole start and step, while a fractional
    // step may land a value just below a whole number the CPU's double rounds onto).
    const vec2 t = split12(P.range.z);
    const float parts[3] = {float(i & 0x7f000000), float(i & 0x00fff000), float(i & 0x00000fff)};
    float hi = 0.0;
    precise float lo = float(i) * P.range.w + P.range.y;
    for (int k = 0; k < 3; ++k)
      for (int h = 0; h < 2; ++h) {
        precise float product = parts[k] * t[h];
        const vec2 s = two_sum(hi, product);
        hi = s.x;
        lo += s.y;
      }
    const vec2 s2 = two_sum(hi, P.range.x);
    lo += s2.y;
    const int o = P.out_l.offset + i;
    if (OUT_TYPE == I32) {
      // truncate hi + lo toward zero: hi's integer part, corrected by the fraction beside it
      const float whole = trunc(s2.x);
      precise float frac = (s2.x - whole) + lo;
      precise float value = whole + frac;
      const int step = value >= 0.0 ? int(floor(frac)) : int(ceil(frac));
      out_i[o] = wrap_to_i32(whole) + step;
    } else {
      precise float value = s2.x + lo;
      out_f[o] = value;
    }
#elif defined(COPY)
    const int s = at(P.a_l, i), o = at(P.out_l, i);
    if (SRC_TYPE == F32) {
      const float v = src_f[s];
      if (OUT_TYPE == F32) out_f[o] = v;
      else if (OUT_TYPE == I32) out_i[o] = truncate_to_i32(v);
      else store_u8(o, uint(truncate_to_i32(v)));  // wraps mod 256 as mod 2^32 first: the same bits
    } else {
      const int v = SRC_TYPE == I32 ? src_i[s] : int((src_u[s >> 2] >> (uint(s & 3) * 8u)) & 0xffu);
      if (OUT_TYPE == F32) out_f[o] = float(v);
      else if (OUT_TYPE == I32) out_i[o] = v;
      else store_u8(o, uint(v));
    }
#elif defined(UNARY)
    if (IS_I32 != 0) out_i[at(P.out_l, i)] = unary_op_i(x_i[at(P.a_l, i)], int(P.bits));
    else out_f[at(P.out_l, i)] = unary_op(x[at(P.a_l, i)], P.alpha);
#elif defined(UNARY_BACKWARD)
    out_f[at(P.out_l, i)] = unary_backward_op(a[at(P.a_l, i)], b[at(P.b_l, i)], P.alpha);
#else
    if (IS_I32 != 0) out_i[at(P.out_l, i)] = binary_op_i(a_i[at(P.a_l, i)], b_i[at(P.b_l, i)], i);
    else out_f[at(P.out_l, i)] = binary_op(a[at(P.a_l, i)], b[at(P.b_l, i)]);
#endif
  }
}
