// Captured CUDA graphs (core/capture.h): stream capture of the backend's one stream, a memory pool
// of each graph's own, and the replay values the host refreshes before each launch.
//
// Capture. cudaStreamBeginCapture makes the stream record instead of run: every kernel queued on it
// becomes a node of a graph, in order. kiln queues its kernels on one stream, so the graph is a
// chain and a replay runs the kernels in the order the eager step did, on the same addresses, with
// the same arguments: a replay computes the bits of the eager step it stands for. A data-parallel
// step adds branches: a bucket's all-reduce queued on the NCCL group's stream after an event of
// kiln's joins the capture there, and rejoins the chain where kiln's stream waits for it, as it
// overlaps backward when eager. The capture is in relaxed mode, which lets the pool below call
// cudaMallocAsync on a side stream while the main stream records, and lets the group's watchdog
// thread query its events meanwhile.
//
// Memory. The stream-ordered allocator could be captured too (cudaMallocAsync becomes an
// allocation node), but a tensor made inside and kept after (a gradient, the loss) would then be
// memory the graph frees and makes again at every launch, under a handle the host still holds.
// Instead a graph owns a pool: blocks allocated on a side stream while the capture runs, handed
// out to the captured work, taken back when its tensors go (inside the capture, for the next
// allocation to reuse: the chain orders every use), and never handed to anything else while the
// graph lives. A tensor made inside and kept after lives in the pool until it goes.
//
// Replay values. A node's kernel arguments are fixed at capture. What changes from step to step
// (the learning rate, a dropout draw's place in its Philox stream) lives in one small device
// buffer per graph that the kernels read; replay() computes the values on the host (the callbacks
// the ops registered) and queues one copy of them ahead of the graph's launch, on the same stream.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/core/log.h"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"

namespace kiln::cuda {

namespace {

constexpr size_t kReplayBytes = 4096;  // a graph's replay values: a few dozen, each at most 256 bytes
constexpr size_t kReplayAlign = 16;

}  // namespace

// The memory a graph's captured work allocated. Blocks are freed when the pool goes: after the
// graph is destroyed and the last tensor holding one of its blocks is gone.
class GraphPool {
 public:
  GraphPool(CudaBackend& backend, cudaStream_t side) : backend_(backend), side_(side) {}
  ~GraphPool() {
    for (const Block& b : blocks_) backend_.free_after_capture(b.address);
  }
  GraphPool(const GraphPool&) = delete;
  GraphPool& operator=(const GraphPool&) = delete;

  // The smallest free block that holds `bytes`, or a new one.
  void* allocate(size_t bytes) {
    Block* best = nullptr;
    for (Block& b : blocks_)
      if (b.free && b.bytes >= bytes && (!best || b.bytes < best->bytes)) best = &b;
    if (best) {
      best->free = false;
      return best->address;
    }
    void* p = nullptr;
    const cudaError_t err = cudaMallocAsync(&p, bytes, side_);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      KILN_FAIL(OutOfMemory, "cuda:", backend_.device(), ": out of memory allocating ", bytes,
                " bytes for a captured graph's pool");
    }
    KILN_CUDA_CHECK(err);
    KILN_CUDA_CHECK(cudaStreamSynchronize(side_));  // ready before anything on the main stream uses it
    blocks_.push_back({p, bytes, false});
    return p;
  }

  void release(void* address) {
    for (Block& b : blocks_) {
      if (b.address != address) continue;
      b.free = true;
      return;
    }
  }

 private:
  struct Block {
    void* address;
    size_t bytes;
    bool free;
  };
  CudaBackend& backend_;
  cudaStream_t side_;
  std::vector<Block> blocks_;
};

// The capture open on a backend: what the captured work registered, handed to the graph at the end.
class CudaBackend::CaptureState final : public Capture {
 public:
  CaptureState(CudaBackend& backend, std::shared_ptr<GraphPool> pool, void* device_values)
      : backend_(backend), pool_(std::move(pool)), device_values_(device_values), host_values_(kReplayBytes) {
    static std::atomic<uint64_t> next_id{1};
    id_ = next_id++;
  }
  uint64_t id() const override { return id_; }

  void on_replay(std::function<void()> next) override { hooks_.push_back(std::move(next)); }
  void after_replay(std::function<void()> queued) override { queued_.push_back(std::move(queued)); }

  const void* replay_value(const void* first, size_t bytes, std::function<void(void*)> next) override {
    KILN_CHECK(bytes > 0 && bytes <= 256, ValueError, "cuda capture: a replay value of ", bytes,
               " bytes (1 to 256 bytes each)");
    const size_t at = (used_ + kReplayAlign - 1) / kReplayAlign * kReplayAlign;
    KILN_CHECK(at + bytes <= kReplayBytes, CaptureError, "cuda capture: the captured work asks for more than ",
               kReplayBytes, " bytes of replay values (each optimizer call and each generator drawn from takes one)");
    std::memcpy(host_values_.data() + at, first, bytes);
    values_.push_back({at, bytes, std::move(next)});
    used_ = at + bytes;
    return static_cast<const char*>(device_values_) + at;
  }

  CudaBackend& backend_;
  std::shared_ptr<GraphPool> pool_;
  void* device_values_;
  std::vector<unsigned char> host_values_;
  struct Value {
    size_t at, bytes;
    std::function<void(void*)> next;
  };
  std::vector<Value> values_;
  std::vector<std::function<void()>> hooks_;   // before each replay but the first
  std::vector<std::function<void()>> queued_;  // after each replay
  std::vector<void*> kept_;  // allocated before the capture, freed during it
  size_t used_ = 0;
  uint64_t id_ = 0;
};

