// Every version of the CUDA softmax family (kernels/cuda/softmax.cuh) on raw device buffers
// against the CPU: softmax and log_softmax by rows (in place too) and by columns, at the
// thresholds between versions, misaligned rows, the special values (-inf, NaN, +inf, logits of
// 1e3); and every cross-entropy version, forward and backward, deterministically. (softmax and
// cross_entropy on every backend: test_backend_ops's rows.)
#include "tests/cuda/cuda_test.h"

#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/softmax.cuh"

#include <algorithm>
#include <iterator>
#include <utility>

using namespace kiln;
using namespace kiln::test;

namespace {

// Tolerances against the CPU's double accumulation (softmax.cu: f32 accumulates in float).
double rtol(DType t) { return t == DType::f32 ? 1e-5 : 1e-12; }
double atol(DType t) { return t == DType::f32 ? 1e-6 : 1e-13; }

std::string name_of(const char* op, const Shape& s, DType t, double extra = -1) {
  std::string name = std::string(op) + " " + s.str() + " " + std::string(dtype_name(t));
  if (extra >= 0) name += " (" + std::to_string(extra) + ")";
  return name;
}

}  // namespace

TEST_CASE("softmax versions 7 to 9 (rows in registers, column tiles) give the CPU's special values") {
  namespace v = kiln::cuda::softmax;
  cudaStream_t stream = kiln::cuda::backend(0).stream();
  // 1024 and 3000: version 7 with 1 and 4 warps (3000 f64: version 6); 1024 and longer: columns
  // that hold shared slots as well as registers; 5000 f64 at 16 lanes: too long, version 8
  for (int64_t n : {3, 40, 1024, 3000, 5000}) {
    const Tensor special = softmax_special_rows(n);  // [6, n]
    for (DType t : {DType::f32, DType::f64}) {
      for (bool log : {false, true}) {
        // the slices as rows [6, n], and as columns of [1, n, 6] (and [2, n, 3]: two outer indices)
        Tensor rows = special.to(t);
        Tensor columns = rows.transpose(0, 1).contiguous().reshape({1, n, 6});
        Tensor columns2 = special.reshape({2, 3, n}).to(t).transpose(1, 2).contiguous();
        auto check = [&](const Tensor& cpu, const std::string& version, auto fn) {
          Tensor want = log ? log_softmax(cpu, 1) : softmax(cpu, 1);  // rows [6, n], columns [outer, n, inner]
          Tensor x = cpu.to(kCuda), out = zeros(cpu.shape(), TensorOptions(t).device(kCuda));
          if (t == DType::f32) fn(x.ref().data<float>(), out.ref().data<float>());
          else fn(x.ref().data<double>(), out.ref().data<double>());
          check_close(out, want, rtol(t), log ? atol(t) * 10 : atol(t) * 1e-1,
                      name_of(version.c_str(), cpu.shape(), t) + (log ? " log" : "") + " special");
        };
        for (int warps : {1, 2, 4})
          check(rows, "warps_per_row " + std::to_string(warps),
                [&](auto* a, auto* b) { v::warps_per_row(a, b, int64_t{6}, n, log, warps, stream); });
        for (const Tensor& c : {columns, columns2}) {
          const int64_t outer = c.shape()[0], inner = c.shape()[2];
          check(c, "column_packs", [&](auto* a, auto* b) { v::column_packs(a, b, outer, n, inner, log, stream); });
          for (int lanes : {1, 4, 16})
            check(c, "column_tiles " + std::to_string(lanes),
                  [&](auto* a, auto* b) { v::column_tiles(a, b, outer, n, inner, log, lanes, stream); });
        }
      }
    }
  }
}

