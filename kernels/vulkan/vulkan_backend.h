// The Vulkan backend: tensors in device memory of any GPU with a Vulkan driver (AMD, Intel, Apple
// through MoltenVK, NVIDIA without CUDA) or of Mesa's lavapipe on the CPU, and kernels written as
// GLSL compute shaders (kernels/vulkan/shaders/, the same names as the CUDA files).
//
// The runtime (runtime.cpp): the loader opened at run time (kiln starts without it), one
// instance, one physical device per backend ("vulkan:N" counts the devices that have a compute
// queue and what kiln needs, in the loader's order), one compute queue, a pipeline cache, and
// timestamp queries for benches. Memory is sub-allocated from large blocks of device memory, each one VkBuffer, so a tensor is a
// range of a block (an Allocation) and allocating costs no driver call once the blocks exist.
// Kernels are recorded into command buffers ("frames"), a barrier before a dispatch whose memory
// overlaps what dispatches since the last barrier bound (so independent kernels in a row run
// together); a frame goes to the GPU every 32 dispatches without a wait, so the GPU runs a step while the host
// records the rest of it, and the host waits only to read (read, synchronize), for a frame 4
// submissions back, or to write more than a frame's upload segment (4 MiB) at once. A dispatch's
// parameters go to its frame's segment of a host-visible ring, bound as its binding 0: a uniform
// buffer (std430, Vulkan 1.2's uniformBufferStandardLayout), which NVIDIA's driver reads through
// the constant cache, so a kernel takes any number of parameters (push constants guarantee only
// 128 bytes) and its index arithmetic reads them for free.
//
// Dtypes: f32 everywhere, i32 where the CPU takes it but for mean, u8 in fill, copy, gather and
// one_hot; f64 (which many Vulkan devices lack) is refused with a DTypeError naming the op. The
// kernels are tested against the CPU; matmul and the convolutions, which carry the time, are
// implicit or plain GEMMs on one tiled kernel (shaders/gemm.glsl) with split reductions where
// outputs are few; reductions use subgroup shuffles where the device has them, and matmul the
// cooperative-matrix units where allowed (kiln::allow_f16_products) and offered. Each shader
// opens with what it computes, its bench and its current version's figures; the versions before
// them: kernels/vulkan/NOTES.md.
// KILN_VULKAN_VALIDATION=1 turns on the Khronos validation layer; its messages are kept
// (validation_messages) and printed to stderr, and the tests fail on any.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/backend.h"

namespace kiln::vulkan {

struct Runtime;  // runtime.cpp: the Vulkan objects

// A tensor's memory: a range of one block's buffer. TensorRef::buffer points at one of these.
struct Allocation {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize offset = 0;  // bytes into the block
  VkDeviceSize size = 0;    // bytes, rounded up to the block's alignment
  size_t block = 0;
};

constexpr int64_t kWorkgroupSize = 256;  // invocations per workgroup of every kernel (constant 0)

// The tile of shaders/gemm.glsl (matmul and the convolutions) for a product of m x n outputs per
// batch: TILE_M x TILE_N per workgroup, THREAD x THREAD per invocation (its constants 1, 2, 3).
struct GemmTile {
  int32_t m, n, thread;
  int64_t count(int64_t batches, int64_t rows, int64_t cols) const {
    return batches * ((rows + m - 1) / m) * ((cols + n - 1) / n);
  }
};
GemmTile gemm_tile(int64_t m, int64_t n);

// How a product with few output tiles splits its reduction (matmul.cpp): `splits` workgroups per
// tile, each over k_chunk of it (splits == 1: no split).
struct SplitK {
  int64_t splits, k_chunk;
};
SplitK split_k(int64_t tiles, int64_t k, int64_t outputs);

// One dispatch of a shader variant: specialisation constants after the workgroup size (constant 0),
// the parameter bytes (binding 0) and the tensors' allocations (bindings 1, 2, ...).
struct Dispatch {
  std::string_view shader;
  std::vector<int32_t> constants;
  const void* params = nullptr;
  size_t params_bytes = 0;
  std::vector<const Allocation*> buffers;
  int64_t invocations = 0;  // one per element: the workgroup count follows (capped, grid-stride)
};

// What a kernel that finds a bad input records in the fault slot (a host-visible word quadruple:
// op, value, position, bound; the first to arrive when several are bad), which the host throws as
// a ValueError at its next wait: an index
// outside its range (naming the op, the index, its position and the range), or an i32 division by
// zero or negative power (naming the element).
enum class FaultOp : int32_t {
  none, gather, index_add, one_hot, cross_entropy, cross_entropy_backward, division_by_zero, negative_power
};

class VulkanBackend final : public Backend {
 public:
  explicit VulkanBackend(int device);
  ~VulkanBackend() override;
  std::string_view name() const override { return "vulkan"; }
  // "NVIDIA H100 80GB HBM3 (driver 580.159.4, Vulkan 1.4.312)": what the runtime chose.
  const std::string& description() const { return description_; }
  // Whether the device is a CPU implementation (lavapipe, SwiftShader): there kiln's own CPU
  // backend is the faster choice, and --device auto passes it by.
  bool software() const { return software_; }
  // Whether kernels use subgroup operations (shuffles, in the compute stage): where the device
  // has them, unless turned off (use_subgroups(false): tests and benches run the fallbacks so).
  bool subgroups() const { return subgroups_ && use_subgroups_; }
  void use_subgroups(bool on) { use_subgroups_ = on; }
  // Whether matmul may run on cooperative matrices (shaders/matmul_coop.comp: f16 products
  // accumulated in f32), which it does when kiln::allow_f16_products() is on (core/precision.h).
  bool cooperative_matrix() const { return cooperative_matrix_; }

