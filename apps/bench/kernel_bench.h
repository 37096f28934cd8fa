// kernel-bench: the pieces every family's bench file shares.
//
// A family's file (bench_matmul.cu, bench_conv.cu, bench_softmax.cu) defines one function
// `void bench_<family>(Bench&)` that, for each shape it cares about, times every version of its
// kernels and the library it is measured against (cuBLAS, cuDNN, the device's copy bandwidth),
// and records one Result per (version, shape). Versions are checked against a reference before
// they are timed: a wrong kernel is reported, never timed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/backend.h"

namespace kiln::bench {

struct Result {
  std::string family;   // "matmul", "conv2d", "softmax", ...
  std::string version;  // "01_naive", ..., or the reference: "cuBLAS SGEMM"
  std::string shape;    // "4096x4096x4096", "x[64,32,26,26] w[64,32,3,3]"
  double ms = 0;        // median time of one call
  double value = 0;     // the figure of merit: TFLOP/s or GB/s
  std::string unit;     // "TFLOP/s" or "GB/s"
  bool reference = false;
  std::string note;     // e.g. "max rel err 3e-4" or "wrong: element 17 is 3 (want 2)"
};

class Bench {
 public:
  // `only`: one family (--only matmul, conv, wgmma, softmax, cross_entropy, reduce, dropout, batch_norm or optim),
  // or every family when empty.
  Bench(bool quick, std::string shape_filter, std::string only)
      : quick_(quick), shape_filter_(std::move(shape_filter)), only_(std::move(only)) {}

  cudaStream_t stream() const { return stream_; }
  bool quick() const { return quick_; }  // fewer shapes and repetitions: a smoke run
  // Whether to run a shape: its label contains the --shape text (every shape when none was given).
  bool wants(const std::string& shape) const { return shape.find(shape_filter_) != std::string::npos; }
  // Whether to run `family` (a name --only takes).
  bool runs(const std::string& family) const { return only_.empty() || only_ == family; }

  // Runs fn (which queues kernels on stream()) a few times to warm up, then times it with CUDA
  // events until about 0.2 s [nofig] (0.02 s [nofig] when quick) have passed; returns the median
  // ms per call.
  double time_ms(const std::function<void()>& fn);

  // Prints the result as a table row and keeps it for the JSON file.
  void record(Result r);
  const std::vector<Result>& results() const { return results_; }

  // Device-to-device copy bandwidth (bytes read + written per second), measured once on first
  // use with a 1 GiB cudaMemcpyAsync: the ceiling for memory-bound kernels.
  double copy_gbs();

  // A device buffer of n floats, uniform in [-1, 1), freed with the Bench.
  float* random_floats(int64_t n, uint64_t seed = 1);
  void* device_bytes(size_t bytes);

  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;
  ~Bench();
  void init();

 private:
  bool quick_;
  std::string shape_filter_;
  std::string only_;
  cudaStream_t stream_ = nullptr;
  std::vector<void*> buffers_;
  std::vector<Result> results_;
  double copy_gbs_ = 0;
};

// A contiguous tensor of `shape` and `dtype` at device pointer `data`, as the backends take it.
inline TensorRef device_ref(const void* data, Shape shape, DType dtype) {
  TensorRef r;
  r.buffer = const_cast<void*>(data);
  r.strides = contiguous_strides(shape);
  r.shape = std::move(shape);
  r.dtype = dtype;
  return r;
}
inline TensorRef f32_ref(const float* data, Shape shape) { return device_ref(data, std::move(shape), DType::f32); }

// `count` floats at device pointer `device`, copied to the host after the stream's work.
std::vector<float> to_host(const float* device, int64_t count, cudaStream_t stream);
// max |got - want| / max |want|: the error on the scale of the result (infinite with a NaN).
double max_rel_err(const std::vector<float>& got, const std::vector<float>& want);
// "max rel err 1.2e-07": how a version's error is reported.
std::string rel_err_note(double err);

void bench_matmul(Bench& bench);
void bench_conv(Bench& bench);
void bench_wgmma(Bench& bench);    // one wgmma shape's rate, nothing else in its way (sm_90a)
void bench_softmax(Bench& bench);  // softmax, cross_entropy, reduce, dropout, batch_norm, optim: each as runs() says

}  // namespace kiln::bench
