#include "kiln/kernels/cuda/nccl_group.h"

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/log.h"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"

namespace kiln::cuda {

namespace {

#define KILN_NCCL_CHECK(call)                                                                         \
  do {                                                                                                \
    ncclResult_t kiln_nccl_rc_ = (call);                                                              \
    KILN_CHECK(kiln_nccl_rc_ == ncclSuccess, DistributedError, "NCCL call ", #call, " failed: ",       \
               ncclGetErrorString(kiln_nccl_rc_), " (", ncclGetLastError(nullptr), ")");              \
  } while (0)

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::u8: return ncclUint8;
    case DType::bf16: return ncclBfloat16;
  }
  KILN_FAIL(DTypeError, "nccl: no NCCL type for dtype ", dtype);
}

// After ProcessGroup::check_reduction.
ncclRedOp_t nccl_reduction(ReduceOp op) {
  return op == ReduceOp::mean ? ncclAvg : op == ReduceOp::max ? ncclMax : op == ReduceOp::min ? ncclMin : ncclSum;
}

class NcclGroup;

// A CUDA event recorded after a collective, on the stream it ran on; returned to the group's pool
// once both the Work and the watchdog are done with it.
struct DoneEvent {
  DoneEvent(NcclGroup& g, cudaEvent_t e) : group(g), event(e) {}
  DoneEvent(const DoneEvent&) = delete;  // one owner returns the event, once
  DoneEvent& operator=(const DoneEvent&) = delete;
  ~DoneEvent();
  NcclGroup& group;
  cudaEvent_t event;
};

class NcclWork final : public Work {
 public:
  NcclWork(cudaStream_t kiln_stream, std::shared_ptr<DoneEvent> done, std::vector<Tensor> tensors)
      : kiln_stream_(kiln_stream), done_(std::move(done)), tensors_(std::move(tensors)) {}
  ~NcclWork() override {
    if (done_) cudaStreamWaitEvent(kiln_stream_, done_->event, 0);  // tensors_ may be freed after this
  }
  void wait() override {
    if (!done_) return;
    KILN_CUDA_CHECK(cudaStreamWaitEvent(kiln_stream_, done_->event, 0));
    done_.reset();
    tensors_.clear();  // freed (if last) on kiln's stream, after the wait
  }

 private:
  cudaStream_t kiln_stream_;
  std::shared_ptr<DoneEvent> done_;
  std::vector<Tensor> tensors_;
};