  // runtime.cpp
  void* allocate(size_t bytes) override;
  void deallocate(void* buffer) noexcept override;
  void write(void* buffer, size_t byte_offset, const void* host, size_t bytes) override;
  void read(const void* buffer, size_t byte_offset, void* host, size_t bytes) override;
  void synchronize() override;
  void record(const Dispatch& d);  // queues one kernel
  const Allocation* fault_slot() const;  // kernels that check indices bind it
  // Timestamps for benches: timestamp() records the moment the device has finished everything
  // recorded before it; elapsed_ms(a, b) waits for the work and gives the device's time between
  // the two. BackendUnavailable where the compute queue keeps no time.
  uint32_t timestamp();
  double elapsed_ms(uint32_t from, uint32_t to);
  size_t bytes_reserved() const;   // device memory held in blocks (for tests and logs)

  // elementwise.cpp
  void fill(const TensorRef& out, double value) override;
  void arange(const TensorRef& out, double start, double step) override;
  void copy(const TensorRef& src, const TensorRef& out) override;
  void unary(UnaryOp op, const TensorRef& x, const TensorRef& out, double alpha) override;
  void unary_backward(UnaryOp op, const TensorRef& x, const TensorRef& grad, const TensorRef& out,
                      double alpha) override;
  void binary(BinaryOp op, const TensorRef& a, const TensorRef& b, const TensorRef& out) override;

  // random.cpp
  void uniform(const TensorRef& out, double low, double high, const philox::Key& key) override;
  void normal(const TensorRef& out, double mean, double stddev, const philox::Key& key) override;
  void dropout(const TensorRef& x, const TensorRef& out, double p, const philox::Key& key) override;

  // index.cpp
  void gather(const TensorRef& x, const TensorRef& indices, const TensorRef& out) override;
  void index_add(const TensorRef& src, const TensorRef& indices, const TensorRef& out) override;
  void one_hot(const TensorRef& indices, const TensorRef& out) override;

  // reduce.cpp
  void reduce(ReduceOp op, const TensorRef& x, const TensorRef& out) override;

  // softmax.cpp
  void softmax(const TensorRef& x, const TensorRef& out, bool log) override;
  void cross_entropy(const TensorRef& logits, const TensorRef& targets, const TensorRef& losses,
                     double label_smoothing) override;
  void cross_entropy_backward(const TensorRef& logits, const TensorRef& targets, const TensorRef& grad_losses,
                              const TensorRef& grad_logits, double label_smoothing) override;