namespace {

class CudaGraph final : public Graph::Impl {
 public:
  CudaGraph(CudaBackend& backend, cudaGraphExec_t exec, size_t kernels, std::shared_ptr<CudaBackend::CaptureState> state)
      : backend_(backend), exec_(exec), kernels_(kernels), state_(std::move(state)) {}

  ~CudaGraph() override {
    // Launches already queued keep the executable alive until they finish (CUDA guarantees it);
    // the memory they use is freed stream-ordered after them.
    cudaGraphExecDestroy(exec_);
    backend_.free_after_capture(state_->device_values_);
    for (void* p : state_->kept_) backend_.free_after_capture(p);
  }

  void replay() override {
    KILN_CHECK(backend_.capture() == nullptr, CaptureError, "cuda:", backend_.device(),
               ": a graph replayed while another capture is open (replay it after that capture closes)");
    CudaBackend::CaptureState& s = *state_;
    if (replays_ > 0) {  // the capture stood for the first step: the host state is that step's already
      for (const auto& hook : s.hooks_) hook();
      for (const auto& v : s.values_) v.next(s.host_values_.data() + v.at);
    }
    ++replays_;
    KILN_CUDA_CHECK(cudaSetDevice(backend_.device()));
    if (s.used_ > 0) {
      // From pageable memory: the driver stages the bytes before returning, so host_values_ may
      // change again at the next replay while this copy still waits in the stream.
      KILN_CUDA_CHECK(cudaMemcpyAsync(s.device_values_, s.host_values_.data(), s.used_, cudaMemcpyHostToDevice,
                                      backend_.stream()));
    }
    KILN_CUDA_CHECK(cudaGraphLaunch(exec_, backend_.stream()));
    for (const auto& hook : s.queued_) hook();
  }

  size_t kernels() const override { return kernels_; }

 private:
  CudaBackend& backend_;
  cudaGraphExec_t exec_;
  size_t kernels_;
  std::shared_ptr<CudaBackend::CaptureState> state_;
  int64_t replays_ = 0;
};

}  // namespace

Capture* CudaBackend::capture() { return capture_.get(); }

void CudaBackend::begin_capture() {
  KILN_CHECK(!capture_, CaptureError, "cuda:", device_, ": a capture is already open on this device (captures do "
             "not nest)");
  KILN_CUDA_CHECK(cudaSetDevice(device_));
  if (!side_stream_) KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
  void* values = allocate(kReplayBytes);
  capture_ = std::make_shared<CaptureState>(*this, std::make_shared<GraphPool>(*this, side_stream_), values);
  const cudaError_t err = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed);
  if (err != cudaSuccess) {
    capture_.reset();
    deallocate(values);
    KILN_CUDA_CHECK(err);
  }
}

std::unique_ptr<Graph::Impl> CudaBackend::end_capture(bool keep) {
  KILN_CHECK(capture_, CaptureError, "cuda:", device_, ": no capture is open on this device");
  std::shared_ptr<CaptureState> state = std::move(capture_);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  // What was freed while the capture was open goes now, after what the stream already holds.
  auto free_deferred = [&] {
    for (void* p : deferred_) cudaFreeAsync(p, stream_);
    deferred_.clear();
  };
  auto discard = [&] {
    if (graph) cudaGraphDestroy(graph);
    for (void* p : state->kept_) free_after_capture(p);
    free_after_capture(state->device_values_);
    free_deferred();
  };
  if (!keep) {
    discard();
    cudaGetLastError();
    return nullptr;
  }
  if (ended != cudaSuccess) {
    discard();
    cudaGetLastError();
    KILN_FAIL(CaptureError, "cuda:", device_, ": the capture failed: ", cudaGetErrorName(ended), " (",
              cudaGetErrorString(ended), "); something in the captured work waited for the device or used "
              "another stream");
  }
  size_t count = 0;
  KILN_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  KILN_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  size_t kernels = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    KILN_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    kernels += type == cudaGraphNodeTypeKernel;
  }
  // Each kernel node keeps the priority of the stream it was captured from: a data-parallel step's
  // all-reduces run at the group stream's high priority, ahead of the backward kernels queued
  // beside them, as they do eagerly (without this flag the whole graph runs at kiln's stream's).
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
  cudaGraphDestroy(graph);
  free_deferred();
  KILN_CUDA_CHECK(made);
  logging::debug(detail::concat("cuda:", device_, ": captured a graph of ", kernels, " kernels (", count, " nodes)"));
  return std::make_unique<CudaGraph>(*this, exec, kernels, std::move(state));
}

void CudaBackend::free_after_capture(void* block) noexcept {
  if (capture_) deferred_.push_back(block);
  else cudaFreeAsync(block, stream_);
}

void* CudaBackend::allocate_in_capture(size_t bytes) {
  void* p = capture_->pool_->allocate(bytes);
  pool_blocks_[p] = capture_->pool_;
  return p;
}

bool CudaBackend::deallocate_in_pool(void* buffer) noexcept {
  auto it = pool_blocks_.empty() ? pool_blocks_.end() : pool_blocks_.find(buffer);
  if (it == pool_blocks_.end()) {
    if (!capture_) return false;
    capture_->kept_.push_back(buffer);  // made before the capture: a replay may still read it
    return true;
  }
  std::shared_ptr<GraphPool> pool = std::move(it->second);
  pool_blocks_.erase(it);
  pool->release(buffer);
  return true;  // the pool goes with its last holder (its graph, or this block's tensor)
}

}  // namespace kiln::cuda
