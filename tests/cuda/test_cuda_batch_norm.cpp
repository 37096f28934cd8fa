// Batch norm's three CUDA paths (kernels/cuda/batch_norm.cuh) against the CPU backend: a cluster
// a channel (sm_90: x held in registers and shared memory, the rest read again), one kernel (x in
// registers across a grid-wide barrier) and two passes, on shapes with a plane that is a multiple
// of the 16-byte vector and one that is not, a misaligned start, planes longer than a block's walk
// step, a [N, C] input (S = 1), one image, and channels a cluster holds whole, in part, or in
// registers alone; the same bits on a second run; the statistics and gradients each path writes;
// batch_norm_stats and batch_norm_apply on their own; and the paths inside a captured graph,
// replayed.
// (batch_norm through autograd on every backend: test_backend_ops's "batch_norm" row.)
#include "tests/cuda/cuda_test.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "kiln/kernels/cuda/batch_norm.cuh"

using namespace kiln;
using namespace kiln::test;

namespace {

namespace bn = kiln::cuda::batch_norm;

struct Outputs {
  Tensor y, mean, var, invstd, grad_x, grad_weight, grad_bias;
};

// x [N, C, S] (values far from 0 against their spread), from `offset` elements into its buffer.
Tensor device_input(const Shape& s, DType t, int64_t offset, uint64_t seed) {
  Generator gen(seed);
  Tensor values = uniform(s, 3.0, 5.0, TensorOptions(t), &gen);
  Tensor buffer = zeros({s.numel() + offset}, TensorOptions(t).device(kCuda));
  buffer.slice(0, offset, offset + s.numel()).copy_(values.reshape({s.numel()}).to(kCuda));
  return buffer.slice(0, offset, offset + s.numel()).reshape(s);
}

Outputs run(Backend& backend, const Tensor& x, const Tensor& g, const Tensor& w, const Tensor& b,
            std::optional<bn::Path> path) {
  const int64_t c = x.size(1);
  const TensorOptions o = TensorOptions(x.dtype()).device(x.device());
  Outputs out{empty(x.shape(), o), full({c}, -7, o), full({c}, -7, o), full({c}, -7, o), empty(x.shape(), o),
              full({c}, -7, o), full({c}, -7, o)};
  const TensorRef wr = w.defined() ? w.ref() : TensorRef{}, br = b.defined() ? b.ref() : TensorRef{};
  if (path) {
    auto& cuda = static_cast<kiln::cuda::CudaBackend&>(backend);
    bn::train(cuda, x.ref(), wr, br, 1e-5, out.y.ref(), out.mean.ref(), out.var.ref(), out.invstd.ref(), *path);
    bn::backward(cuda, x.ref(), g.ref(), out.mean.ref(), out.invstd.ref(), wr, out.grad_x.ref(),
                 out.grad_weight.ref(), out.grad_bias.ref(), *path);
  } else {
    backend.batch_norm_train(x.ref(), wr, br, 1e-5, out.y.ref(), out.mean.ref(), out.var.ref(), out.invstd.ref());
    backend.batch_norm_backward(x.ref(), g.ref(), out.mean.ref(), out.invstd.ref(), wr, out.grad_x.ref(),
                                out.grad_weight.ref(), out.grad_bias.ref());
  }
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) { return a.to_vector<double>() == b.to_vector<double>(); }

}  // namespace