  // matmul.cpp
  void matmul(const TensorRef& a, const TensorRef& b, const TensorRef& out, const MatmulParams& p,
              const Epilogue& e) override;
  // out = epilogue(sum over s of workspace[s][total]) in the order of s, for split-k kernels
  void record_split_sum(const Allocation* workspace, int64_t splits, int64_t total, int64_t n, const TensorRef& out,
                        const Epilogue& e);

  // optim.cpp
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

  // conv2d.cpp
  void conv2d(const TensorRef& x, const TensorRef& w, const TensorRef& y, const Conv2dParams& p,
              const Epilogue& e) override;
  void conv2d_backward_input(const TensorRef& grad_y, const TensorRef& w, const TensorRef& grad_x,
                             const Conv2dParams& p) override;
  void conv2d_backward_weight(const TensorRef& x, const TensorRef& grad_y, const TensorRef& grad_w,
                              const Conv2dParams& p) override;
  void max_pool2d(const TensorRef& x, const TensorRef& y, const TensorRef& indices, const Pool2dParams& p) override;
  void max_pool2d_backward(const TensorRef& grad_y, const TensorRef& indices, const TensorRef& grad_x,
                           const Pool2dParams& p) override;
  void avg_pool2d(const TensorRef& x, const TensorRef& y, const Pool2dParams& p) override;
  void avg_pool2d_backward(const TensorRef& grad_y, const TensorRef& grad_x, const Pool2dParams& p) override;

  // batch_norm.cpp
  void batch_norm_stats(const TensorRef& x, const TensorRef& mean, const TensorRef& var) override;
  void batch_norm_apply(const TensorRef& x, const TensorRef& mean, const TensorRef& invstd, const TensorRef& weight,
                        const TensorRef& bias, const TensorRef& y) override;
  void batch_norm_backward(const TensorRef& x, const TensorRef& grad, const TensorRef& mean, const TensorRef& invstd,
                           const TensorRef& weight, const TensorRef& grad_x, const TensorRef& grad_weight,
                           const TensorRef& grad_bias) override;

 private:
  std::unique_ptr<Runtime> rt_;
  std::string description_;
  bool software_ = false;
  bool subgroups_ = false, use_subgroups_ = true;
  bool cooperative_matrix_ = false;
};

// What every kernel file needs: a tensor's allocation, and a size, offset or stride as the 32-bit
// index the shaders use (ShapeError naming the op beyond 2^31 - 1).
inline const Allocation* allocation(const TensorRef& t) { return static_cast<const Allocation*>(t.buffer); }
int32_t index32(int64_t v, std::string_view op);

// A divisor as shaders/fastdiv.glsl takes it: d with the magic number and shift that divide by
// it with a multiply (d >= 1; n < 2^31).
struct Divisor {
  int32_t d = 1;
  uint32_t magic = 1, shift = 0;
};
inline Divisor divisor(int32_t d) {
  Divisor q;
  q.d = d < 1 ? 1 : d;
  while ((int64_t{1} << q.shift) < q.d) ++q.shift;
  q.magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << q.shift) - static_cast<uint64_t>(q.d))) /
                                      static_cast<uint64_t>(q.d) +
                                  1);
  return q;
}

// Scratch device memory for one kernel's recording: freed when it goes out of scope, which is safe
// at once (whatever is recorded later on the same memory waits for the commands before it).
class Workspace {
 public:
  Workspace(VulkanBackend& b, size_t bytes) : b_(b), p_(b.allocate(bytes)) {}
  ~Workspace() { b_.deallocate(p_); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  const Allocation* allocation() const { return static_cast<const Allocation*>(p_); }

 private:
  VulkanBackend& b_;
  void* p_;
};

// How many devices "vulkan:N" numbers here (lavapipe, on the CPU, included): 0 without a loader,
// a driver or a device kiln can use. Asked of the driver once (core/devices.h declares it too).
int device_count();

// The backend of Vulkan device `index`, created on first use. Throws BackendUnavailable when
// there is no loader, no driver or no such device, with the reason.
VulkanBackend& backend(int index);

// The validation layer's messages since the process started (KILN_VULKAN_VALIDATION=1).
std::vector<std::string> validation_messages();

}  // namespace kiln::vulkan
