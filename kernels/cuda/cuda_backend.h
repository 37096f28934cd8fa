// The CUDA backend: tensors resident on one GPU, kernels written by hand (cuBLAS and cuDNN appear
// only in tests and benches). One stream per device; memory from the stream-ordered allocator
// (cudaMallocAsync on the device's pool, with a release threshold high enough that freed blocks
// stay cached); host reads are the only synchronisation points.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/core/backend.h"

namespace kiln::cuda {

// An attribute of `device` (cudaDeviceGetAttribute), or of the current device when device < 0,
// asked of the driver once per device and attribute and then cached: launch choices read the SM
// count, the shared-memory limit or the compute capability at every launch. (runtime.cu)
int device_attribute(cudaDeviceAttr attr, int device = -1);
// Whether the wgmma kernels (matmul 13, 15 to 17, conv2d 10 to 12, backward weight 6) run on
// `device` (the current one when device < 0): a GPU of compute capability 9.0, whose driver runs
// their sm_90a code, in a build whose architectures include Hopper (without it, KILN_NO_SM90A,
// they are compiled to traps). (runtime.cu)
bool wgmma_runs(int device = -1);

// An Epilogue (core/backend.h) as the matmul and conv2d kernels take it: the bias as a device
// pointer (null: none), applied to output element v of column or channel j. v is in the type the
// kernel computes in (T, or float for a bf16 output, whose bias is widened and whose result the
// kernel then rounds once).
template <class T>
struct DeviceEpilogue {
  const T* bias = nullptr;
  Activation activation = Activation::none;
#if defined(__CUDACC__)
  template <class V>
  __device__ V operator()(V v, int64_t j) const {
    if (bias) v += static_cast<V>(bias[j]);
    return activate(v);
  }
  // The activation alone (for a kernel that adds the bias itself).
  template <class V>
  __device__ V activate(V v) const {
    return activation == Activation::relu && v < V(0) ? V(0) : v;  // a NaN passes, as UnaryOp::relu
  }
#endif
};
template <class T>
DeviceEpilogue<T> device_epilogue(const Epilogue& e) {
  return {e.bias.defined() ? e.bias.data<T>() : nullptr, e.activation};
}

// A fault a kernel finds in its input but cannot throw: an index outside its range. Kernels
// record the first one in the backend's fault slot (device memory; see fault.cuh), and the host
// throws it as a ValueError at the next synchronisation (read or synchronize), naming the op,
// the index, its position and the range. Checking costs one 24-byte copy per synchronisation and
// no synchronisation of its own, so a training step keeps running asynchronously.
enum class FaultOp : int32_t { none, gather, index_add, one_hot, cross_entropy, cross_entropy_backward };

struct DeviceFault {
  int32_t op = 0;      // a FaultOp; 0 while nothing went wrong
  int32_t value = 0;   // the offending index
  int64_t position = 0;
  int64_t bound = 0;   // the index should have been in [0, bound)
};

class GraphPool;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  std::string_view name() const override { return "cuda"; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

  // runtime.cu
  void* allocate(size_t bytes) override;
  void deallocate(void* buffer) noexcept override;
  void write(void* buffer, size_t byte_offset, const void* host, size_t bytes) override;
  void read(const void* buffer, size_t byte_offset, void* host, size_t bytes) override;
  void synchronize() override;
  // The copy and the fault slot's copy go into a pinned block behind an event; the block goes
  // back to a pool of them once the read is done with (freeing pinned memory would wait).
  std::unique_ptr<PendingRead> read_async(const void* buffer, size_t byte_offset, size_t bytes) override;
  DeviceFault* fault_slot() const { return fault_; }  // device memory, for kernels to report into

  // graph.cu: captured CUDA graphs (core/capture.h)
  class CaptureState;
  void begin_capture() override;
  std::unique_ptr<Graph::Impl> end_capture(bool keep) override;
  Capture* capture() override;
  bool can_capture() const override { return true; }
  // cudaFreeAsync on the stream, or, while a capture is open, once it closes.
  void free_after_capture(void* block) noexcept;

  // elementwise.cu
  void fill(const TensorRef& out, double value) override;
  void arange(const TensorRef& out, double start, double step) override;
  void copy(const TensorRef& src, const TensorRef& out) override;
  void copy_many(std::span<const TensorRef> src, std::span<const TensorRef> out) override;
  void ring_push(const TensorRef& src, const TensorRef& ring, const TensorRef& next) override;
  void unary(UnaryOp op, const TensorRef& x, const TensorRef& out, double alpha) override;
  void unary_backward(UnaryOp op, const TensorRef& x, const TensorRef& grad, const TensorRef& out,
                      double alpha) override;
  void binary(BinaryOp op, const TensorRef& a, const TensorRef& b, const TensorRef& out) override;

