// Every version of the CUDA middle-axis reduction (kernels/cuda/reduce.cuh) on raw device
// buffers against the CPU: column tiles (version 3) and column packs (version 4) at its production
// split count and at others, misaligned rows, and the same bits on a second run; the production
// path over more outer slices than a grid holds, and over long rows cut into chunks (version 6).
// (The public reductions on every backend: test_backend_ops's "reduce" row.)
#include "tests/cuda/cuda_test.h"

#include <type_traits>

#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/reduce.cuh"

using namespace kiln;
using namespace kiln::test;

TEST_CASE("every middle-axis reduction version on raw device buffers matches the CPU, deterministically") {
  namespace r = kiln::cuda::reduce;
  cudaStream_t stream = kiln::cuda::backend(0).stream();
  // [outer, n, inner]: inner a multiple of the 16-byte pack or not, narrower than a warp's packs,
  // outputs few enough that version 4 splits the reduced axis, n not a multiple of anything
  const Shape shapes[] = {{2, 4099, 64}, {3, 1000, 37}, {1, 20000, 8}, {5, 17, 130}, {1, 3001, 2}, {64, 300, 256}};
  for (const Shape& s : shapes) {
    const int64_t outer = s[0], n = s[1], inner = s[2];
    for (DType t : {DType::f32, DType::f64, DType::i32}) {
      // an offset of one element makes every row misaligned for the 16-byte packs
      for (int64_t offset : {0, 1}) {
        Tensor cpu = (uniform(s, -50, 50) * (t == DType::i32 ? 1.0 : 0.1)).to(t);
        Tensor buffer = zeros({s.numel() + offset}, TensorOptions(t).device(kCuda));
        buffer.slice(0, offset, offset + s.numel()).copy_(cpu.reshape({s.numel()}).to(kCuda));
        Tensor x = buffer.slice(0, offset, offset + s.numel()).reshape(s);
        const std::string what = s.str() + " " + std::string(dtype_name(t)) + " offset " + std::to_string(offset);
        const double tol = t == DType::f64 ? 1e-12 : 1e-5;
        auto run = [&](auto fn, DType out_dtype) {
          Tensor out = full({outer, inner}, -7, TensorOptions(out_dtype).device(kCuda));  // every output written
          if (t == DType::f32) fn(x.ref().data<float>(), out);
          else if (t == DType::f64) fn(x.ref().data<double>(), out);
          else fn(x.ref().data<int32_t>(), out);
          return out;
        };
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min, ReduceOp::argmax, ReduceOp::argmin}) {
          if (op == ReduceOp::mean && t == DType::i32) continue;
          const bool arg = op == ReduceOp::argmax || op == ReduceOp::argmin;
          const std::string name = std::string(reduce_op_name(op)) + " " + what;
          Tensor want = op == ReduceOp::sum    ? sum(cpu, {1})
                        : op == ReduceOp::mean ? mean(cpu, {1})
                        : op == ReduceOp::max  ? max(cpu, {1})
                        : op == ReduceOp::min  ? min(cpu, {1})
                        : op == ReduceOp::argmax ? argmax(cpu, 1)
                                                 : argmin(cpu, 1);
          Tensor got3 = run([&](auto* xp, Tensor& out) {
            using T = std::remove_const_t<std::remove_pointer_t<decltype(xp)>>;
            r::column_tiles<T>(op, xp, arg ? nullptr : out.ref().data<T>(), arg ? out.ref().data<int32_t>() : nullptr,
                               outer, n, inner, stream);
          }, arg ? DType::i32 : t);
          check_close(got3, want, arg ? 0 : tol, arg ? 0 : tol, "column_tiles " + name);
          if (arg || op == ReduceOp::max || op == ReduceOp::min) continue;
          // version 4 at its production split count and at others, and twice each: the same bits
          const int64_t production = r::column_packs_splits(outer, n, inner);
          for (int64_t splits : {production, int64_t{1}, int64_t{2}, int64_t{7}}) {
            auto v4 = [&](auto* xp, Tensor& out) {
              using T = std::remove_const_t<std::remove_pointer_t<decltype(xp)>>;
              Tensor workspace = empty({static_cast<int64_t>(r::column_packs_workspace_bytes<T>(outer, inner, splits)) + 1},
                                       TensorOptions(DType::u8).device(kCuda));
              r::column_packs<T>(op, xp, out.ref().data<T>(), outer, n, inner, splits, workspace.ref().data<uint8_t>(), stream);
            };
            Tensor got4 = run(v4, t);
            const std::string name4 = "column_packs (" + std::to_string(splits) + " splits) " + name;
            check_close(got4, want, tol, tol, name4);
            CHECK_MESSAGE(run(v4, t).to_vector<double>() == got4.to_vector<double>(), name4 << ": not deterministic");
          }
          // the production path (version 4 for these shapes), twice
          Tensor got = op == ReduceOp::sum ? sum(x, {1}) : mean(x, {1});
          check_close(got, want, tol, tol, "CudaBackend " + name);
          Tensor again = op == ReduceOp::sum ? sum(x, {1}) : mean(x, {1});
          CHECK_MESSAGE(again.to_vector<double>() == got.to_vector<double>(), "CudaBackend " << name << ": not deterministic");
        }
      }
    }
  }
}

