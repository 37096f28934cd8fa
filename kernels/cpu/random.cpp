// Random fills of a contiguous out [n] from kiln's Philox4x32-10 stream (core/philox.h):
//   uniform: out[i] = low + (high - low) * u_i
//   normal:  Box-Muller on pairs (2j, 2j + 1): r = sqrt(-2 ln u_2j),
//            out[2j] = mean + stddev * r cos(2 pi u_2j+1), out[2j+1] = mean + stddev * r sin(...)
// with u_i = philox::to_unit(philox::word(seed, offset, i)). Elements 4b .. 4b + 3 are the four
// words of Philox block b, so the loops run over blocks: one Philox call per four elements (not
// one per element, as calling philox::word for each would cost), and a pair never straddles two
// blocks. Each block depends only on its counter, so the blocks split over threads freely and the
// numbers do not depend on the thread count. The affine map and Box-Muller run in double and are
// rounded once to out's dtype, so f32 and f64 draws agree up to that rounding.
//   dropout: out[i] = x[i] * (T(u_i) > T(p) ? T(1 / (1 - p)) : 0), T the dtype: the bits of
//            x * (uniform(0, 1) > p) * (1 / (1 - p)) made by those ops, in one pass.
#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <type_traits>

#include "kiln/core/error.h"
#include "kiln/core/philox.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/parallel.h"

namespace kiln::cpu {

namespace {

constexpr int64_t kGrain = 4 * 1024;  // blocks per parallel chunk (a block is ~40 multiplies)

// The four uniforms of block b of the draw at (seed, offset): exactly philox::word(seed, offset,
// 4b + r) for r in 0..3, computed with one Philox call.
std::array<double, 4> block_units(uint64_t seed, uint64_t offset, int64_t b) {
  const philox::Block words = philox::block(seed, offset + static_cast<uint64_t>(b));
  std::array<double, 4> u;
  for (size_t r = 0; r < 4; ++r) u[r] = philox::to_unit(words[r]);
  return u;
}

// Runs fn(b, u) for every Philox block b of a draw of n numbers at (seed, offset), u the block's
// four uniforms (elements 4b .. 4b + 3), the blocks split over threads.
template <class Fn>
void for_each_block(int64_t n, uint64_t seed, uint64_t offset, Fn fn) {
  parallel_for((n + 3) / 4, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) fn(b, block_units(seed, offset, b));
  });
}

// Runs fn with the C++ type of out's dtype; random draws are floating-point only.
template <class Fn>
void visit_floating(const TensorRef& out, const char* op, Fn fn) {
  visit_arithmetic(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) fn(T{});
    else KILN_FAIL(DTypeError, "cpu backend: ", op, " does not take ", out.dtype,
                   " (random draws are f32 or f64)");
  });
}

}  // namespace

void CpuBackend::uniform(const TensorRef& out, double low, double high, const philox::Key& key) {
  const philox::Key at = key.resolve();
  const uint64_t seed = at.seed, offset = at.offset;
  visit_floating(out, "uniform", [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    const int64_t n = out.numel();
    for_each_block(n, seed, offset, [&](int64_t b, const std::array<double, 4>& u) {
      for (int64_t r = 0; r < 4 && 4 * b + r < n; ++r) o[4 * b + r] = static_cast<T>(low + (high - low) * u[r]);
    });
  });
}

void CpuBackend::normal(const TensorRef& out, double mean, double stddev, const philox::Key& key) {
  const philox::Key at = key.resolve();
  const uint64_t seed = at.seed, offset = at.offset;
  visit_floating(out, "normal", [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    const int64_t n = out.numel();
    for_each_block(n, seed, offset, [&](int64_t b, const std::array<double, 4>& u) {
      // The block's two pairs; an odd n drops the last pair's sine.
      for (int64_t pair = 0; pair < 2; ++pair) {
        const int64_t i = 4 * b + 2 * pair;
        if (i >= n) break;
        const double r = std::sqrt(-2.0 * std::log(u[2 * pair]));
        const double theta = 2.0 * std::numbers::pi * u[2 * pair + 1];
        o[i] = static_cast<T>(mean + stddev * r * std::cos(theta));
        if (i + 1 < n) o[i + 1] = static_cast<T>(mean + stddev * r * std::sin(theta));
      }
    });
  });
}

void CpuBackend::dropout(const TensorRef& x, const TensorRef& out, double p, const philox::Key& key) {
  const philox::Key at = key.resolve();
  const uint64_t seed = at.seed, offset = at.offset;
  KILN_CHECK(x.is_contiguous() && out.is_contiguous() && x.dtype == out.dtype && x.numel() == out.numel(),
             ValueError, "cpu backend: dropout takes contiguous x and out of one dtype and size");
  visit_floating(out, "dropout", [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.data<T>();
    T* o = out.data<T>();
    const T threshold = static_cast<T>(p), scale = static_cast<T>(1.0 / (1.0 - p));
    const int64_t n = out.numel();
    for_each_block(n, seed, offset, [&](int64_t b, const std::array<double, 4>& u) {
      for (int64_t r = 0; r < 4 && 4 * b + r < n; ++r) {
        const int64_t i = 4 * b + r;
        o[i] = xs[i] * (static_cast<T>(u[static_cast<size_t>(r)]) > threshold ? scale : T(0));
      }
    });
  });
}

}  // namespace kiln::cpu
