// kernel-bench --only softmax (cross_entropy, reduce, dropout, batch_norm, optim): the memory-bound kernels
// against the device's copy bandwidth, a family at a time or all of them.
//   softmax forward (f32): every version of kernels/cuda/softmax.cuh and the production path, on
//     [4096, 32768] (long rows), [8192, 1024] (the warp/block boundary), [32768, 256] (rows a
//     warp holds), [65536, 10] (MNIST's logits: many short rows), and over the middle axis
//     [64, 1024, 256] (a softmax over 1024 channels of an NCHW tensor) and [32, 21, 16384]
//     (few channels, e.g. 21 classes of a segmentation map, over 128 x 128 pixels);
//   cross-entropy forward and backward (f32), every version, on [65536, 10] and [8192, 32000];
//   sum reductions through CudaBackend::reduce over the last axis of [8192, 8192], and over the
//     middle axis of [64, 4096, 256] through reduce.cuh's versions 3 and 4 and CudaBackend;
//   dropout (f32, p = 0.5) in one kernel against the four ops it replaced, on [64, 9216] (the
//     MNIST CNN's first dropout) and [8192, 8192], checked bit for bit against them;
//   batch norm's training forward and backward (f32) on [64, 32, 26, 26] and [128, 64, 56, 56],
//     by each path (one kernel, two passes), checked against the CPU backend;
//   optimizer steps (f32, one multi-tensor launch): Adadelta and Adam on the MNIST CNN's eight
//     parameters (1.2M), SGD on 8 x Linear 4096's sixteen (134M), each with every operand
//     16-byte aligned (the vector path) and 4 bytes off (one element at a time), checked against
//     the CPU backend.
// Each row reports GB/s = (bytes read + bytes written) / time and its share of the copy
// bandwidth (the bench's reference row). Every version is first checked against a double
// precision host computation on sampled rows; a wrong one is reported and not timed.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "apps/bench/kernel_bench.h"
#include "kiln/core/backend.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cuda/batch_norm.cuh"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/reduce.cuh"
#include "kiln/kernels/cuda/softmax.cuh"

