#include "kiln/kernels/cpu/mpi_group.h"

// MPI's C interface only: Open MPI's and MPICH's mpi.h otherwise pull in the deprecated C++
// bindings, which live in a library of their own.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/log.h"

namespace kiln::cpu {

namespace {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

#define KILN_MPI_CHECK(call)                                                                          \
  do {                                                                                                \
    int kiln_mpi_rc_ = (call);                                                                        \
    KILN_CHECK(kiln_mpi_rc_ == MPI_SUCCESS, DistributedError, "MPI call ", #call, " failed: ",         \
               mpi_error_text(kiln_mpi_rc_));                                                         \
  } while (0)

// The process's MPI: started by the first group and ended when the process exits, with
// MPI_Finalize, or with MPI_Abort (which ends every rank of the job) once a collective has failed
// or timed out, since MPI_Finalize would then wait for ranks that will not come. MPI started by
// the program itself is left to the program.
class MpiEnvironment {
 public:
  static MpiEnvironment& get() {
    static MpiEnvironment environment;
    return environment;
  }
  void mark_broken() { broken_ = true; }

  ~MpiEnvironment() {
    if (!owned_) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    if (broken_) {
      logging::error("a collective failed earlier: aborting the MPI job");
      logging::flush();
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
  }

 private:
  MpiEnvironment() {
    int initialized = 0;
    KILN_MPI_CHECK(MPI_Initialized(&initialized));
    if (initialized) return;
    int provided = 0;
    KILN_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided));
    owned_ = true;
  }
  bool owned_ = false;
  bool broken_ = false;
};

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::bf16: break;  // MPI has none: its sums would be wrong
  }
  KILN_FAIL(DTypeError, "mpi: no MPI type for dtype ", dtype, " (keep what is reduced in f32: mixed precision's "
            "parameters and gradients are)");
}

// MPI counts are ints.
int mpi_count(std::string_view collective, const Tensor& t) {
  KILN_CHECK(t.numel() <= INT_MAX, ValueError, "mpi ", collective, ": ", t.numel(), " elements is more than MPI's ",
             INT_MAX, " a call");
  return static_cast<int>(t.numel());
}

// t /= n, as NCCL's average, in t's (floating-point) dtype.
template <class T>
void divide(const Tensor& t, int n) {
  T* p = t.ref().data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] /= static_cast<T>(n);
}

void divide(const Tensor& t, int n) {
  if (t.dtype() == DType::f64) divide<double>(t, n);
  else divide<float>(t, n);
}

class MpiGroup;

class MpiWork final : public Work {
 public:
  MpiWork(MpiGroup& group, MPI_Request request, Tensor tensor, bool mean, std::string what)
      : group_(group), request_(request), tensor_(std::move(tensor)), mean_(mean), what_(std::move(what)) {}
  ~MpiWork() override;
  void wait() override;

 private:
  MpiGroup& group_;
  MPI_Request request_;
  Tensor tensor_;  // kept alive while MPI writes into it
  bool mean_;
  std::string what_;
  bool done_ = false;
};