TEST_CASE("batch norm's one-kernel and two-pass paths match the CPU, with the same bits on a second run") {
  // [N, C, S]: S a multiple of four or not, a plane longer than 256 vectors, S = 1 ([N, C]), one
  // image, and sizes one kernel cannot hold (two passes only; a cluster holds [8, 2, 2^18]'s
  // channels in part and reads the rest again); more channels than the GPU runs clusters at once
  // (clusters in several waves), small ones and ones whose backward a cluster holds in part
  // ([32, 24, 8192])
  const std::vector<Shape> shapes = {{64, 32, 676}, {16, 5, 33},     {3, 7, 2000},  {200, 12, 1},
                                     {1, 3, 4096},  {9, 4, 1024},    {64, 8, 4096}, {8, 2, 1 << 18},
                                     {3, 500, 33},  {32, 24, 8192}};
  Backend& cuda = backend_for(kCuda);
  for (const Shape& s : shapes)
    for (DType t : {DType::f32, DType::f64})
      for (int64_t offset : {0, 1})
        for (bool affine : {true, false}) {
          const std::string what = s.str() + " " + std::string(dtype_name(t)) + " offset " + std::to_string(offset) +
                                   (affine ? " affine" : "");
          CAPTURE(what);
          const int64_t c = s[1];
          Tensor x = device_input(s, t, offset, 3), g = device_input(s, t, offset, 4) - 4.0;
          Tensor w = affine ? uniform({c}, 0.5, 1.5, TensorOptions(t)).to(kCuda) : Tensor();
          Tensor b = affine ? uniform({c}, -1.0, 1.0, TensorOptions(t)).to(kCuda) : Tensor();
          const Tensor xc = x.to(Device::cpu()), gc = g.to(Device::cpu());
          const Outputs want = run(backend_for(Device::cpu()), xc, gc, affine ? w.to(Device::cpu()) : Tensor(),
                                   affine ? b.to(Device::cpu()) : Tensor(), std::nullopt);
          std::vector<bn::Path> paths = {bn::Path::two_passes, bn::Path::automatic};
          auto& cb = static_cast<kiln::cuda::CudaBackend&>(cuda);
          // the forward holds x, the backward x and g: where one kernel holds both, it runs both
          if (bn::one_kernel_fits(cb, x.ref(), true)) paths.push_back(bn::Path::one_kernel);
          if (!bn::one_kernel_fits(cb, x.ref(), false)) CHECK_THROWS_AS(run(cuda, x, g, w, b, bn::Path::one_kernel), ValueError);
          if (bn::cluster_available(cb, x.ref())) paths.push_back(bn::Path::cluster);
          else CHECK_THROWS_AS(run(cuda, x, g, w, b, bn::Path::cluster), ValueError);
          for (bn::Path path : paths) {
            CAPTURE(static_cast<int>(path));
            const Outputs got = run(cuda, x, g, w, b, path);
            const double rtol = t == DType::f64 ? 1e-10 : 1e-4, atol = t == DType::f64 ? 1e-10 : 1e-4;
            const double sums = atol * std::sqrt(static_cast<double>(s[0] * s[2]));
            check_close(got.y, want.y, rtol, atol, "y " + what);
            check_close(got.mean, want.mean, rtol, atol, "mean " + what);
            check_close(got.var, want.var, rtol, atol, "var " + what);
            check_close(got.invstd, want.invstd, rtol, atol, "invstd " + what);
            check_close(got.grad_x, want.grad_x, rtol, atol, "grad_x " + what);
            check_close(got.grad_weight, want.grad_weight, rtol, sums, "grad_weight " + what);
            check_close(got.grad_bias, want.grad_bias, rtol, sums, "grad_bias " + what);
            // the statistics alone (batch_norm_stats) and the evaluation form (batch_norm_apply
            // with given statistics), which the CPU's and Vulkan's training path composes
            if (path == bn::Path::automatic) {
              Tensor m = full({c}, -7, TensorOptions(t).device(kCuda)), v = full({c}, -7, TensorOptions(t).device(kCuda));
              cuda.batch_norm_stats(x.ref(), m.ref(), v.ref());
              check_close(m, want.mean, rtol, atol, "batch_norm_stats mean " + what);
              check_close(v, want.var, rtol, atol, "batch_norm_stats var " + what);
              Tensor y = empty(s, TensorOptions(t).device(kCuda));
              cuda.batch_norm_apply(x.ref(), got.mean.ref(), got.invstd.ref(), w.defined() ? w.ref() : TensorRef{},
                                    b.defined() ? b.ref() : TensorRef{}, y.ref());
              check_close(y, want.y, rtol, atol, "batch_norm_apply " + what);
            }
            const Outputs again = run(cuda, x, g, w, b, path);
            CHECK(same_bits(again.y, got.y));
            CHECK(same_bits(again.grad_x, got.grad_x));
            CHECK(same_bits(again.grad_weight, got.grad_weight));
          }
        }
}

TEST_CASE("batch norm's paths inside a captured graph: each replay computes the eager bits") {
  auto& cuda = static_cast<kiln::cuda::CudaBackend&>(backend_for(kCuda));
  for (const Shape& s : {Shape{64, 32, 676}, Shape{64, 8, 4096}}) {
    CAPTURE(s.str());
    Tensor x = device_input(s, DType::f32, 0, 5), g = device_input(s, DType::f32, 0, 6);
    std::vector<bn::Path> paths = {bn::Path::automatic, bn::Path::two_passes};
    if (bn::cluster_available(cuda, x.ref())) paths.push_back(bn::Path::cluster);
    for (bn::Path path : paths) {
      const Outputs eager = run(cuda, x, g, Tensor(), Tensor(), path);
      Outputs captured;
      Graph graph = capture(kCuda, [&] { captured = run(cuda, x, g, Tensor(), Tensor(), path); });
      for (int replay = 0; replay < 2; ++replay) {
        graph.replay();
        CHECK(same_bits(captured.y, eager.y));
        CHECK(same_bits(captured.grad_x, eager.grad_x));
        CHECK(same_bits(captured.invstd, eager.invstd));
      }
    }
  }
}