namespace kiln::bench {

namespace {

namespace v = kiln::cuda::softmax;

constexpr int kSamples = 64;  // slices checked on the host per version

std::string shape_of(std::initializer_list<int64_t> dims) {
  std::string s = "[";
  for (int64_t d : dims) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + "]";
}

// Records a timed run: GB/s from the bytes moved, with its share of the copy bandwidth.
void record(Bench& bench, const std::string& family, const std::string& version, const std::string& shape,
            double bytes, const std::function<void()>& fn, const std::string& check_note) {
  double ms = bench.time_ms(fn);
  double gbs = bytes / (ms * 1e-3) / 1e9;
  char note[160];
  std::snprintf(note, sizeof note, "%.0f%% of copy; %s", 100.0 * gbs / bench.copy_gbs(), check_note.c_str());
  bench.record({family, version, shape, ms, gbs, "GB/s", false, note});
}

void record_wrong(Bench& bench, const std::string& family, const std::string& version, const std::string& shape,
                  const std::string& why) {
  bench.record({family, version, shape, 0, 0, "GB/s", false, "wrong: " + why});
}

// Compares got against want (host, double) element by element; empty when within tolerance.
std::string compare(const std::vector<double>& want, const float* got, double* max_err) {
  for (size_t i = 0; i < want.size(); ++i) {
    double err = std::abs(static_cast<double>(got[i]) - want[i]);
    *max_err = std::max(*max_err, err / std::max(std::abs(want[i]), 1e-6));
    if (!(err <= 1e-6 + 1e-4 * std::abs(want[i]))) {
      char s[128];
      std::snprintf(s, sizeof s, "element %zu is %g (want %g)", i, static_cast<double>(got[i]), want[i]);
      return s;
    }
  }
  return "";
}

std::string max_err_note(double err) {
  char s[64];
  std::snprintf(s, sizeof s, "max rel err %.1e", err);
  return s;
}

// softmax of [outer, n, inner] over n, one (o, i) slice, in double on the host.
std::vector<double> host_softmax(const std::vector<float>& x, int64_t o, int64_t i, int64_t n, int64_t inner) {
  std::vector<double> out(static_cast<size_t>(n));
  double m = -INFINITY, s = 0;
  auto at = [&](int64_t k) { return static_cast<double>(x[static_cast<size_t>((o * n + k) * inner + i)]); };
  for (int64_t k = 0; k < n; ++k) m = std::max(m, at(k));
  for (int64_t k = 0; k < n; ++k) s += std::exp(at(k) - m);
  for (int64_t k = 0; k < n; ++k) out[static_cast<size_t>(k)] = std::exp(at(k) - m) / s;
  return out;
}

void bench_softmax_shape(Bench& bench, int64_t outer, int64_t n, int64_t inner) {
  cudaStream_t stream = bench.stream();
  const int64_t numel = outer * n * inner;
  const std::string shape = inner == 1 ? shape_of({outer, n}) : shape_of({outer, n, inner}) + " axis 1";
  float* x = bench.random_floats(numel, 7);
  auto* out = static_cast<float*>(bench.device_bytes(static_cast<size_t>(numel) * sizeof(float)));
  // logits of magnitude 10 instead of 1, so that the rows are not nearly uniform
  TensorRef xr;
  xr.buffer = x;
  xr.shape = Shape{numel};
  xr.strides = Strides{1};
  cuda::backend(0).unary(UnaryOp::mul_scalar, xr, xr, 10.0);
  const std::vector<float> hx = to_host(x, numel, stream);

  TensorRef in = xr, result = xr;
  in.shape = result.shape = Shape{outer, n, inner};
  in.strides = result.strides = contiguous_strides(in.shape);
  result.buffer = out;

  struct Version {
    const char* name;
    std::function<void()> run;
  };
  std::vector<Version> versions;
  if (inner == 1) {
    versions.push_back({"1 naive (thread per row)", [&] { v::naive(x, out, outer, n, false, stream); }});
    versions.push_back({"2 warp per row", [&] { v::warp_per_row(x, out, outer, n, false, stream); }});
    versions.push_back({"3 block per row, online", [&] { v::block_per_row(x, out, outer, n, false, stream); }});
    if (n <= v::kSubWarpRowMax)
      versions.push_back({"5 rows per warp (lane groups)", [&] { v::rows_per_warp(x, out, outer, n, false, stream); }});
    versions.push_back({"6 block per row, row in registers", [&] { v::row_in_registers(x, out, outer, n, false, stream); }});
    if (n > v::kSubWarpRowMax && n <= 4096) {  // version 7 holds rows up to 4096 f32 (4 warps of 8 packs a lane)
      versions.push_back({"7 warp per row, row in registers", [&] { v::warps_per_row(x, out, outer, n, false, 1, stream); }});
      versions.push_back({"7 2 warps per row, row in registers", [&] { v::warps_per_row(x, out, outer, n, false, 2, stream); }});
      versions.push_back({"7 4 warps per row, row in registers", [&] { v::warps_per_row(x, out, outer, n, false, 4, stream); }});
    }
  }
  versions.push_back({"4 columns", [&] { v::columns(x, out, outer, n, inner, false, stream); }});
  if (inner > 1) {
    versions.push_back({"8 column packs, two passes", [&] { v::column_packs(x, out, outer, n, inner, false, stream); }});
    versions.push_back({"9 column tile on chip, 4 lanes", [&] { v::column_tiles(x, out, outer, n, inner, false, 4, stream); }});
    versions.push_back({"9 column tile on chip, 8 lanes", [&] { v::column_tiles(x, out, outer, n, inner, false, 8, stream); }});
    versions.push_back({"9 column tile on chip, 16 lanes", [&] { v::column_tiles(x, out, outer, n, inner, false, 16, stream); }});
  }
  versions.push_back({"production (CudaBackend)", [&] { cuda::backend(0).softmax(in, result, false); }});

  std::mt19937 rng(3);
  for (const Version& version : versions) {
    KILN_CUDA_CHECK(cudaMemsetAsync(out, 0xff, static_cast<size_t>(numel) * sizeof(float), stream));  // NaNs
    version.run();
    const std::vector<float> got = to_host(out, numel, stream);
    double err = 0;
    std::string wrong;
    for (int sample = 0; sample < kSamples && wrong.empty(); ++sample) {
      int64_t o = std::uniform_int_distribution<int64_t>(0, outer - 1)(rng);
      int64_t i = std::uniform_int_distribution<int64_t>(0, inner - 1)(rng);
      std::vector<double> want = host_softmax(hx, o, i, n, inner);
      std::vector<float> slice(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) slice[static_cast<size_t>(k)] = got[static_cast<size_t>((o * n + k) * inner + i)];
      wrong = compare(want, slice.data(), &err);
    }
    if (!wrong.empty()) record_wrong(bench, "softmax", version.name, shape, wrong);
    else record(bench, "softmax", version.name, shape, 2.0 * static_cast<double>(numel) * sizeof(float), version.run, max_err_note(err));
  }
}

void bench_cross_entropy_shape(Bench& bench, int64_t rows, int64_t classes) {
  cudaStream_t stream = bench.stream();
  const int64_t numel = rows * classes;
  const std::string shape = shape_of({rows, classes});
  const double s = 0.1;
  float* x = bench.random_floats(numel, 11);
  float* grad_losses = bench.random_floats(rows, 12);
  auto* losses = static_cast<float*>(bench.device_bytes(static_cast<size_t>(rows) * sizeof(float)));
  auto* grad = static_cast<float*>(bench.device_bytes(static_cast<size_t>(numel) * sizeof(float)));
  auto* targets = static_cast<int32_t*>(bench.device_bytes(static_cast<size_t>(rows) * sizeof(int32_t)));
  std::vector<int32_t> ht(static_cast<size_t>(rows));
  std::mt19937 rng(5);
  for (auto& t : ht) t = std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(classes - 1))(rng);
  KILN_CUDA_CHECK(cudaMemcpyAsync(targets, ht.data(), ht.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  const std::vector<float> hx = to_host(x, numel, stream), hg = to_host(grad_losses, rows, stream);

  // the host's loss and gradient row in double, as kernels/cpu/cross_entropy.cpp computes them
  auto host_row = [&](int64_t r, double* loss, std::vector<double>* grad_row) {
    const float* row = hx.data() + r * classes;
    double m = -INFINITY, sum = 0, total = 0;
    for (int64_t c = 0; c < classes; ++c) m = std::max<double>(m, row[c]), total += row[c];
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(row[c] - m);
    const double lse = m + std::log(sum);
    const int32_t t = ht[static_cast<size_t>(r)];
    *loss = (1 - s) * (lse - row[t]) + s * (lse - total / static_cast<double>(classes));
    grad_row->resize(static_cast<size_t>(classes));
    for (int64_t c = 0; c < classes; ++c)
      (*grad_row)[static_cast<size_t>(c)] =
          hg[static_cast<size_t>(r)] * (std::exp(row[c] - lse) - ((c == t ? 1 - s : 0) + s / static_cast<double>(classes)));
  };

  struct Version {
    const char* name;
    bool backward;
    std::function<void()> run;
  };
  const bool short_rows = classes <= v::kSubWarpRowMax;
  std::vector<Version> versions = {
      {"forward, warp per row", false, [&] { v::cross_entropy_warp(x, targets, losses, rows, classes, s, nullptr, stream); }},
      {"forward, block per row", false, [&] { v::cross_entropy_block(x, targets, losses, rows, classes, s, nullptr, stream); }},
      {"backward, warp per row", true,
       [&] { v::cross_entropy_backward_warp(x, targets, grad_losses, grad, rows, classes, s, nullptr, stream); }},
      {"backward, block per row", true,
       [&] { v::cross_entropy_backward_block(x, targets, grad_losses, grad, rows, classes, s, nullptr, stream); }},
      {"backward, row in registers", true,
       [&] { v::cross_entropy_backward_registers(x, targets, grad_losses, grad, rows, classes, s, nullptr, stream); }},
      {"forward, block per row, unrolled", false,
       [&] { v::cross_entropy_block_unrolled(x, targets, losses, rows, classes, s, nullptr, stream); }},
      {"backward, row split registers/shared", true,
       [&] { v::cross_entropy_backward_split(x, targets, grad_losses, grad, rows, classes, s, nullptr, stream); }},
  };
  if (short_rows) {
    versions.push_back({"forward, rows per warp (lane groups)", false,
                        [&] { v::cross_entropy_rows_per_warp(x, targets, losses, rows, classes, s, nullptr, stream); }});
    versions.push_back({"backward, rows per warp (lane groups)", true, [&] {
                          v::cross_entropy_backward_rows_per_warp(x, targets, grad_losses, grad, rows, classes, s,
                                                                  nullptr, stream);
                        }});
  }
  for (const Version& version : versions) {
    float* out = version.backward ? grad : losses;
    const int64_t out_numel = version.backward ? numel : rows;
    KILN_CUDA_CHECK(cudaMemsetAsync(out, 0xff, static_cast<size_t>(out_numel) * sizeof(float), stream));
    version.run();
    const std::vector<float> got = to_host(out, out_numel, stream);
    double err = 0;
    std::string wrong;
    for (int sample = 0; sample < kSamples && wrong.empty(); ++sample) {
      int64_t r = std::uniform_int_distribution<int64_t>(0, rows - 1)(rng);
      double loss = 0;
      std::vector<double> grad_row;
      host_row(r, &loss, &grad_row);
      wrong = version.backward ? compare(grad_row, got.data() + r * classes, &err)
                               : compare({loss}, got.data() + r, &err);
    }
    // bytes: logits, targets and the per-sample value in; losses or the gradient out
    const double bytes = static_cast<double>(numel) * sizeof(float) * (version.backward ? 2 : 1) +
                         static_cast<double>(rows) * (sizeof(int32_t) + sizeof(float));
    if (!wrong.empty()) record_wrong(bench, "cross_entropy", version.name, shape, wrong);
    else record(bench, "cross_entropy", version.name, shape, bytes, version.run, max_err_note(err));
  }
}

void bench_reduce_shape(Bench& bench, int64_t outer, int64_t n, int64_t inner) {
  cudaStream_t stream = bench.stream();
  const int64_t numel = outer * n * inner;
  const std::string shape = inner == 1 ? shape_of({outer, n}) + " axis 1" : shape_of({outer, n, inner}) + " axis 1";
  float* x = bench.random_floats(numel, 13);
  auto* out = static_cast<float*>(bench.device_bytes(static_cast<size_t>(outer * inner) * sizeof(float)));
  TensorRef in, result;
  in.buffer = x;
  in.shape = Shape{outer, n, inner};
  in.strides = contiguous_strides(in.shape);
  result.buffer = out;
  result.shape = Shape{outer, inner};
  result.strides = contiguous_strides(result.shape);
  const std::vector<float> hx = to_host(x, numel, stream);
  struct Version {
    const char* name;
    std::function<void()> run;
  };
  std::vector<Version> versions;
  auto production = [&] { cuda::backend(0).reduce(ReduceOp::sum, in, result); };
  if (inner == 1) {
    const bool chunks = kiln::cuda::reduce::row_chunk(outer, n) < n;  // version 6, else 2
    versions.push_back({chunks ? "sum, chunks of rows (CudaBackend)" : "sum, block per row (CudaBackend)", production});
  } else {
    namespace r = kiln::cuda::reduce;
    const int64_t splits = r::column_packs_splits(outer, n, inner);
    void* workspace = bench.device_bytes(std::max<size_t>(r::column_packs_workspace_bytes<float>(outer, inner, splits), 1));
    versions.push_back({"sum, 3 column tiles", [&] { r::column_tiles<float>(ReduceOp::sum, x, out, nullptr, outer, n, inner, stream); }});
    versions.push_back({"sum, 4 column packs", [&, splits, workspace] {
                          r::column_packs<float>(ReduceOp::sum, x, out, outer, n, inner, splits, workspace, stream);
                        }});
    versions.push_back({"sum, production (CudaBackend)", production});
  }
  const double bytes = static_cast<double>(numel + outer * inner) * sizeof(float);
  for (const Version& version : versions) {
    KILN_CUDA_CHECK(cudaMemsetAsync(out, 0xff, static_cast<size_t>(outer * inner) * sizeof(float), stream));  // NaNs
    version.run();
    const std::vector<float> got = to_host(out, outer * inner, stream);
    std::mt19937 rng(9);
    double err = 0;
    std::string wrong;
    for (int sample = 0; sample < kSamples && wrong.empty(); ++sample) {
      int64_t o = std::uniform_int_distribution<int64_t>(0, outer - 1)(rng);
      int64_t i = std::uniform_int_distribution<int64_t>(0, inner - 1)(rng);
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += hx[static_cast<size_t>((o * n + k) * inner + i)];
      const float g = got[static_cast<size_t>(o * inner + i)];
      err = std::max(err, std::abs(g - sum));
      if (!(std::abs(g - sum) <= 1e-4 + 1e-5 * std::abs(sum))) {
        char s[128];
        std::snprintf(s, sizeof s, "output (%lld, %lld) is %g (want %g)", static_cast<long long>(o),
                      static_cast<long long>(i), static_cast<double>(g), sum);
        wrong = s;
      }
    }
    char note[64];
    std::snprintf(note, sizeof note, "max abs err %.1e", err);
    if (!wrong.empty()) record_wrong(bench, "reduce", version.name, shape, wrong);
    else record(bench, "reduce", version.name, shape, bytes, version.run, note);
  }
}

}  // namespace

// Dropout (p = 0.5, f32) of x [numel]: the one-kernel version (mask drawn and applied in one pass)
// against the ops it replaced (a uniform draw, a compare and two multiplies: four kernels and two
// temporaries), which must give the same bits. GB/s counts x read and out written.
void bench_dropout_shape(Bench& bench, int64_t rows, int64_t cols) {
  cudaStream_t stream = bench.stream();
  const int64_t numel = rows * cols;
  const std::string shape = shape_of({rows, cols});
  float* x = bench.random_floats(numel, 8);
  auto buffer = [&] { return static_cast<float*>(bench.device_bytes(static_cast<size_t>(numel) * sizeof(float))); };
  float* fused = buffer();
  float* composed = buffer();
  float* u = buffer();
  auto ref = [&](const float* data) { return f32_ref(data, Shape{numel}); };
  TensorRef scalar = ref(u);  // p as a broadcast scalar for the compare
  scalar.strides = Strides{0};
  float* p_device = buffer();
  cuda::CudaBackend& backend = cuda::backend(0);
  constexpr double p = 0.5;
  backend.fill(ref(p_device), p);
  scalar.buffer = p_device;
  constexpr uint64_t seed = 5, offset = 0;
  auto one_kernel = [&] { backend.dropout(ref(x), ref(fused), p, {seed, offset}); };
  auto four_kernels = [&] {
    backend.uniform(ref(u), 0.0, 1.0, {seed, offset});
    backend.binary(BinaryOp::gt, ref(u), scalar, ref(u));
    backend.unary(UnaryOp::mul_scalar, ref(u), ref(u), 1.0 / (1.0 - p));
    backend.binary(BinaryOp::mul, ref(x), ref(u), ref(composed));
  };
  one_kernel();
  four_kernels();
  const std::vector<float> a = to_host(fused, numel, stream), b = to_host(composed, numel, stream);
  const double bytes = 2.0 * static_cast<double>(numel) * sizeof(float);
  if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0) {
    record_wrong(bench, "dropout", "one kernel (CudaBackend::dropout)", shape, "differs from the four ops' bits");
    return;
  }
  record(bench, "dropout", "one kernel (CudaBackend::dropout)", shape, bytes, one_kernel, "the four ops' bits");
  record(bench, "dropout", "uniform, compare, two multiplies", shape, bytes, four_kernels, "");
}

// Batch norm in training (f32, eps 1e-5) over x [N, C, H, W]: the forward and the backward by
// each of batch_norm.cuh's paths (a cluster a channel on sm_90; one kernel where the GPU holds x
// at once; two passes), each checked against the CPU backend on the same data. GB/s counts x read and y written (forward),
// x and the gradient read and grad_x written (backward): what a copy of the same tensors moves.
void bench_batch_norm_shape(Bench& bench, int64_t n, int64_t c, int64_t hw) {
  namespace bn = cuda::batch_norm;
  cudaStream_t stream = bench.stream();
  const int64_t numel = n * c * hw * hw, s = hw * hw;
  const std::string shape = shape_of({n, c, hw, hw});
  if (!bench.wants(shape)) return;
  auto device = [&](int64_t count) { return static_cast<float*>(bench.device_bytes(static_cast<size_t>(count) * sizeof(float))); };
  float* x = bench.random_floats(numel, 9);
  float* g = bench.random_floats(numel, 10);
  float *y = device(numel), *gx = device(numel), *mean = device(c), *var = device(c), *invstd = device(c),
        *gw = device(c), *gb = device(c);
  const Shape ncs{n, c, s};
  cuda::CudaBackend& backend = cuda::backend(0);
  // the CPU backend on the same numbers
  std::vector<float> hx = to_host(x, numel, stream), hg = to_host(g, numel, stream);
  std::vector<float> cm(static_cast<size_t>(c)), cv(cm.size()), cr(cm.size()), cy(hx.size()), cgx(hx.size()),
      cgw(cm.size()), cgb(cm.size());
  cpu::CpuBackend& cpu = cpu::backend();
  cpu.batch_norm_train(f32_ref(hx.data(), ncs), {}, {}, 1e-5, f32_ref(cy.data(), ncs), f32_ref(cm.data(), {c}),
                       f32_ref(cv.data(), {c}), f32_ref(cr.data(), {c}));
  cpu.batch_norm_backward(f32_ref(hx.data(), ncs), f32_ref(hg.data(), ncs), f32_ref(cm.data(), {c}),
                          f32_ref(cr.data(), {c}), {}, f32_ref(cgx.data(), ncs), f32_ref(cgw.data(), {c}),
                          f32_ref(cgb.data(), {c}));
  const std::vector<double> want_y(cy.begin(), cy.end()), want_gx(cgx.begin(), cgx.end());
  std::vector<std::pair<bn::Path, const char*>> paths = {{bn::Path::two_passes, "two passes"}};
  const bool forward_fits = bn::one_kernel_fits(backend, f32_ref(x, ncs), false),
             backward_fits = bn::one_kernel_fits(backend, f32_ref(x, ncs), true);
  if (forward_fits) paths.insert(paths.begin(), {bn::Path::one_kernel, "one kernel"});
  if (bn::cluster_available(backend, f32_ref(x, ncs))) paths.insert(paths.begin(), {bn::Path::cluster, "cluster"});
  for (const auto& [path, name] : paths) {
    auto forward = [&, path = path] {
      bn::train(backend, f32_ref(x, ncs), {}, {}, 1e-5, f32_ref(y, ncs), f32_ref(mean, {c}), f32_ref(var, {c}),
                f32_ref(invstd, {c}), path);
    };
    // where one kernel holds x but not (x, g), the backward row is the automatic path's: two passes
    const bn::Path backward_path = path == bn::Path::one_kernel && !backward_fits ? bn::Path::two_passes : path;
    auto backward = [&, backward_path] {
      bn::backward(backend, f32_ref(x, ncs), f32_ref(g, ncs), f32_ref(mean, {c}), f32_ref(invstd, {c}), {},
                   f32_ref(gx, ncs), f32_ref(gw, {c}), f32_ref(gb, {c}), backward_path);
    };
    forward();
    backward();
    const std::string fwd = std::string("forward, ") + name, bwd = std::string("backward, ") + name;
    double err = 0;
    std::string wrong = compare(want_y, to_host(y, numel, stream).data(), &err);
    if (!wrong.empty()) return record_wrong(bench, "batch_norm", fwd, shape, wrong);
    record(bench, "batch_norm", fwd, shape, 2.0 * numel * sizeof(float), forward, max_err_note(err));
    if (backward_path != path) continue;  // its row is two passes' own
    err = 0;
    wrong = compare(want_gx, to_host(gx, numel, stream).data(), &err);
    if (!wrong.empty()) return record_wrong(bench, "batch_norm", bwd, shape, wrong);
    record(bench, "batch_norm", bwd, shape, 3.0 * numel * sizeof(float), backward, max_err_note(err));
  }
}

// One optimizer step (f32) over parameters of `shapes`: `rule` names it, `operands` is how many
// lists it takes (parameter, gradient, state...), `step` runs it on a backend. Timed with every
// operand 16-byte aligned and with every operand 4 bytes off (the path for misaligned views);
// both checked, after one step from the same values, against the CPU backend. GB/s counts each
// operand read once and all but the gradient written once.
using StepFn = std::function<void(Backend&, const std::vector<std::vector<TensorRef>>&)>;
void bench_optim_step(Bench& bench, const std::string& rule, const std::vector<Shape>& shapes, int operands,
                      const StepFn& step) {
  cudaStream_t stream = bench.stream();
  int64_t numel = 0;
  for (const Shape& sh : shapes) numel += sh.numel();
  const std::string shape = std::to_string(shapes.size()) + " tensors, " + std::to_string(numel) + " elements";
  // the starting values, the same for every operand's list on both sides (states from 0.5 up, so
  // that Adadelta's and Adam's square roots see positive numbers)
  std::vector<std::vector<float>> host(static_cast<size_t>(operands));
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> signed_unit(-1, 1), positive(0.5f, 1.5f);
  for (int d = 0; d < operands; ++d) {
    host[static_cast<size_t>(d)].resize(static_cast<size_t>(numel));
    for (float& v : host[static_cast<size_t>(d)]) v = d < 2 ? signed_unit(gen) : positive(gen);
  }
  auto lists_at = [&](std::vector<float*> bases) {  // operand d's tensors, laid end to end from bases[d]
    std::vector<std::vector<TensorRef>> lists(static_cast<size_t>(operands));
    for (int d = 0; d < operands; ++d) {
      int64_t at = 0;
      for (const Shape& sh : shapes) {
        lists[static_cast<size_t>(d)].push_back(f32_ref(bases[static_cast<size_t>(d)] + at, sh));
        at += sh.numel();
      }
    }
    return lists;
  };
  std::vector<std::vector<float>> want = host;
  std::vector<float*> want_bases;
  for (auto& h : want) want_bases.push_back(h.data());
  step(cpu::backend(), lists_at(want_bases));
  const std::vector<double> want_p(want[0].begin(), want[0].end());
  const double bytes = static_cast<double>(2 * operands - 1) * static_cast<double>(numel) * sizeof(float);
  cuda::CudaBackend& backend = cuda::backend(0);
  for (const auto& [offset, version] : {std::pair{0, "vectors (operands 16-byte aligned)"},
                                        std::pair{1, "one element at a time (operands 4 bytes off)"}}) {
    std::vector<float*> bases;
    for (int d = 0; d < operands; ++d) {
      float* b = static_cast<float*>(bench.device_bytes(static_cast<size_t>(numel + 4) * sizeof(float))) + offset;
      KILN_CUDA_CHECK(cudaMemcpyAsync(b, host[static_cast<size_t>(d)].data(),
                                      static_cast<size_t>(numel) * sizeof(float), cudaMemcpyHostToDevice, stream));
      bases.push_back(b);
    }
    const auto lists = lists_at(bases);
    step(backend, lists);
    double err = 0;
    const std::string wrong = compare(want_p, to_host(bases[0], numel, stream).data(), &err);
    if (!wrong.empty()) {
      record_wrong(bench, "optim", rule + ", " + version, shape, wrong);
      continue;
    }
    record(bench, "optim", rule + ", " + version, shape, bytes, [&] { step(backend, lists); }, max_err_note(err));
  }
}

void bench_optim(Bench& bench) {
  std::vector<Shape> cnn = {{32, 1, 3, 3}, {32}, {64, 32, 3, 3}, {64}, {128, 9216}, {128}, {10, 128}, {10}};
  std::vector<Shape> linear;
  for (int i = 0; i < 8; ++i) linear.insert(linear.end(), {Shape{4096, 4096}, Shape{4096}});
  if (bench.quick()) linear.resize(4);
  AdadeltaStep adadelta;
  adadelta.lr = 1.0, adadelta.rho = 0.9, adadelta.eps = 1e-6;
  bench_optim_step(bench, "Adadelta (mnist-train's)", cnn, 4, [&](Backend& b, const auto& l) {
    b.adadelta_step(l[0], l[1], l[2], l[3], adadelta);
  });
  AdamStep adam;
  adam.lr = 1e-3, adam.beta1 = 0.9, adam.beta2 = 0.999, adam.eps = 1e-8;
  adam.bias_correction1 = 0.1, adam.bias_correction2 = 0.001;  // step 1's
  bench_optim_step(bench, "Adam", cnn, 4, [&](Backend& b, const auto& l) {
    b.adam_step(l[0], l[1], l[2], l[3], {}, adam);
  });
  SgdStep sgd;
  sgd.lr = 0.01;
  bench_optim_step(bench, "SGD (dist-bench ddp's)", linear, 2, [&](Backend& b, const auto& l) {
    b.sgd_step(l[0], l[1], {}, sgd);
  });
}

// A conv layer's bias gradient: the sum of grad_y [N, C, H, W] over N, H and W, in the backend's
// two stages (each reduces the middle axis of a contiguous [outer, n, inner]), in either order:
// H and W first (rows of H W, then the columns [N, C]), or N first (the columns [N, C H W], then
// rows of H W). In `dtype` (f32, or bf16 as under autocast, the partials between the stages in f32
// as production keeps them); checked against the host's sums.
void bench_bias_grad_shape(Bench& bench, int64_t n, int64_t c, int64_t hw, DType dtype) {
  cudaStream_t stream = bench.stream();
  cuda::CudaBackend& be = cuda::backend(0);
  const int64_t numel = n * c * hw;
  const std::string shape = shape_of({n, c, hw}) + " axes 0, 2 " + std::string(dtype_name(dtype));
  const size_t size = dtype_size(dtype);
  float* x32 = bench.random_floats(numel, 17);
  void* x = bench.device_bytes(static_cast<size_t>(numel) * size);
  void* mid = bench.device_bytes(static_cast<size_t>(std::max(n * c, c * hw)) * sizeof(float));
  void* out = bench.device_bytes(static_cast<size_t>(c) * size);
  auto ref = [](void* buffer, Shape sh, DType t) {
    TensorRef r;
    r.buffer = buffer;
    r.dtype = t;
    r.strides = contiguous_strides(sh);
    r.shape = std::move(sh);
    return r;
  };
  be.copy(ref(x32, {numel}, DType::f32), ref(x, {numel}, dtype));
  std::vector<double> want(static_cast<size_t>(c), 0.0);
  {
    void* back = bench.device_bytes(static_cast<size_t>(numel) * sizeof(float));
    be.copy(ref(x, {numel}, dtype), ref(back, {numel}, DType::f32));  // the values as stored
    const std::vector<float> hx = to_host(static_cast<float*>(back), numel, stream);
    for (int64_t i = 0; i < numel; ++i) want[static_cast<size_t>(i / hw % c)] += hx[static_cast<size_t>(i)];
  }
  struct Version {
    const char* name;
    std::function<void()> run;
  };
  const Version versions[] = {
      {"bias gradient, H W then N", [&] {
         be.reduce(ReduceOp::sum, ref(x, {n * c, hw, 1}, dtype), ref(mid, {n * c, 1}, DType::f32));
         be.reduce(ReduceOp::sum, ref(mid, {1, n, c}, DType::f32), ref(out, {1, c}, dtype));
       }},
      {"bias gradient, N then H W", [&] {
         be.reduce(ReduceOp::sum, ref(x, {1, n, c * hw}, dtype), ref(mid, {1, c * hw}, DType::f32));
         be.reduce(ReduceOp::sum, ref(mid, {c, hw, 1}, DType::f32), ref(out, {c, 1}, dtype));
       }},
  };
  void* got32 = bench.device_bytes(static_cast<size_t>(c) * sizeof(float));
  for (const Version& version : versions) {
    version.run();
    be.copy(ref(out, {c}, dtype), ref(got32, {c}, DType::f32));
    const std::vector<float> got = to_host(static_cast<float*>(got32), c, stream);
    double err = 0;
    std::string wrong;
    const double tol = dtype == DType::bf16 ? 1.0 / 256 : 1e-4;  // bf16: the sum rounded once (2^-9)
    for (int64_t k = 0; k < c && wrong.empty(); ++k) {
      const double w = want[static_cast<size_t>(k)], g = got[static_cast<size_t>(k)];
      err = std::max(err, std::abs(g - w));
      if (!(std::abs(g - w) <= tol * (1 + std::abs(w))))
        wrong = "channel " + std::to_string(k) + " is " + std::to_string(g) + " (want " + std::to_string(w) + ")";
    }
    char note[64];
    std::snprintf(note, sizeof note, "max abs err %.1e", err);
    const double bytes = static_cast<double>(numel + c) * static_cast<double>(size);
    if (!wrong.empty()) record_wrong(bench, "reduce", version.name, shape, wrong);
    else record(bench, "reduce", version.name, shape, bytes, version.run, note);
  }
}

void bench_softmax(Bench& bench) {
  const bool quick = bench.quick();
  if (bench.runs("softmax")) {
    bench_softmax_shape(bench, quick ? 1024 : 4096, 32768, 1);
    bench_softmax_shape(bench, 8192, 1024, 1);
    bench_softmax_shape(bench, 32768, 256, 1);
    bench_softmax_shape(bench, 65536, 10, 1);
    bench_softmax_shape(bench, quick ? 16 : 64, 1024, 256);
    bench_softmax_shape(bench, quick ? 8 : 32, 21, 16384);
  }
  if (bench.runs("cross_entropy")) {
    bench_cross_entropy_shape(bench, 65536, 10);
    bench_cross_entropy_shape(bench, quick ? 1024 : 8192, 32000);
  }
  if (bench.runs("reduce")) {
    bench_reduce_shape(bench, quick ? 2048 : 8192, 8192, 1);
    bench_reduce_shape(bench, 1, quick ? 1 << 22 : 1 << 24, 1);  // a full reduction (a mean loss): version 6
    bench_reduce_shape(bench, quick ? 16 : 64, 4096, 256);
    // the MNIST CNN's two bias gradients at batch 64 and 512, in f32 and bf16
    for (DType t : {DType::f32, DType::bf16})
      for (int64_t batch : {64, 512}) {
        bench_bias_grad_shape(bench, batch, 32, 26 * 26, t);
        bench_bias_grad_shape(bench, batch, 64, 24 * 24, t);
      }
  }
  if (bench.runs("dropout")) {
    bench_dropout_shape(bench, 64, 9216);  // the MNIST CNN's first dropout, after the pool
    bench_dropout_shape(bench, quick ? 1024 : 8192, 8192);
  }
  if (bench.runs("batch_norm")) {
    bench_batch_norm_shape(bench, 64, 32, 26);  // after the MNIST CNN's first convolution
    bench_batch_norm_shape(bench, quick ? 16 : 128, 64, 56);
    // twice that: more than the GPU's registers, shared memory and L2 hold at once
    if (!quick) bench_batch_norm_shape(bench, 256, 64, 56);
  }
  if (bench.runs("optim")) bench_optim(bench);
}

}  // namespace kiln::bench