  // random.cu
  void uniform(const TensorRef& out, double low, double high, const philox::Key& key) override;
  void normal(const TensorRef& out, double mean, double stddev, const philox::Key& key) override;
  void dropout(const TensorRef& x, const TensorRef& out, double p, const philox::Key& key) override;
  void dropout_relu(const TensorRef& grad, const TensorRef& relu_x, const TensorRef& out, double p,
                    const philox::Key& key) override;

  // reduce.cu
  void reduce(ReduceOp op, const TensorRef& x, const TensorRef& out) override;
  void count_correct(const TensorRef& logits, const TensorRef& targets, const TensorRef& count) override;

  // softmax.cu
  void softmax(const TensorRef& x, const TensorRef& out, bool log) override;

  // index.cu
  void gather(const TensorRef& x, const TensorRef& indices, const TensorRef& out) override;
  void gather_many(std::span<const TensorRef> xs, const TensorRef& indices, std::span<const TensorRef> outs) override;
  void gather_many_indirect(std::span<const TensorRef> xs, const int32_t* const* indices, int64_t m,
                            std::span<const TensorRef> outs) override;
  void index_add(const TensorRef& src, const TensorRef& indices, const TensorRef& out) override;
  void one_hot(const TensorRef& indices, const TensorRef& out) override;

  // cross_entropy.cu
  void cross_entropy(const TensorRef& logits, const TensorRef& targets, const TensorRef& losses,
                     double label_smoothing) override;
  void cross_entropy_backward(const TensorRef& logits, const TensorRef& targets,
                              const TensorRef& grad_losses, const TensorRef& grad_logits,
                              double label_smoothing) override;
  void cross_entropy_reduced(const TensorRef& logits, const TensorRef& targets, const TensorRef& out,
                             double label_smoothing, bool mean) override;
  void cross_entropy_reduced_counting(const TensorRef& logits, const TensorRef& targets, const TensorRef& out,
                                      double label_smoothing, bool mean, const TensorRef& count) override;
  void cross_entropy_reduced_backward(const TensorRef& logits, const TensorRef& targets, const TensorRef& grad,
                                      const TensorRef& grad_logits, double label_smoothing, bool mean) override;

  // matmul.cu (the versions: matmul/)
  void matmul(const TensorRef& a, const TensorRef& b, const TensorRef& out, const MatmulParams& p,
              const Epilogue& e) override;

  // conv2d.cu
  void conv2d(const TensorRef& x, const TensorRef& w, const TensorRef& y, const Conv2dParams& p,
              const Epilogue& e) override;
  void conv2d_backward_input(const TensorRef& grad_y, const TensorRef& w, const TensorRef& grad_x,
                             const Conv2dParams& p) override;
  void conv2d_backward_input_relu(const TensorRef& grad_y, const TensorRef& w, const TensorRef& relu_x,
                                  const TensorRef& grad_x, const Conv2dParams& p) override;
  bool conv2d_backward_input_relu_fused(const TensorRef& grad_y, const TensorRef& w, const TensorRef& relu_x,
                                        const Conv2dParams& p) const override;
  void conv2d_backward_weight(const TensorRef& x, const TensorRef& grad_y, const TensorRef& grad_w,
                              const Conv2dParams& p) override;
  bool conv2d_backward_weight_and_bias(const TensorRef& x, const TensorRef& grad_y, const TensorRef& grad_w,
                                       const TensorRef& grad_b, const Conv2dParams& p,
                                       const TensorRef& relu_y) override;

  // batch_norm.cu
  void batch_norm_stats(const TensorRef& x, const TensorRef& mean, const TensorRef& var) override;
  void batch_norm_apply(const TensorRef& x, const TensorRef& mean, const TensorRef& invstd, const TensorRef& weight,
                        const TensorRef& bias, const TensorRef& y) override;
  void batch_norm_train(const TensorRef& x, const TensorRef& weight, const TensorRef& bias, double eps,
                        const TensorRef& y, const TensorRef& mean, const TensorRef& var,
                        const TensorRef& invstd) override;
  void batch_norm_backward(const TensorRef& x, const TensorRef& grad, const TensorRef& mean, const TensorRef& invstd,
                           const TensorRef& weight, const TensorRef& grad_x, const TensorRef& grad_weight,
                           const TensorRef& grad_bias) override;