TEST_CASE("the production reductions loop over more outer slices than a grid holds") {
  // [70000, 16, 17]: version 3's grid holds 65535 outer slices (inner and n >= 16 choose it)
  for (DType t : {DType::f32, DType::f64}) {
    Tensor x = uniform({70000, 16, 17}, -1, 1, t), dev = x.to(kCuda);
    const double tol = t == DType::f64 ? 1e-12 : 1e-5;
    check_close(sum(dev, {1}), sum(x, {1}), tol, tol, "sum over the middle of [70000, 16, 17] " + std::string(dtype_name(t)));
    check_close(argmax(dev, 1), argmax(x, 1), 0, 0, "argmax over the middle of [70000, 16, 17] " + std::string(dtype_name(t)));
  }
}

TEST_CASE("long rows, too few to fill the GPU, are cut into chunks: every op matches the CPU, deterministically") {
  // A full reduction (one row of 3M elements, n not a multiple of the chunk), a few long rows, and
  // rows just over what one warp takes. The extremes sit where chunks meet and are tied across
  // chunks (the first index must win), and a NaN, which wins max and min wherever it lies.
  const Shape shapes[] = {{1, 3000001}, {3, 400003}, {7, 2049}};
  for (const Shape& s : shapes) {
    for (DType t : {DType::f32, DType::f64, DType::i32}) {
      Tensor cpu = (uniform(s, -50, 50) * (t == DType::i32 ? 1.0 : 0.1)).to(t);
      const int64_t n = s[1];
      std::vector<double> v = cpu.to(DType::f64).to_vector<double>();
      v[static_cast<size_t>(n / 3)] = 1000, v[static_cast<size_t>(2 * n / 3)] = 1000;  // a tie: the first wins
      v[static_cast<size_t>(n / 2)] = -1000, v[static_cast<size_t>(n - 1)] = -1000;
      cpu = from_vector<double>(v, s).to(t);
      for (bool with_nan : {false, true}) {
        if (with_nan && t == DType::i32) continue;
        Tensor x = cpu;
        if (with_nan) {
          std::vector<double> w = v;
          w[static_cast<size_t>(n - 5)] = std::nan("");
          x = from_vector<double>(w, s).to(t);
        }
        Tensor dev = x.to(kCuda);
        const std::string what = s.str() + " " + std::string(dtype_name(t)) + (with_nan ? " with a NaN" : "");
        const double tol = t == DType::f64 ? 1e-12 : 1e-5;
        if (t != DType::i32) {
          Tensor m = mean(dev, {1});
          check_close(m, mean(x, {1}), tol, tol, "mean " + what);
          if (!with_nan)
            CHECK_MESSAGE(mean(dev, {1}).to_vector<double>() == m.to_vector<double>(),
                          "mean " << what << ": not deterministic");
        }
        check_close(sum(dev, {1}), sum(x, {1}), tol, tol, "sum " + what);
        check_close(max(dev, {1}), max(x, {1}), 0, 0, "max " + what);
        check_close(min(dev, {1}), min(x, {1}), 0, 0, "min " + what);
        check_close(argmax(dev, 1), argmax(x, 1), 0, 0, "argmax " + what);
        check_close(argmin(dev, 1), argmin(x, 1), 0, 0, "argmin " + what);
      }
    }
  }
  // the whole tensor at once, as a mean loss reduces it
  Tensor x = uniform({512, 4096}, -1, 1);
  check_close(mean(x.to(kCuda)), mean(x), 1e-6, 1e-6, "mean of [512, 4096]");
}

TEST_CASE("a bf16 sum or mean over several axes keeps its partials in f32 on the GPU too, rounded once") {
  // The stages of the production path (the last run of axes, then the rest) take f32 out of bf16
  // and bf16 out of f32: every version a stage of a sum may run (rows in warps, in blocks, in
  // chunks; column packs with and without splits; columns).
  const Tensor x = from_vector<float>({1000, 1.5, 8, 0.25, -1000, 0, -8, 0}, {2, 2, 2}).to(DType::bf16);
  CHECK(sum(x.to(kCuda), {0, 2}).to(DType::f32).to_vector<float>() == std::vector<float>{1.5f, 0.25f});
  struct Case {
    Shape shape;
    std::vector<int64_t> axes;
  };
  const Case cases[] = {
      {{64, 32, 26, 26}, {0, 2, 3}},  // the MNIST CNN's conv1 bias gradient: N in column packs, then warp rows
      {{3, 5, 5000}, {0, 2}},         // rows in blocks
      {{2, 3, 40000}, {0, 2}},        // rows in chunks
      {{40, 7, 3, 20}, {1, 3}},       // columns
      {{3, 4, 2000, 16}, {0, 2}},     // column packs, the axis in 15 splits
  };
  for (const Case& c : cases) {
    const Tensor cpu = (uniform(c.shape, -1, 1) * 100.0).to(DType::bf16);
    const Tensor gpu = cpu.to(kCuda);
    for (bool is_mean : {false, true}) {
      const Tensor want = is_mean ? mean(cpu.to(DType::f64), c.axes) : sum(cpu.to(DType::f64), c.axes);
      const Tensor got = is_mean ? mean(gpu, c.axes) : sum(gpu, c.axes);
      REQUIRE(got.dtype() == DType::bf16);
      // one rounding to bf16 (2^-9 relative) of the exact sum, plus the f32 partials' own rounding
      const std::vector<double> w = want.to_vector<double>(), g = got.to(DType::f64).to(Device::cpu()).to_vector<double>();
      REQUIRE(w.size() == g.size());
      for (size_t i = 0; i < w.size(); ++i)
        CHECK_MESSAGE(std::abs(g[i] - w[i]) <= std::abs(w[i]) * (1.0 / 256) + 1e-3,
                      c.shape.str() << (is_mean ? " mean" : " sum") << " output " << i << ": " << g[i] << " for "
                                    << w[i]);
    }
  }
}