TEST_CASE("every softmax and cross-entropy version on raw device buffers matches the CPU") {
  namespace v = kiln::cuda::softmax;
  cudaStream_t stream = kiln::cuda::backend(0).stream();
  std::mt19937 rng(13);
  // after the random lengths, the register version's limits (softmax.cuh): aligned rows up to
  // 32768 f32 and 8192 f64, misaligned up to 8192 f32 and 4096 f64; beyond, version 3. The
  // backward's split version: 2 rows per SM up to 43008 f32 aligned, 1 beyond; 50000 fits in f32
  // (aligned or not) and falls back to the block version in f64, as 32772 does in f64
  static const int64_t long_lengths[] = {4096, 4097, 8192, 8193, 16384, 16388, 32768, 32772, 50000};
  for (int trial = 0; trial < 50 + static_cast<int>(std::size(long_lengths)); ++trial) {
    const int64_t n = trial < 50 ? random_length(rng) : long_lengths[trial - 50];
    int64_t rows = std::uniform_int_distribution<int64_t>(1, 200)(rng);
    rows = std::max<int64_t>(1, std::min<int64_t>(rows, 200000 / n));
    const bool log = trial % 2 == 1;
    const double scale = random_scale(rng);
    // an offset of one element makes the rows misaligned for the 16-byte packs on odd trials
    const int64_t offset = trial % 4 >= 2 ? 1 : 0;
    for (DType t : {DType::f32, DType::f64}) {
      Tensor cpu = uniform({rows, n}, -scale, scale, t);
      Tensor want = log ? log_softmax(cpu, 1) : softmax(cpu, 1);
      Tensor buffer = zeros({rows * n + offset}, TensorOptions(t).device(kCuda));
      buffer.slice(0, offset, offset + rows * n).copy_(cpu.reshape({rows * n}).to(kCuda));
      Tensor x = buffer.slice(0, offset, offset + rows * n).reshape({rows, n});
      auto run = [&](const char* version, auto fn) {
        Tensor out = zeros({rows, n}, TensorOptions(t).device(kCuda));
        if (t == DType::f32) fn(x.ref().data<float>(), out.ref().data<float>());
        else fn(x.ref().data<double>(), out.ref().data<double>());
        check_close(out, want, rtol(t), log ? atol(t) * 10 : atol(t) * 1e-1,
                    name_of(version, {rows, n}, t, static_cast<double>(offset)) + (log ? " log" : ""));
      };
      run("naive", [&](auto* a, auto* b) { v::naive(a, b, rows, n, log, stream); });
      run("warp_per_row", [&](auto* a, auto* b) { v::warp_per_row(a, b, rows, n, log, stream); });
      run("block_per_row", [&](auto* a, auto* b) { v::block_per_row(a, b, rows, n, log, stream); });
      run("rows_per_warp", [&](auto* a, auto* b) { v::rows_per_warp(a, b, rows, n, log, stream); });
      run("row_in_registers", [&](auto* a, auto* b) { v::row_in_registers(a, b, rows, n, log, stream); });
      // in place (out == x, as softmax.cuh allows): the row is read before it is written
      run("row_in_registers in place", [&](auto* a, auto* b) {
        KILN_CUDA_CHECK(cudaMemcpyAsync(b, a, static_cast<size_t>(rows * n) * sizeof(*a), cudaMemcpyDeviceToDevice, stream));
        v::row_in_registers(b, b, rows, n, log, stream);
      });
      run("rows_per_warp in place", [&](auto* a, auto* b) {
        KILN_CUDA_CHECK(cudaMemcpyAsync(b, a, static_cast<size_t>(rows * n) * sizeof(*a), cudaMemcpyDeviceToDevice, stream));
        v::rows_per_warp(b, b, rows, n, log, stream);
      });
      run("columns (inner 1)", [&](auto* a, auto* b) { v::columns(a, b, rows, n, int64_t{1}, log, stream); });
      run("best", [&](auto* a, auto* b) { v::best(a, b, rows, n, int64_t{1}, log, stream); });
      // version 7 with 1, 2 and 4 warps a row (more where the row needs them; version 6 beyond)
      for (int warps : {1, 2, 4}) {
        const std::string name = "warps_per_row " + std::to_string(warps);
        run(name.c_str(), [&](auto* a, auto* b) { v::warps_per_row(a, b, rows, n, log, warps, stream); });
        run((name + " in place").c_str(), [&](auto* a, auto* b) {
          KILN_CUDA_CHECK(cudaMemcpyAsync(b, a, static_cast<size_t>(rows * n) * sizeof(*a), cudaMemcpyDeviceToDevice, stream));
          v::warps_per_row(b, b, rows, n, log, warps, stream);
        });
      }

      // the column versions on [outer, n, inner], against the CPU over the middle axis: inner of
      // whole 16-byte packs or not, and, on odd trials, the same one-element offset
      static const int64_t inners[] = {2, 3, 4, 5, 8, 16, 37, 64, 100, 260};
      const int64_t outer = std::uniform_int_distribution<int64_t>(1, 3)(rng);
      const int64_t inner = std::min(inners[std::uniform_int_distribution<size_t>(0, std::size(inners) - 1)(rng)],
                                     std::max<int64_t>(2, 200000 / (outer * n)));
      const int64_t numel3 = outer * n * inner;
      Tensor cpu3 = uniform({outer, n, inner}, -scale, scale, t);
      Tensor want3 = log ? log_softmax(cpu3, 1) : softmax(cpu3, 1);
      Tensor buffer3 = zeros({numel3 + offset}, TensorOptions(t).device(kCuda));
      buffer3.slice(0, offset, offset + numel3).copy_(cpu3.reshape({numel3}).to(kCuda));
      Tensor x3 = buffer3.slice(0, offset, offset + numel3).reshape({outer, n, inner});
      auto run3 = [&](const std::string& version, auto fn) {
        Tensor out3 = zeros({outer, n, inner}, TensorOptions(t).device(kCuda));
        if (t == DType::f32) fn(x3.ref().data<float>(), out3.ref().data<float>());
        else fn(x3.ref().data<double>(), out3.ref().data<double>());
        check_close(out3, want3, rtol(t), log ? atol(t) * 10 : atol(t) * 1e-1,
                    name_of(version.c_str(), cpu3.shape(), t, static_cast<double>(offset)) + (log ? " log" : ""));
      };
      run3("columns", [&](auto* a, auto* b) { v::columns(a, b, outer, n, inner, log, stream); });
      run3("column_packs", [&](auto* a, auto* b) { v::column_packs(a, b, outer, n, inner, log, stream); });
      for (int lanes : {1, 4, 8, 16, 32}) {
        const std::string name = "column_tiles " + std::to_string(lanes);
        run3(name, [&](auto* a, auto* b) { v::column_tiles(a, b, outer, n, inner, log, lanes, stream); });
        run3(name + " in place", [&](auto* a, auto* b) {
          KILN_CUDA_CHECK(cudaMemcpyAsync(b, a, static_cast<size_t>(numel3) * sizeof(*a), cudaMemcpyDeviceToDevice, stream));
          v::column_tiles(b, b, outer, n, inner, log, lanes, stream);
        });
      }
      run3("best", [&](auto* a, auto* b) { v::best(a, b, outer, n, inner, log, stream); });

      // cross-entropy, both versions, forward and backward, over the same rows as logits
      const double smoothing = trial % 3 == 0 ? 0.1 : 0.0;
      Tensor targets = random_targets(rng, rows, n);
      Tensor gpu_targets = targets.to(kCuda);
      Tensor g = uniform({rows}, -1, 1, t);
      Tensor gpu_g = g.to(kCuda);
      Tensor want_loss = cross_entropy(cpu, targets, Reduction::none, smoothing);
      Tensor want_grad = cross_entropy_backward(cpu, targets, g, smoothing);
      const int32_t* tp = gpu_targets.ref().data<int32_t>();
      auto run_ce = [&](const char* version, auto forward, auto backward) {
        auto once = [&]() -> std::pair<Tensor, Tensor> {
          Tensor loss = zeros({rows}, TensorOptions(t).device(kCuda));
          Tensor grad = zeros({rows, n}, TensorOptions(t).device(kCuda));
          if (t == DType::f32) {
            forward(x.ref().data<float>(), loss.ref().data<float>());
            backward(x.ref().data<float>(), gpu_g.ref().data<float>(), grad.ref().data<float>());
          } else {
            forward(x.ref().data<double>(), loss.ref().data<double>());
            backward(x.ref().data<double>(), gpu_g.ref().data<double>(), grad.ref().data<double>());
          }
          return std::pair{loss, grad};
        };
        const std::pair<Tensor, Tensor> first = once();
        const std::string name = name_of(version, {rows, n}, t, smoothing);
        check_close(first.first, want_loss, rtol(t), atol(t) * 10, name);
        check_close(first.second, want_grad, rtol(t), atol(t), name + " backward");
        // no atomics: a second run gives the same bits
        const std::pair<Tensor, Tensor> second = once();
        const std::vector<double> loss = first.first.to_vector<double>(), grad = first.second.to_vector<double>();
        CHECK_MESSAGE(second.first.to_vector<double>() == loss, name << ": not deterministic");
        CHECK_MESSAGE(second.second.to_vector<double>() == grad, name << " backward: not deterministic");
      };
      run_ce("cross_entropy_warp",
             [&](auto* a, auto* l) { v::cross_entropy_warp(a, tp, l, rows, n, smoothing, nullptr, stream); },
             [&](auto* a, auto* gl, auto* gx) { v::cross_entropy_backward_warp(a, tp, gl, gx, rows, n, smoothing, nullptr, stream); });
      run_ce("cross_entropy_block",
             [&](auto* a, auto* l) { v::cross_entropy_block(a, tp, l, rows, n, smoothing, nullptr, stream); },
             [&](auto* a, auto* gl, auto* gx) { v::cross_entropy_backward_block(a, tp, gl, gx, rows, n, smoothing, nullptr, stream); });
      run_ce("cross_entropy_rows_per_warp",
             [&](auto* a, auto* l) { v::cross_entropy_rows_per_warp(a, tp, l, rows, n, smoothing, nullptr, stream); },
             [&](auto* a, auto* gl, auto* gx) {
               v::cross_entropy_backward_rows_per_warp(a, tp, gl, gx, rows, n, smoothing, nullptr, stream);
             });
      run_ce("cross_entropy_backward_registers",
             [&](auto* a, auto* l) { v::cross_entropy_block(a, tp, l, rows, n, smoothing, nullptr, stream); },
             [&](auto* a, auto* gl, auto* gx) {
               v::cross_entropy_backward_registers(a, tp, gl, gx, rows, n, smoothing, nullptr, stream);
             });
      run_ce("cross_entropy_block_unrolled / backward_split",
             [&](auto* a, auto* l) { v::cross_entropy_block_unrolled(a, tp, l, rows, n, smoothing, nullptr, stream); },
             [&](auto* a, auto* gl, auto* gx) {
               v::cross_entropy_backward_split(a, tp, gl, gx, rows, n, smoothing, nullptr, stream);
             });
    }
  }
}
