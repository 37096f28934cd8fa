// The CUDA runtime of kiln: device selection, one stream per device, the stream-ordered memory
// pool, and copies to and from the host.
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "kiln/core/log.h"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/launch.cuh"

namespace kiln::cuda {

int device_attribute(cudaDeviceAttr attr, int device) {
  if (device < 0) KILN_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::map<std::pair<int, int>, int> cache;  // (device, attribute) -> value
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(device, static_cast<int>(attr));
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  int value = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, device));
  cache.emplace(key, value);
  return value;
}

bool wgmma_runs(int device) {
#ifdef KILN_NO_SM90A
  (void)device;
  return false;
#else
  return device_attribute(cudaDevAttrComputeCapabilityMajor, device) == 9 &&
         device_attribute(cudaDevAttrComputeCapabilityMinor, device) == 0;
#endif
}

bool dependent_launches() { return device_attribute(cudaDevAttrComputeCapabilityMajor) >= 9; }

CudaBackend::CudaBackend(int device) : device_(device) {
  KILN_CUDA_CHECK(cudaSetDevice(device_));
  KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  // Freed blocks go back to the pool, not to the driver: with an unbounded release threshold a
  // training step's allocations are served from cache after the first step, and stay legal
  // inside a captured CUDA graph.
  KILN_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool_, device_));
  uint64_t threshold = UINT64_MAX;
  KILN_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
  KILN_CUDA_CHECK(cudaMalloc(&fault_, sizeof(DeviceFault)));
  KILN_CUDA_CHECK(cudaMemset(fault_, 0, sizeof(DeviceFault)));
  KILN_CUDA_CHECK(cudaMallocHost(&fault_host_, sizeof(DeviceFault)));
  cudaDeviceProp prop{};
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  logging::debug(detail::concat("cuda:", device_, ": ", prop.name, ", compute capability ", prop.major, ".", prop.minor, ", ",
                            prop.multiProcessorCount, " SMs, ", prop.totalGlobalMem >> 20, " MiB"));
}

CudaBackend::~CudaBackend() {
  // Destructors log, never throw: the process is ending or the device is already gone.
  if (side_stream_) cudaStreamDestroy(side_stream_);
  if (stream_) cudaStreamDestroy(stream_);
  if (fault_) cudaFree(fault_);
  if (fault_host_) cudaFreeHost(fault_host_);
  for (const auto& [block, size] : staging_) cudaFreeHost(block);
}

void* CudaBackend::allocate(size_t bytes) {
  KILN_CUDA_CHECK(cudaSetDevice(device_));
  if (capture_) return allocate_in_capture(bytes == 0 ? 1 : bytes);
  void* p = nullptr;
  cudaError_t err = cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, stream_);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky error before asking for the numbers
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    KILN_FAIL(OutOfMemory, "cuda:", device_, ": out of memory allocating ", bytes, " bytes (",
              free, " bytes free of ", total, ")");
  }
  KILN_CUDA_CHECK(err);
  return p;
}

void CudaBackend::deallocate(void* buffer) noexcept {
  if (buffer && !deallocate_in_pool(buffer)) cudaFreeAsync(buffer, stream_);
}

void CudaBackend::check_not_capturing(const char* what) const {
  KILN_CHECK(!capture_, CaptureError, "cuda:", device_, ": ", what, " inside a captured step: while a step is "
             "captured the host cannot wait for the device or move data between them (read results after the "
             "step, and make tensors from host values before it)");
}

void CudaBackend::write(void* buffer, size_t byte_offset, const void* host, size_t bytes) {
  if (bytes == 0) return;
  check_not_capturing("a copy from the host");
  // Pageable host memory: the copy is staged by the driver and has returned once the source may
  // be reused, so the caller's buffer can go right after.
  KILN_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(buffer) + byte_offset, host, bytes,
                                  cudaMemcpyHostToDevice, stream_));
  sync_and_check_fault();
}

void CudaBackend::read(const void* buffer, size_t byte_offset, void* host, size_t bytes) {
  if (bytes == 0) return;
  check_not_capturing("a read of the device (item(), to_vector(), printing a tensor)");
  KILN_CUDA_CHECK(cudaMemcpyAsync(host, static_cast<const char*>(buffer) + byte_offset, bytes,
                                  cudaMemcpyDeviceToHost, stream_));
  sync_and_check_fault();
}