class NcclGroup final : public ProcessGroup, public std::enable_shared_from_this<NcclGroup> {
 public:
  NcclGroup(std::shared_ptr<ProcessGroup> bootstrap, std::chrono::milliseconds timeout)
      : ProcessGroup(bootstrap->rank(), bootstrap->size(), bootstrap->local_rank(), bootstrap->local_size(), timeout),
        bootstrap_(std::move(bootstrap)),
        device_(local_rank()) {
    int count = 0;
    KILN_CUDA_CHECK(cudaGetDeviceCount(&count));
    KILN_CHECK(local_size() <= count, DistributedError, "nccl: ", local_size(), " ranks run on this machine but it "
               "has ", count, " CUDA device", count == 1 ? "" : "s", "; NCCL needs a GPU of its own for each rank "
               "(start at most ", count, " processes per machine, e.g. mpirun -np ", count, ")");
    backend_ = &cuda::backend(device_);  // sets up kiln's stream on this device
    KILN_CUDA_CHECK(cudaSetDevice(device_));
    ncclUniqueId id;
    if (rank() == 0) KILN_NCCL_CHECK(ncclGetUniqueId(&id));
    Tensor bytes = zeros({static_cast<int64_t>(sizeof(id))}, DType::u8);
    if (rank() == 0) std::memcpy(bytes.storage()->data(), &id, sizeof(id));
    bootstrap_->broadcast(bytes, 0);
    std::memcpy(&id, bytes.storage()->data(), sizeof(id));
    KILN_NCCL_CHECK(ncclCommInitRank(&comm_, size(), id, rank()));
    // The highest priority: a bucket of gradients ready to go should not queue behind backward's kernels.
    int least = 0, greatest = 0;
    KILN_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    KILN_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&kiln_ready_, cudaEventDisableTiming));
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&group_done_, cudaEventDisableTiming));
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclGroup() override {
    // The collectives still queued finish first, with the watchdog still watching: a rank that
    // never comes must not hang this one at exit.
    cudaStreamSynchronize(backend_->stream());
    cudaStreamSynchronize(stream_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    in_flight_.clear();  // done now; their events go back to the pool before it is emptied
    ncclCommDestroy(comm_);
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    cudaEventDestroy(kiln_ready_);
    cudaEventDestroy(group_done_);
    cudaStreamDestroy(stream_);
  }

  using ProcessGroup::all_reduce;
  std::string_view name() const override { return "nccl"; }
  Device device() const override { return Device::cuda(device_); }

  std::unique_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op) override {
    return all_reduce_async(std::span<const Tensor>(&t, 1), op);
  }
  // Several tensors: one NCCL group (ncclGroupStart .. ncclGroupEnd), so one kernel launch.
  std::unique_ptr<Work> all_reduce_async(std::span<const Tensor> tensors, ReduceOp op) override {
    std::shared_ptr<DoneEvent> done = reduce(tensors, op, Stream::group);
    std::vector<Tensor> kept;
    if (done) kept.assign(tensors.begin(), tensors.end());
    return std::make_unique<NcclWork>(backend_->stream(), std::move(done), std::move(kept));
  }
  // The blocking form runs on kiln's stream itself: nothing overlaps it, so the events that
  // order the group's stream would only add their latency, which counts for small tensors (NOTES.md).
  void all_reduce(const Tensor& t, ReduceOp op) override { reduce(std::span<const Tensor>(&t, 1), op, Stream::kiln); }
  void all_reduce(std::span<const Tensor> tensors, ReduceOp op) override { reduce(tensors, op, Stream::kiln); }

  void broadcast(const Tensor& t, int root) override {
    check_broadcast(t, root);
    if (size() == 1) return;  // t is already root's
    launch("broadcast", std::span<const Tensor>(&t, 1), Stream::kiln, [&](cudaStream_t s) {
      void* p = t.ref().address();
      return ncclBroadcast(p, p, static_cast<size_t>(t.numel()), nccl_type(t.dtype()), root, comm_, s);
    });
  }

  void all_gather(const Tensor& t, const Tensor& out) override {
    check_all_gather(t, out);
    launch("all_gather", std::span<const Tensor>(&t, 1), Stream::kiln, [&](cudaStream_t s) {
      return ncclAllGather(t.ref().address(), out.ref().address(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                           comm_, s);
    });
  }

  void barrier() override {
    backend_->synchronize();  // this rank's collectives are done (the watchdog guards the wait)
    bootstrap_->barrier();
  }

  std::vector<std::string> all_gather_string(const std::string& value) override {
    return bootstrap_->all_gather_string(value);
  }

  void release(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_events_.push_back(e);
  }

 private:
  // Where a collective runs: on the group's stream, behind an event of kiln's (so that it can
  // overlap the kernels queued after it: all_reduce_async), or on kiln's stream itself (the
  // blocking forms). Either way the collectives of the group run on the GPU in the order they
  // were called: one on kiln's stream first waits for those still queued on the group's.
  enum class Stream { group, kiln };

  std::shared_ptr<DoneEvent> reduce(std::span<const Tensor> tensors, ReduceOp op, Stream where) {
    for (const Tensor& t : tensors) check_reduction(op, t);
    // One rank: every reduction is t itself. NCCL would still pass over the data, a visible part of
    // a backward pass (measurement: NOTES.md).
    if (size() == 1) return nullptr;
    const ncclRedOp_t nccl_op = nccl_reduction(op);
    return launch("all_reduce", tensors, where, [&](cudaStream_t s) {
      for (const Tensor& t : tensors) {
        void* p = t.ref().address();
        ncclResult_t rc = ncclAllReduce(p, p, static_cast<size_t>(t.numel()), nccl_type(t.dtype()), nccl_op, comm_, s);
        if (rc != ncclSuccess) return rc;
      }
      return ncclSuccess;
    });
  }

  // Queues `call` (the NCCL calls of one collective over `tensors`; several calls go as one NCCL
  // group) on `where`, after the work queued so far on kiln's stream, and hands its completion to
  // the watchdog; returns the event of that completion (none when there are no elements), which
  // kiln's stream waits for when the collective ran on the group's. The caller checked the tensors.
  template <class Call>
  std::shared_ptr<DoneEvent> launch(std::string_view collective, std::span<const Tensor> tensors, Stream where,
                                    Call call) {
    const uint64_t sequence = ++sequence_;
    cudaStream_t kiln_stream = backend_->stream();
    int64_t numel = 0;
    for (const Tensor& t : tensors) numel += t.numel();
    if (numel == 0) return nullptr;
    const Described what{collective, sequence, tensors.size(), numel, tensors.front().dtype()};
    KILN_CUDA_CHECK(cudaSetDevice(device_));
    cudaStream_t s = kiln_stream;
    if (where == Stream::group) {
      KILN_CUDA_CHECK(cudaEventRecord(kiln_ready_, kiln_stream));
      KILN_CUDA_CHECK(cudaStreamWaitEvent(stream_, kiln_ready_, 0));
      s = stream_;
    } else if (group_stream_used_) {
      KILN_CUDA_CHECK(cudaEventRecord(group_done_, stream_));
      KILN_CUDA_CHECK(cudaStreamWaitEvent(kiln_stream, group_done_, 0));
      group_stream_used_ = false;
    }
    ncclResult_t rc = ncclSuccess;
    if (tensors.size() == 1) {
      rc = call(s);
    } else {
      KILN_NCCL_CHECK(ncclGroupStart());
      rc = call(s);
      ncclResult_t end = ncclGroupEnd();  // ended even after a failed call
      if (rc == ncclSuccess) rc = end;
    }
    KILN_CHECK(rc == ncclSuccess, DistributedError, describe(what), " failed: ", ncclGetErrorString(rc), " (",
               ncclGetLastError(comm_), ")");
    auto done = std::make_shared<DoneEvent>(*this, take_event());
    KILN_CUDA_CHECK(cudaEventRecord(done->event, s));
    if (Capture* capture = backend_->capture()) {
      // Recorded into a graph, not run: its event orders the streams inside the graph, and the
      // watchdog watches each replay instead.
      watch_replays(*capture, what);
    } else {
      std::lock_guard<std::mutex> lock(mutex_);
      in_flight_.push_back({done, std::chrono::steady_clock::now() + timeout(), what});
    }
    // The watchdog is not woken: it looks within half a second, and timeouts are counted from
    // the deadline set here; a wake-up (a futex call) would cost small collectives microseconds.
    if (where == Stream::group) group_stream_used_ = true;
    return done;
  }

  // What a collective moved, or what a captured graph's replay holds, for errors: a message is
  // built only when one fails.
  struct Described {
    std::string_view collective;  // "all_reduce"
    uint64_t sequence;            // the collective's number; in a graph, its first collective's
    size_t tensors;               // in a graph: its collectives
    int64_t numel;
    DType dtype;  // the first tensor's
    uint64_t graph = 0;  // a captured graph's replay: the capture's id (Capture::id), else 0
    uint64_t last = 0;   // in a graph: its last collective's number
    int64_t replay = 0;  // in a graph: which replay, from 1
  };
  // "nccl all_reduce #7 (1000 f32 elements) on rank 0 of 2", or "(3 tensors, 1000 elements)";
  // "nccl graph #2, replay 15: the 3 collectives captured as #5-#7 (1000 elements) on rank 0 of 2".
  std::string describe(const Described& d) const {
    const std::string where = " on rank " + std::to_string(rank()) + " of " + std::to_string(size());
    if (d.graph != 0)
      return "nccl graph #" + std::to_string(d.graph) + ", replay " + std::to_string(d.replay) + ": the " +
             std::to_string(d.tensors) + " collective" + (d.tensors == 1 ? "" : "s") + " captured as #" +
             std::to_string(d.sequence) + (d.last != d.sequence ? "-#" + std::to_string(d.last) : "") + " (" +
             std::to_string(d.numel) + " elements)" + where;
    std::string what = d.tensors == 1 ? std::to_string(d.numel) + " " + std::string(dtype_name(d.dtype)) + " elements"
                                      : std::to_string(d.tensors) + " tensors, " + std::to_string(d.numel) + " elements";
    return "nccl " + std::string(d.collective) + " #" + std::to_string(d.sequence) + " (" + what + ")" + where;
  }

  // A collective queued while `capture` records: the graph's replays are watched as one. The
  // first collective of a capture registers a hook that, after each replay is queued, records an
  // event behind it on kiln's stream and hands that to the watchdog, so that a replay whose
  // collectives never complete (another rank died or hangs) ends this rank within the timeout,
  // as an eager collective would. Later collectives of the capture add to its description.
  void watch_replays(Capture& capture, const Described& what) {
    if (!captured_ || captured_->graph != capture.id()) {
      captured_ = std::make_shared<Described>(what);
      captured_->graph = capture.id();
      captured_->tensors = 0;
      captured_->numel = 0;
      capture.after_replay([group = weak_from_this(), graph = captured_] {
        if (auto g = group.lock()) g->watch_replay(*graph);
      });
    }
    captured_->tensors += 1;
    captured_->numel += what.numel;
    captured_->last = what.sequence;
  }

  void watch_replay(Described& graph) {
    ++graph.replay;
    auto done = std::make_shared<DoneEvent>(*this, take_event());
    KILN_CUDA_CHECK(cudaSetDevice(device_));
    KILN_CUDA_CHECK(cudaEventRecord(done->event, backend_->stream()));
    std::lock_guard<std::mutex> lock(mutex_);
    in_flight_.push_back({std::move(done), std::chrono::steady_clock::now() + timeout(), graph});
  }

  cudaEvent_t take_event() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_events_.empty()) {
        cudaEvent_t e = free_events_.back();
        free_events_.pop_back();
        return e;
      }
    }
    cudaEvent_t e;
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  struct InFlight {
    std::shared_ptr<DoneEvent> done;
    std::chrono::steady_clock::time_point deadline;
    Described what;
  };

  // The watchdog. Collectives complete in the order they were queued (the group's stream and
  // kiln's wait on each other), so when the newest is done all are: one query per wake-up after a
  // run of them. Otherwise the oldest not done is the one to watch.
  void watch() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      wake_.wait_for(lock, std::chrono::milliseconds(in_flight_.empty() ? 500 : 5));
      std::vector<std::shared_ptr<DoneEvent>> finished;  // released below, without the lock
      if (!in_flight_.empty() && cudaEventQuery(in_flight_.back().done->event) == cudaSuccess) {
        for (InFlight& f : in_flight_) finished.push_back(std::move(f.done));
        in_flight_.clear();
      }
      while (!in_flight_.empty()) {
        InFlight& oldest = in_flight_.front();
        cudaError_t state = cudaEventQuery(oldest.done->event);
        if (state == cudaSuccess) {
          finished.push_back(std::move(oldest.done));
          in_flight_.pop_front();
          continue;
        }
        if (state != cudaErrorNotReady)
          die(describe(oldest.what) + " failed on the GPU: " + cudaGetErrorString(state));
        if (std::chrono::steady_clock::now() > oldest.deadline) die(timed_out(describe(oldest.what)));
        break;
      }
      lock.unlock();
      finished.clear();  // may return events to the pool, which takes the lock
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
        die(std::string("nccl: rank ") + std::to_string(rank()) + ": asynchronous NCCL error: " +
            ncclGetErrorString(async) + " (" + ncclGetLastError(comm_) + ")");
      lock.lock();
    }
  }

  // Ends the process at once. Not ncclCommAbort first: it would release the host thread blocked
  // behind the stuck collective, which would go on with the tensor the collective never filled
  // (print it, or save it) before the exit; the driver stops the kernels when the process ends.
  [[noreturn]] void die(const std::string& message) {
    logging::error(message + "; ending this rank");
    logging::flush();
    std::_Exit(1);
  }

  std::shared_ptr<ProcessGroup> bootstrap_;
  int device_;
  CudaBackend* backend_ = nullptr;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t kiln_ready_ = nullptr;   // kiln's stream, before a collective on the group's
  cudaEvent_t group_done_ = nullptr;   // the group's stream, before a collective on kiln's
  bool group_stream_used_ = false;     // since the last collective on kiln's stream
  uint64_t sequence_ = 0;
  std::shared_ptr<Described> captured_;  // the latest capture's collectives (watch_replays)

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<InFlight> in_flight_;
  std::vector<cudaEvent_t> free_events_;
  bool stopping_ = false;
  std::thread watchdog_;
};

DoneEvent::~DoneEvent() { group.release(event); }

}  // namespace

std::shared_ptr<ProcessGroup> nccl_group(std::shared_ptr<ProcessGroup> bootstrap, const ProcessGroupOptions& options) {
  KILN_CHECK(bootstrap && bootstrap->device().is_cpu(), ValueError, "nccl: the bootstrap group must be the job's MPI group");
  return std::make_shared<NcclGroup>(std::move(bootstrap), effective_timeout(options));
}

}  // namespace kiln::cuda
