// kernel-bench: every version of every CUDA kernel family against the library it is measured
// by: matmul against cuBLAS (FP32 and TF32), conv2d against cuDNN, the rate of wgmma shapes alone
// (bench_wgmma.cu), softmax, cross-entropy, reductions, dropout, batch norm and the optimizer steps
// against the device's copy bandwidth.
// Prints a table and writes JSON; once a run's JSON is recorded in docs/runs/ (scripts/figures.py
// record), scripts/figures.py update writes the tables of kernels/README.md from it (through
// scripts/kernel_table.py).
//
//   kernel-bench [--only matmul|conv|wgmma|softmax|cross_entropy|reduce|dropout|batch_norm|optim] [--shape TEXT]
//                [--quick] [--json FILE]
//
// Run it on the GPU machine through scripts/device-run.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>

#include "apps/bench/kernel_bench.h"
#include "apps/mnist/cli.h"
#include "kiln/core/backend.h"
#include "kiln/core/error.h"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"

namespace kiln::bench {

void Bench::init() { stream_ = cuda::backend(0).stream(); }

Bench::~Bench() {
  for (void* p : buffers_) cudaFree(p);
}

double Bench::time_ms(const std::function<void()>& fn) {
  cudaEvent_t start, stop;
  KILN_CUDA_CHECK(cudaEventCreate(&start));
  KILN_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 2; ++i) fn();
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  // Time one call to size the batches, then take batches of calls until the budget is spent.
  KILN_CUDA_CHECK(cudaEventRecord(start, stream_));
  fn();
  KILN_CUDA_CHECK(cudaEventRecord(stop, stream_));
  KILN_CUDA_CHECK(cudaEventSynchronize(stop));
  float first = 0;
  KILN_CUDA_CHECK(cudaEventElapsedTime(&first, start, stop));
  const double budget_ms = quick_? 20 : 200;
  int per_batch = std::max(1, static_cast<int>(budget_ms / 10 / std::max(first, 1e-3f)));
  std::vector<double> samples;
  double spent = 0;
  while (samples.size() < 3 || (spent < budget_ms && samples.size() < 200)) {
    KILN_CUDA_CHECK(cudaEventRecord(start, stream_));
    for (int i = 0; i < per_batch; ++i) fn();
    KILN_CUDA_CHECK(cudaEventRecord(stop, stream_));
    KILN_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    samples.push_back(static_cast<double>(ms) / per_batch);
    spent += ms;
  }
  KILN_CUDA_CHECK(cudaEventDestroy(start));
  KILN_CUDA_CHECK(cudaEventDestroy(stop));
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

void Bench::record(Result r) {
  std::printf("%-10s %-34s %-36s %10.4f ms %10.2f %-7s %s\n", r.family.c_str(), r.version.c_str(),
              r.shape.c_str(), r.ms, r.value, r.unit.c_str(), r.note.c_str());
  std::fflush(stdout);
  results_.push_back(std::move(r));
}

void* Bench::device_bytes(size_t bytes) {
  void* p = nullptr;
  KILN_CUDA_CHECK(cudaMalloc(&p, bytes));
  buffers_.push_back(p);
  return p;
}

float* Bench::random_floats(int64_t n, uint64_t seed) {
  auto* p = static_cast<float*>(device_bytes(static_cast<size_t>(n) * sizeof(float)));
  TensorRef ref;
  ref.buffer = p;
  ref.shape = Shape{n};
  ref.strides = Strides{1};
  cuda::backend(0).uniform(ref, -1, 1, {seed, 0});
  return p;
}

double Bench::copy_gbs() {
  if (copy_gbs_ > 0) return copy_gbs_;
  const size_t bytes = size_t{1} << 30;
  void* a = device_bytes(bytes);
  void* b = device_bytes(bytes);
  double ms = time_ms([&] { KILN_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream_)); });
  copy_gbs_ = 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
  record({"copy", "cudaMemcpyAsync", "1 GiB", ms, copy_gbs_, "GB/s", true, "read + written"});
  return copy_gbs_;
}

std::vector<float> to_host(const float* device, int64_t count, cudaStream_t stream) {
  std::vector<float> host(static_cast<size_t>(count));
  KILN_CUDA_CHECK(cudaMemcpyAsync(host.data(), device, host.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

double max_rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    err = std::isnan(d) ? INFINITY : std::max(err, d);
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return err / std::max(scale, 1e-30);
}

std::string rel_err_note(double err) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "max rel err %.1e", err);
  return buf;
}

namespace {

// --json: {"program", "kiln", "revision", "device", "date", "results": [{family, version, shape,
// ms, value, unit, reference, note}]}. A wrong version has ms and value 0 and its reason in note; a
// figure that is not a finite number would be written null.
void write_json(const std::string& path, const std::string& device, const std::vector<Result>& results) {
  nlohmann::ordered_json out = apps::build_info("kernel-bench");  // program, kiln, revision, date
  out["device"] = device;
  out["results"] = nlohmann::ordered_json::array();
  for (const Result& r : results)
    out["results"].push_back({{"family", r.family}, {"version", r.version}, {"shape", r.shape}, {"ms", r.ms},
                              {"value", r.value}, {"unit", r.unit}, {"reference", r.reference}, {"note", r.note}});
  apps::write_json_file(path, out);
}

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) {
  CLI::App app{"kernel-bench: kiln's CUDA kernels against cuBLAS, cuDNN and copy bandwidth"};
  app.set_version_flag("--version", kiln::apps::version_line("kernel-bench"));
  std::string only, json, shape;
  bool quick = false;
  app.add_option("--only", only,
                 "one family: matmul, conv, wgmma, softmax, cross_entropy, reduce, dropout, batch_norm or optim")
      ->check(CLI::IsMember(
          {"matmul", "conv", "wgmma", "softmax", "cross_entropy", "reduce", "dropout", "batch_norm", "optim"}))
      ->type_name("FAMILY");
  app.add_option("--shape", shape,
                 "matmul, conv and batch_norm: only the shapes whose label contains TEXT, e.g. 'conv2 x[512', '[128, 64', "
                 "'x10x'");
  app.add_flag("--quick", quick, "fewer shapes and shorter timings (a smoke run)");
  app.add_option("--json", json, "write the results to this JSON file")->type_name("FILE");
  if (std::optional<int> code = kiln::apps::parse_command_line(app, argc, argv)) return *code;
  try {
    kiln::bench::Bench bench(quick, shape, only);
    bench.init();
    cudaDeviceProp prop{};
    KILN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("kernel-bench on %s (%d SMs, %.0f GiB)\n", prop.name, prop.multiProcessorCount,
                static_cast<double>(prop.totalGlobalMem) / (1 << 30));
    bench.copy_gbs();
    if (bench.runs("matmul")) kiln::bench::bench_matmul(bench);
    if (bench.runs("conv")) kiln::bench::bench_conv(bench);
    if (bench.runs("wgmma")) kiln::bench::bench_wgmma(bench);
    kiln::bench::bench_softmax(bench);  // the memory-bound families that --only asks for
    if (!json.empty()) kiln::bench::write_json(json, prop.name, bench.results());
  } catch (const std::exception& e) {
    std::cerr << "kernel-bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