// A read_async in flight: [fault slot][the bytes] in a pinned block, landed when `landed_` has
// fired. wait() checks the fault copy once, so a fault found then throws as read() would.
class CudaRead final : public PendingRead {
 public:
  CudaRead(CudaBackend& backend, const void* source, size_t bytes)
      : backend_(backend), clears_(backend.fault_clears_) {
    block_ = backend.take_staging(kData + bytes);
    KILN_CUDA_CHECK(cudaSetDevice(backend.device_));
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&landed_, cudaEventDisableTiming));
    char* host = static_cast<char*>(block_.first);
    KILN_CUDA_CHECK(cudaMemcpyAsync(host, backend.fault_, sizeof(DeviceFault), cudaMemcpyDeviceToHost,
                                    backend.stream_));
    if (bytes > 0)
      KILN_CUDA_CHECK(cudaMemcpyAsync(host + kData, source, bytes, cudaMemcpyDeviceToHost, backend.stream_));
    KILN_CUDA_CHECK(cudaEventRecord(landed_, backend.stream_));
  }
  CudaRead(const CudaRead&) = delete;
  CudaRead& operator=(const CudaRead&) = delete;
  ~CudaRead() override {
    // the copy may still be landing in the block: it goes back to the pool once it has
    if (landed_) {
      cudaEventSynchronize(landed_);
      cudaEventDestroy(landed_);
    }
    backend_.give_back_staging(block_);
  }

  bool ready() override {
    if (checked_) return true;
    const cudaError_t e = cudaEventQuery(landed_);
    if (e == cudaErrorNotReady) return false;
    KILN_CUDA_CHECK(e);
    return true;
  }

  const void* wait() override {
    const char* host = static_cast<const char*>(block_.first);
    if (!checked_) {
      KILN_CUDA_CHECK(cudaEventSynchronize(landed_));
      checked_ = true;
      DeviceFault f;
      std::memcpy(&f, host, sizeof f);
      // a slot cleared since this copy was queued was cleared by reporting this very fault
      if (backend_.fault_clears_ == clears_) backend_.throw_fault(f);
    }
    return host + kData;
  }

 private:
  static constexpr size_t kData = 256;  // the bytes start here, past the fault slot's copy, aligned
  static_assert(sizeof(DeviceFault) <= kData);
  CudaBackend& backend_;
  std::pair<void*, size_t> block_;
  uint64_t clears_;  // the backend's fault_clears_ when the copy was queued
  cudaEvent_t landed_ = nullptr;
  bool checked_ = false;  // waited for, and the fault copy looked at
};

std::unique_ptr<PendingRead> CudaBackend::read_async(const void* buffer, size_t byte_offset, size_t bytes) {
  check_not_capturing("a read of the device (read_async)");
  return std::make_unique<CudaRead>(*this, static_cast<const char*>(buffer) + byte_offset, bytes);
}

std::pair<void*, size_t> CudaBackend::take_staging(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(staging_mutex_);
    // the smallest free block that holds `bytes`
    auto best = staging_.end();
    for (auto it = staging_.begin(); it != staging_.end(); ++it)
      if (it->second >= bytes && (best == staging_.end() || it->second < best->second)) best = it;
    if (best != staging_.end()) {
      const std::pair<void*, size_t> block = *best;
      staging_.erase(best);
      return block;
    }
  }
  size_t size = 4096;  // a page at least: the reads of a training loop are a few losses
  while (size < bytes) size *= 2;
  void* block = nullptr;
  KILN_CUDA_CHECK(cudaSetDevice(device_));
  const cudaError_t err = cudaMallocHost(&block, size);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    KILN_FAIL(OutOfMemory, "cuda:", device_, ": out of pinned host memory allocating ", size,
              " bytes for an asynchronous read");
  }
  KILN_CUDA_CHECK(err);
  return {block, size};
}

void CudaBackend::give_back_staging(std::pair<void*, size_t> block) noexcept {
  std::lock_guard<std::mutex> lock(staging_mutex_);
  staging_.push_back(block);
}

void CudaBackend::synchronize() {
  check_not_capturing("synchronize()");
  sync_and_check_fault();
}

void CudaBackend::sync_and_check_fault() {
  KILN_CUDA_CHECK(cudaMemcpyAsync(fault_host_, fault_, sizeof(DeviceFault), cudaMemcpyDeviceToHost, stream_));
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  throw_fault(*fault_host_);
}

void CudaBackend::throw_fault(const DeviceFault& fault) {
  if (fault.op == 0) return;
  const DeviceFault f = fault;
  ++fault_clears_;
  KILN_CUDA_CHECK(cudaMemsetAsync(fault_, 0, sizeof(DeviceFault), stream_));
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  static const char* const names[] = {"?", "gather", "index_add", "one_hot", "cross_entropy", "cross_entropy_backward"};
  const char* op = f.op > 0 && f.op < 6 ? names[f.op] : "?";
  KILN_FAIL(ValueError, "cuda ", op, ": index ", f.value, " at position ", f.position, " is outside [0, ",
            f.bound, ") (found on the device, reported at the next synchronisation)");
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: none, and nothing left pending
    return 0;
  }
  return count;
}

CudaBackend& backend(int index) {
  static std::mutex mutex;
  // Never destroyed: tensors freed during static destruction still return their memory here.
  static auto& backends = *new std::vector<std::unique_ptr<CudaBackend>>();
  std::lock_guard<std::mutex> lock(mutex);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    KILN_FAIL(BackendUnavailable, "device cuda:", index, ": no usable CUDA device (",
              cudaGetErrorString(err), ")");
  }
  KILN_CHECK(index >= 0 && index < count, BackendUnavailable, "device cuda:", index, ": this machine has ",
             count, " CUDA device", count == 1 ? "" : "s");
  if (backends.size() < static_cast<size_t>(count)) backends.resize(static_cast<size_t>(count));
  auto& slot = backends[static_cast<size_t>(index)];
  if (!slot) slot = std::make_unique<CudaBackend>(index);
  return *slot;
}

}  // namespace kiln::cuda
