// Every version of the CUDA middle-axis reduction (kernels/cuda/reduce.cuh) on raw device
// buffers against the CPU: column tiles (version 3) and column packs (version 4) at its production
// split count and at others, misaligned rows, and the same bits on a second run; and the
// production path over more outer slices than a grid holds. (The public reductions on every
// backend: test_backend_ops's "reduce" row.)
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