class MpiGroup final : public ProcessGroup {
 public:
  MpiGroup(MPI_Comm comm, int rank, int size, int local_rank, int local_size, std::chrono::milliseconds timeout)
      : ProcessGroup(rank, size, local_rank, local_size, timeout), comm_(comm) {}
  ~MpiGroup() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && !broken_) MPI_Comm_free(&comm_);
  }

  std::string_view name() const override { return "mpi"; }
  Device device() const override { return Device::cpu(); }

  using ProcessGroup::all_reduce_async;  // several tensors: one MPI_Iallreduce each, all under way at once
  std::unique_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op) override {
    check_reduction(op, t);
    std::string what = start("all_reduce", t);
    const MPI_Op mpi_op = op == ReduceOp::max ? MPI_MAX : op == ReduceOp::min ? MPI_MIN : MPI_SUM;
    MPI_Request request;
    KILN_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, t.ref().address(), mpi_count("all_reduce", t), mpi_type(t.dtype()),
                                  mpi_op, comm_, &request));
    return std::make_unique<MpiWork>(*this, request, t, op == ReduceOp::mean, std::move(what));
  }

  void broadcast(const Tensor& t, int root) override {
    check_broadcast(t, root);
    std::string what = start("broadcast", t);
    MPI_Request request;
    KILN_MPI_CHECK(MPI_Ibcast(t.ref().address(), mpi_count("broadcast", t), mpi_type(t.dtype()), root, comm_, &request));
    wait(request, what);
  }

  void all_gather(const Tensor& t, const Tensor& out) override {
    check_all_gather(t, out);
    std::string what = start("all_gather", t);
    MPI_Request request;
    int n = mpi_count("all_gather", t);
    KILN_MPI_CHECK(MPI_Iallgather(t.ref().address(), n, mpi_type(t.dtype()), out.ref().address(), n, mpi_type(t.dtype()),
                                  comm_, &request));
    wait(request, what);
  }

  void barrier() override {
    std::string what = start("barrier", Tensor());
    MPI_Request request;
    KILN_MPI_CHECK(MPI_Ibarrier(comm_, &request));
    wait(request, what);
  }

  std::vector<std::string> all_gather_string(const std::string& value) override {
    std::string what = start("all_gather_string", Tensor());
    int64_t length = static_cast<int64_t>(value.size());
    std::vector<int64_t> lengths(static_cast<size_t>(size()));
    MPI_Request request;
    KILN_MPI_CHECK(MPI_Iallgather(&length, 1, MPI_INT64_T, lengths.data(), 1, MPI_INT64_T, comm_, &request));
    wait(request, what);
    std::vector<int> counts, displacements;
    int64_t total = 0;
    for (int64_t l : lengths) {
      KILN_CHECK(total + l <= INT_MAX, ValueError, "mpi all_gather_string: more than ", INT_MAX, " bytes in all");
      counts.push_back(static_cast<int>(l));
      displacements.push_back(static_cast<int>(total));
      total += l;
    }
    std::string all(static_cast<size_t>(total), '\0');
    KILN_MPI_CHECK(MPI_Iallgatherv(value.data(), static_cast<int>(length), MPI_CHAR, all.data(), counts.data(),
                                   displacements.data(), MPI_CHAR, comm_, &request));
    wait(request, what);
    std::vector<std::string> values;
    for (size_t r = 0; r < lengths.size(); ++r)
      values.push_back(all.substr(static_cast<size_t>(displacements[r]), static_cast<size_t>(lengths[r])));
    return values;
  }

  // Polls `request` until it completes; past the timeout the group is broken and this throws.
  void wait(MPI_Request& request, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    for (int polls = 0;; ++polls) {
      int done = 0;
      int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) fail(what + " failed: " + mpi_error_text(rc));
      if (done) return;
      if (std::chrono::steady_clock::now() > deadline)
        fail(timed_out(what));
      // Open MPI moves a nonblocking collective forward only inside MPI calls, so polling without
      // pause keeps a large all-reduce as fast as MPI_Allreduce (sleeping between polls made it many
      // times slower: NOTES.md); past the first polls, yield the core to ranks that share it
      // (mpirun --oversubscribe).
      if (polls > 1000) std::this_thread::yield();
    }
  }

 private:
  // Names the collective for errors ("mpi all_reduce #12 (4096 f32 elements) on rank 1 of 3")
  // and refuses a broken group.
  std::string start(std::string_view collective, const Tensor& t) {
    std::string what = "mpi " + std::string(collective) + " #" + std::to_string(++sequence_);
    if (t.defined()) what += " (" + std::to_string(t.numel()) + " " + std::string(dtype_name(t.dtype())) + " elements)";
    what += " on rank " + std::to_string(rank()) + " of " + std::to_string(size());
    KILN_CHECK(!broken_, DistributedError, what, ": the group is broken by an earlier failure (", broken_reason_, ")");
    return what;
  }

  [[noreturn]] void fail(const std::string& message) {
    broken_ = true;
    broken_reason_ = message;
    MpiEnvironment::get().mark_broken();
    KILN_FAIL(DistributedError, message);
  }

  MPI_Comm comm_;
  uint64_t sequence_ = 0;
  bool broken_ = false;
  std::string broken_reason_;
};

MpiWork::~MpiWork() {
  if (done_) return;
  try {
    wait();
  } catch (const std::exception& e) {
    logging::error(e.what());  // destructors log, never throw
  }
}

void MpiWork::wait() {
  if (done_) return;
  done_ = true;
  group_.wait(request_, what_);
  if (mean_) divide(tensor_, group_.size());
}

}  // namespace

std::shared_ptr<ProcessGroup> mpi_world(const ProcessGroupOptions& options) {
  std::chrono::milliseconds timeout = effective_timeout(options);
  MpiEnvironment::get();
  MPI_Comm comm;
  KILN_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  KILN_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  int rank = 0, size = 0, local_rank = 0, local_size = 0;
  KILN_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  KILN_MPI_CHECK(MPI_Comm_size(comm, &size));
  MPI_Comm local;
  KILN_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
  KILN_MPI_CHECK(MPI_Comm_rank(local, &local_rank));
  KILN_MPI_CHECK(MPI_Comm_size(local, &local_size));
  KILN_MPI_CHECK(MPI_Comm_free(&local));
  return std::make_shared<MpiGroup>(comm, rank, size, local_rank, local_size, timeout);
}

}  // namespace kiln::cpu
