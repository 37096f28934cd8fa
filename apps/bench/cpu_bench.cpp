// cpu-bench: times the CPU backend's heavy kernels through the kiln::Backend interface itself
// (kiln::cpu::backend(), raw buffers and TensorRefs), so the figures are the kernels' own, with
// no tensor or autograd layer on top:
//   - f32 matmul 1024 x 1024 x 1024, plain and with either operand transposed (GFLOP/s);
//   - the MNIST CNN's conv layers at batch 64, forward, backward-input and backward-weight:
//       conv1 x [64, 1, 28, 28]  w [32, 1, 3, 3]  -> y [64, 32, 26, 26]
//       conv2 x [64, 32, 26, 26] w [64, 32, 3, 3] -> y [64, 64, 24, 24]
// Each figure is the median of several runs after warm-up runs.
//
//   cpu-bench [--threads N] [--json FILE] [--quick]
//
// scripts/bench_cpu_torch.py times the same operations with PyTorch and prints the same table.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "apps/mnist/cli.h"
#include "kiln/core/backend.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/parallel.h"

namespace {

using kiln::Shape;
using kiln::TensorRef;

struct Result {
  std::string name;
  std::string shape;
  double ms = 0;
  double gflops = 0;
};

// A buffer on the CPU backend filled with uniform values in [-1, 1).
class Buffer {
 public:
  explicit Buffer(Shape shape) : shape_(std::move(shape)) {
    auto& backend = kiln::cpu::backend();
    bytes_ = static_cast<size_t>(shape_.numel()) * sizeof(float);
    data_ = backend.allocate(bytes_);
    std::vector<float> host(static_cast<size_t>(shape_.numel()));
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (float& v : host) v = uniform(rng);
    backend.write(data_, 0, host.data(), bytes_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { kiln::cpu::backend().deallocate(data_); }

  TensorRef ref() const {
    TensorRef r;
    r.buffer = data_;
    r.shape = shape_;
    r.strides = kiln::contiguous_strides(shape_);
    r.dtype = kiln::DType::f32;
    return r;
  }

 private:
  Shape shape_;
  size_t bytes_ = 0;
  void* data_ = nullptr;
};

bool g_quick = false;  // --quick: a smoke run, 1 warm-up and 3 timed runs a figure

// Median wall time of fn in milliseconds: 3 warm-up runs, then at least 7 timed runs, more until
// a second has passed (at most 1000).
double median_ms(const std::function<void()>& fn) {
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < (g_quick ? 1 : 3); ++i) fn();
  std::vector<double> times;
  auto start = clock::now();
  while (g_quick ? times.size() < 3
                 : times.size() < 7 || (clock::now() - start < std::chrono::seconds(1) && times.size() < 1000)) {
    auto t0 = clock::now();
    fn();
    kiln::cpu::backend().synchronize();
    times.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

Result bench_matmul(const char* name, int64_t size, bool trans_a, bool trans_b) {
  Buffer a({size, size}), b({size, size}), c({size, size});
  kiln::MatmulParams p;
  p.m = p.n = p.k = size;
  p.trans_a = trans_a;
  p.trans_b = trans_b;
  p.lda = p.ldb = size;
  double ms = median_ms([&] { kiln::cpu::backend().matmul(a.ref(), b.ref(), c.ref(), p, kiln::Epilogue{}); });
  double flops = 2.0 * static_cast<double>(size * size * size);
  std::string shape = std::to_string(size) + "^3";
  return {name, shape, ms, flops / (ms * 1e6)};
}

// Appends forward, backward-input and backward-weight of one conv layer (stride 1, no padding).
void bench_conv(const std::string& layer, int64_t n, int64_t c, int64_t hw, int64_t o, int64_t k,
                std::vector<Result>& results) {
  const int64_t out = hw - k + 1;
  Buffer x({n, c, hw, hw}), w({o, c, k, k}), bias({o}), y({n, o, out, out});
  Buffer gy({n, o, out, out}), gx({n, c, hw, hw}), gw({o, c, k, k});
  kiln::Conv2dParams p;
  auto& be = kiln::cpu::backend();
  const double flops = 2.0 * static_cast<double>(n * o * out * out * c * k * k);
  const std::string shape = "x[" + std::to_string(n) + "," + std::to_string(c) + "," +
                            std::to_string(hw) + "," + std::to_string(hw) + "] w[" +
                            std::to_string(o) + "," + std::to_string(c) + "," + std::to_string(k) +
                            "," + std::to_string(k) + "]";
  auto add = [&](const char* what, const std::function<void()>& fn) {
    double ms = median_ms(fn);
    results.push_back({layer + " " + what, shape, ms, flops / (ms * 1e6)});
  };
  add("forward", [&] { be.conv2d(x.ref(), w.ref(), y.ref(), p, kiln::Epilogue{bias.ref()}); });
  add("backward-input", [&] { be.conv2d_backward_input(gy.ref(), w.ref(), gx.ref(), p); });
  add("backward-weight", [&] { be.conv2d_backward_weight(x.ref(), gy.ref(), gw.ref(), p); });
}

// --json: {"program", "kiln", "revision", "backend", "threads", "results": [{name, shape, ms, gflops}]}.
void write_json(const std::string& path, int threads, const std::vector<Result>& results) {
  nlohmann::ordered_json out = kiln::apps::build_info("cpu-bench");
  out["backend"] = "kiln-cpu";
  out["threads"] = threads;
  out["results"] = nlohmann::ordered_json::array();
  for (const Result& r : results)
    out["results"].push_back({{"name", r.name}, {"shape", r.shape}, {"ms", r.ms}, {"gflops", r.gflops}});
  kiln::apps::write_json_file(path, out);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cpu-bench: kiln's CPU matmul and conv2d kernels, timed through the Backend interface"};
  app.set_version_flag("--version", kiln::apps::version_line("cpu-bench"));
  std::string json_path;
  int threads = 0;
  app.add_option("--threads", threads, "threads of the CPU backend (default: KILN_NUM_THREADS or the machine's)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--json", json_path, "write the results to this JSON file")->type_name("FILE");
  app.add_flag("--quick", g_quick, "3 timed runs a figure, not a second's worth (a smoke run)");
  if (std::optional<int> code = kiln::apps::parse_command_line(app, argc, argv)) return *code;
  if (threads > 0) kiln::cpu::set_num_threads(threads);
  threads = kiln::cpu::num_threads();

  std::vector<Result> results;
  results.push_back(bench_matmul("matmul", 1024, false, false));
  results.push_back(bench_matmul("matmul A^T.B", 1024, true, false));
  results.push_back(bench_matmul("matmul A.B^T", 1024, false, true));
  bench_conv("conv1", 64, 1, 28, 32, 3, results);
  bench_conv("conv2", 64, 32, 26, 64, 3, results);

  std::printf("kiln cpu backend, %d threads (median of runs after warm-up)\n", threads);
  std::printf("%-24s %-26s %10s %10s\n", "op", "shape", "ms", "GFLOP/s");
  for (const Result& r : results)
    std::printf("%-24s %-26s %10.3f %10.1f\n", r.name.c_str(), r.shape.c_str(), r.ms, r.gflops);
  try {
    if (!json_path.empty()) write_json(json_path, threads, results);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpu-bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
