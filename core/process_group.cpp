#include "kiln/core/process_group.h"

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/error.h"

namespace kiln {

ProcessGroup::ProcessGroup(int rank, int size, int local_rank, int local_size, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), local_rank_(local_rank), local_size_(local_size), timeout_(timeout) {}

void ProcessGroup::all_reduce(const Tensor& t, ReduceOp op) { all_reduce_async(t, op)->wait(); }

void ProcessGroup::all_reduce(std::span<const Tensor> tensors, ReduceOp op) { all_reduce_async(tensors, op)->wait(); }

namespace {

// The collectives of several tensors, waited for together.
class Works final : public Work {
 public:
  explicit Works(std::vector<std::unique_ptr<Work>> works) : works_(std::move(works)) {}
  void wait() override {
    for (auto& w : works_) w->wait();
  }

 private:
  std::vector<std::unique_ptr<Work>> works_;
};

}  // namespace

std::unique_ptr<Work> ProcessGroup::all_reduce_async(std::span<const Tensor> tensors, ReduceOp op) {
  for (const Tensor& t : tensors) check_reduction(op, t);  // all checked before any goes
  std::vector<std::unique_ptr<Work>> works;
  for (const Tensor& t : tensors) works.push_back(all_reduce_async(t, op));
  return std::make_unique<Works>(std::move(works));
}

void ProcessGroup::check_tensor(std::string_view collective, const Tensor& t) const {
  KILN_CHECK(t.defined(), ValueError, name(), " ", collective, ": the tensor is undefined");
  KILN_CHECK(t.device() == device(), DeviceError, name(), " ", collective, ": the tensor is on ", t.device(),
             ", but this group's tensors live on ", device());
  KILN_CHECK(t.is_contiguous(), ValueError, name(), " ", collective, ": the tensor of shape ", t.shape(),
             " is not contiguous (call contiguous() first)");
}

void ProcessGroup::check_reduction(ReduceOp op, const Tensor& t) const {
  check_tensor("all_reduce", t);
  KILN_CHECK(op == ReduceOp::sum || op == ReduceOp::mean || op == ReduceOp::max || op == ReduceOp::min, ValueError,
             name(), " all_reduce: ", reduce_op_name(op), " is not a reduction over ranks (sum, mean, max or min)");
  KILN_CHECK(op != ReduceOp::mean || is_floating(t.dtype()), DTypeError, name(), " all_reduce: the mean of a ",
             t.dtype(), " tensor: a mean over ranks takes floating-point tensors (reduce the sum and divide)");
  t.storage()->bump_version();  // written in place
}

void ProcessGroup::check_broadcast(const Tensor& t, int root) const {
  check_tensor("broadcast", t);
  KILN_CHECK(root >= 0 && root < size(), ValueError, name(), " broadcast: root ", root,
             " is not a rank of this group of ", size());
  t.storage()->bump_version();  // written in place (but on the root)
}

void ProcessGroup::check_all_gather(const Tensor& t, const Tensor& out) const {
  check_tensor("all_gather", t);
  check_tensor("all_gather", out);
  Shape expected = t.shape();
  expected.insert(0, size());
  KILN_CHECK(out.shape() == expected && out.dtype() == t.dtype(), ShapeError, name(), " all_gather: out has shape ",
             out.shape(), " and dtype ", out.dtype(), "; a group of ", size(), " gathering ", t.shape(), " ",
             t.dtype(), " needs ", expected, " ", t.dtype());
  out.storage()->bump_version();  // written in place
}

void ProcessGroup::check_same(std::string_view what, const std::string& value) {
  std::vector<std::string> values = all_gather_string(value);
  for (size_t r = 1; r < values.size(); ++r)
    KILN_CHECK(values[r] == values[0], DistributedError, "the ranks disagree on ", what, ": rank 0 has ", values[0],
               ", rank ", r, " has ", values[r], " (every rank must run the same program with the same settings)");
}

std::string ProcessGroup::timed_out(const std::string& what) const {
  std::string seconds = std::to_string(static_cast<double>(timeout_.count()) / 1000.0);
  seconds.erase(seconds.find_last_not_of('0') + 1);
  if (seconds.back() == '.') seconds.pop_back();
  return what + " did not complete within " + seconds + " s (KILN_DIST_TIMEOUT): another rank died, hangs, or " +
         "called a different collective";
}

bool launched_with_several_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v) > 1;
  }
  return false;
}

std::chrono::milliseconds effective_timeout(const ProcessGroupOptions& options) {
  const char* env = std::getenv("KILN_DIST_TIMEOUT");
  if (!env || !*env) return options.timeout;
  char* end = nullptr;
  double seconds = std::strtod(env, &end);
  KILN_CHECK(end && *end == '\0' && seconds > 0, ValueError, "KILN_DIST_TIMEOUT='", env,
             "': expected a positive number of seconds");
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace kiln