  // pool.cu
  void max_pool2d(const TensorRef& x, const TensorRef& y, const TensorRef& indices,
                  const Pool2dParams& p) override;
  void max_pool2d_backward(const TensorRef& grad_y, const TensorRef& indices, const TensorRef& grad_x,
                           const Pool2dParams& p) override;
  void max_pool2d_backward_relu(const TensorRef& grad_y, const TensorRef& indices, const TensorRef& relu_y,
                                const TensorRef& grad_x, const Pool2dParams& p) override;
  bool max_pool2d_dropout(const TensorRef& x, const TensorRef& y, const TensorRef& codes, const Pool2dParams& pool,
                          double p, const philox::Key& key) override;
  void max_pool2d_dropout_backward(const TensorRef& grad_y, const TensorRef& codes, const TensorRef& grad_x,
                                   const Pool2dParams& pool, double p, bool relu) override;
  void avg_pool2d(const TensorRef& x, const TensorRef& y, const Pool2dParams& p) override;
  void avg_pool2d_backward(const TensorRef& grad_y, const TensorRef& grad_x, const Pool2dParams& p) override;

  // optim.cu
  void sgd_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                std::span<const TensorRef> momentum_buffers, const SgdStep& hyper) override;
  void adam_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                 std::span<const TensorRef> exp_avgs, std::span<const TensorRef> exp_avg_sqs,
                 std::span<const TensorRef> max_exp_avg_sqs, const AdamStep& hyper) override;
  void adadelta_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                     std::span<const TensorRef> square_avgs, std::span<const TensorRef> acc_deltas,
                     const AdadeltaStep& hyper) override;
  void rmsprop_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                    std::span<const TensorRef> square_avgs, std::span<const TensorRef> momentum_buffers,
                    std::span<const TensorRef> grad_avgs, const RmspropStep& hyper) override;

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  cudaMemPool_t pool_ = nullptr;
  DeviceFault* fault_ = nullptr;        // device
  DeviceFault* fault_host_ = nullptr;   // pinned host copy, refreshed at each synchronisation

  // Waits for the stream, then throws the fault a kernel recorded since the last check, if any.
  void sync_and_check_fault();
  // cross_entropy.cu: the reduced loss in one launch (counting where `count` is not null), or
  // false, queuing nothing, where that kernel does not take the batch.
  bool reduced_loss(const TensorRef& logits, const TensorRef& targets, const TensorRef& out, int32_t* count,
                    double label_smoothing, bool mean);
  // Throws `f` (a copy of the fault slot) if it holds a fault, clearing the slot first.
  void throw_fault(const DeviceFault& f);
  uint64_t fault_clears_ = 0;  // how many faults throw_fault has reported (and cleared)

  // runtime.cu: read_async's pinned blocks not in use, each with its size
  friend class CudaRead;
  std::mutex staging_mutex_;
  std::vector<std::pair<void*, size_t>> staging_;
  std::pair<void*, size_t> take_staging(size_t bytes);
  void give_back_staging(std::pair<void*, size_t> block) noexcept;
  // Throws CaptureError when a capture is open: `what` would wait for the device or copy from the host.
  void check_not_capturing(const char* what) const;

  // graph.cu: memory while a capture is open, and the blocks of captured graphs' pools
  std::shared_ptr<CaptureState> capture_;  // shared: its type is complete only in graph.cu
  cudaStream_t side_stream_ = nullptr;  // where the pools allocate while the main stream records
  std::unordered_map<void*, std::shared_ptr<GraphPool>> pool_blocks_;  // live blocks of graphs' pools
  std::vector<void*> deferred_;  // freed while a capture was open; cudaFreeAsync'd when it closes
  void* allocate_in_capture(size_t bytes);
  // Takes back a block of a graph's pool, or keeps (while a capture is open) a buffer made before
  // it; false for an ordinary buffer.
  bool deallocate_in_pool(void* buffer) noexcept;
};

// bf16 where a kernel has only f32 and f64 versions: a bf16 operand widened to f32 (exactly) in a
// buffer of the pool, or (copy_in false) a buffer for an f32 result to round into the bf16 one;
// nothing for an undefined operand.
struct Widened {
  Scratch buffer;
  TensorRef ref;
  Widened(CudaBackend& be, const TensorRef& bf16, bool copy_in = true)
      : buffer(be, bf16.defined() ? sizeof(float) * static_cast<size_t>(bf16.numel()) : 0) {
    if (!bf16.defined()) return;
    ref = buffer.ref(bf16.shape, DType::f32);
    if (copy_in) be.copy(bf16, ref);
  }
  float* data() const { return static_cast<float*>(ref.buffer); }
};

// The backend of GPU `index`, created on first use. Throws BackendUnavailable when there is no
// such device (or no usable driver), with the CUDA runtime's reason.
CudaBackend& backend(int index);

// How many CUDA devices this process sees (0 without a driver or a device; core/devices.h
// declares it too).
int device_count();

}  // namespace kiln::cuda
