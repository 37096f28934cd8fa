#include "kiln/layers/distributed.h"

#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kiln/autograd/engine.h"

namespace kiln::nn {

namespace {

int64_t bytes_of(const Tensor& p) { return p.numel() * static_cast<int64_t>(dtype_size(p.dtype())); }

}  // namespace

// The gradient buckets and the state of one backward: which parameters are ready, which buckets
// are launched. The hooks hold it weakly, so that a hook outliving its DistributedDataParallel
// (it cannot: the destructor removes them) would do nothing.
struct DistributedDataParallel::Reducer {
  struct Slot {
    std::string name;
    Tensor param;
    size_t bucket = 0;
    bool ready = false;
  };
  struct Bucket {
    std::vector<size_t> slots;  // its parameters, in the order they were placed
    size_t pending = 0;         // not yet ready in this backward
  };

  std::shared_ptr<ProcessGroup> group;
  bool find_unused = false;
  std::vector<Slot> slots;
  std::vector<Bucket> buckets;
  std::vector<uint64_t> hooks;  // one per slot
  bool sync = true;             // false inside no_sync()
  bool in_backward = false;     // a hook fired and the end-of-backward callback is queued
  size_t next_launch = 0;       // buckets launch in order: the next one to go
  std::vector<std::unique_ptr<Work>> works;  // this backward's, one per launch

  // A parameter's gradient is final: its bucket, and any after it, go once they are complete.
  void ready(size_t index, const Tensor& leaf, const std::weak_ptr<Reducer>& self) {
    if (!sync) return;
    if (!in_backward) start_backward(self);
    if (!leaf.grad().is_contiguous()) leaf.set_grad(leaf.grad().contiguous());  // one the user set
    Slot& s = slots[index];
    s.ready = true;
    if (--buckets[s.bucket].pending == 0) launch_ready_buckets();
  }

  void start_backward(const std::weak_ptr<Reducer>& self) {
    in_backward = true;
    next_launch = 0;
    for (Slot& s : slots) s.ready = false;
    for (Bucket& b : buckets) b.pending = b.slots.size();
    autograd::queue_callback([self] {
      if (auto r = self.lock()) r->finish_backward();
    });
  }

  // The complete buckets from the next in order, each averaged in place as one collective (one
  // NCCL group, one launch): the same collectives on every rank, whichever order their gradients
  // came in. A bucket overlaps the backward kernels queued after it (all_reduce_async, on the
  // group's stream); the last has nothing left to overlap, and the blocking form queues it on
  // kiln's stream itself, without the events between streams.
  void launch_ready_buckets() {
    for (; next_launch < buckets.size() && buckets[next_launch].pending == 0; ++next_launch) {
      std::vector<Tensor> grads;
      for (size_t i : buckets[next_launch].slots) grads.push_back(slots[i].param.grad());
      if (next_launch + 1 == buckets.size()) group->all_reduce(grads, ReduceOp::mean);
      else works.push_back(group->all_reduce_async(grads, ReduceOp::mean));
    }
  }

  // The end of backward: the buckets of parameters it did not reach go, and the host moves on;
  // the optimizer's kernels, queued next, wait on the GPU for the reductions.
  void finish_backward() {
    in_backward = false;
    std::vector<size_t> missing;
    for (size_t i = 0; i < slots.size(); ++i)
      if (!slots[i].ready) missing.push_back(i);
    if (!missing.empty() && !find_unused) {
      std::string names;
      for (auto i = missing.rbegin(); i != missing.rend(); ++i)  // in registration order
        names += (names.empty() ? "" : ", ") + slots[*i].name;
      KILN_FAIL(AutogradError, "DistributedDataParallel: no gradient reached ", names, " in this backward on rank ",
                group->rank(), "; every parameter must take part in the loss, or construct with "
                "DistributedDataParallelOptions().find_unused_parameters(true)");
    }
    // A parameter this backward did not reach still brings the gradient it holds (from backward
    // passes under no_sync()), or zeros: this rank's share of the average.
    std::vector<int32_t> mask;  // used here: reached, or holding a gradient
    if (find_unused)
      for (const Slot& s : slots) mask.push_back(s.ready || s.param.grad().defined() ? 1 : 0);
    for (size_t i : missing) {
      Slot& s = slots[i];
      Tensor grad = s.param.grad();
      s.param.set_grad(grad.defined() ? grad.contiguous() : zeros_like(s.param));
      s.ready = true;
      --buckets[s.bucket].pending;
    }
    launch_ready_buckets();
    std::vector<int32_t> used_anywhere;
    if (find_unused) {
      Tensor used = from_vector(mask, {static_cast<int64_t>(mask.size())},
                                TensorOptions(DType::i32).device(group->device()));
      group->all_reduce(used, ReduceOp::max);
      used_anywhere = used.to_vector<int32_t>();
    }
    for (auto& w : works) w->wait();
    works.clear();
    if (find_unused)
      for (size_t i = 0; i < slots.size(); ++i)
        if (used_anywhere[i] == 0) slots[i].param.set_grad(Tensor());  // as one process: no gradient
  }
};

namespace {

std::string describe(const std::string& name, const Tensor& p) {
  std::ostringstream o;
  o << name << " " << p.shape() << " " << p.dtype();
  return o.str();
}

// The ranks hold the same parameters, in the same order: else an error on every rank naming the
// first that differs.
void check_same_parameters(ProcessGroup& group, const NamedTensors& params) {
  std::string mine = std::to_string(params.size()) + " parameters";
  for (const auto& [name, p] : params) {
    mine += '\n';
    mine += describe(name, p);
  }
  std::vector<std::string> all = group.all_gather_string(mine);
  auto lines = [](const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  };
  std::vector<std::string> first = lines(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    std::vector<std::string> other = lines(all[r]);
    size_t i = 0;
    while (i < first.size() && i < other.size() && first[i] == other[i]) ++i;
    const char* none = "nothing more";
    KILN_FAIL(DistributedError, "DistributedDataParallel: the ranks hold different models: after the same ",
              i == 0 ? 0 : i - 1, " parameters, rank 0 has ", i < first.size() ? first[i] : none, ", rank ", r,
              " has ", i < other.size() ? other[i] : none, " (every rank must build the same model)");
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<Module> module, std::shared_ptr<ProcessGroup> group,
                                                 DistributedDataParallelOptions options)
    : Module("DistributedDataParallel"), module_(std::move(module)), group_(std::move(group)), options_(options) {
  KILN_CHECK(module_ && group_, ValueError, "DistributedDataParallel: needs a module and a process group");
  KILN_CHECK(options_.bucket_cap_mb() > 0, ValueError, "DistributedDataParallel: bucket_cap_mb must be positive, got ",
             options_.bucket_cap_mb());
  register_module("module", module_);

  NamedTensors params;
  for (auto& [name, p] : module_->named_parameters()) {
    KILN_CHECK(p.device() == group_->device(), DeviceError, "DistributedDataParallel: parameter ", name, " is on ",
               p.device(), ", but the ", group_->name(), " group's tensors live on ", group_->device(),
               " (move the model there first)");
    if (p.requires_grad()) params.emplace_back(name, p);
  }
  check_same_parameters(*group_, params);
  std::ostringstream settings;
  settings << "bucket_cap_mb " << options_.bucket_cap_mb() << ", broadcast_buffers " << options_.broadcast_buffers()
           << ", find_unused_parameters " << options_.find_unused_parameters();
  group_->check_same("the DistributedDataParallel options", settings.str());

  for (const Tensor& t : module_->parameters()) group_->broadcast(t.detach(), 0);
  for (const Tensor& t : module_->buffers()) group_->broadcast(t, 0);

  // Buckets in reverse parameter order (backward reaches the last layers first), each closed
  // once it holds bucket_cap_mb or more (as PyTorch's): a layer's bias joins its weight.
  reducer_ = std::make_shared<Reducer>();
  Reducer& r = *reducer_;
  r.group = group_;
  r.find_unused = options_.find_unused_parameters();
  const auto cap = static_cast<int64_t>(options_.bucket_cap_mb() * 1024 * 1024);
  int64_t filled = cap;  // bytes in the last bucket (none yet: a new one first)
  for (size_t k = params.size(); k-- > 0;) {
    const auto& [name, p] = params[k];
    if (filled >= cap) {
      r.buckets.emplace_back();
      filled = 0;
    }
    r.slots.push_back({name, p, r.buckets.size() - 1, false});
    r.buckets.back().slots.push_back(r.slots.size() - 1);
    filled += bytes_of(p);
  }
  std::weak_ptr<Reducer> weak = reducer_;
  for (size_t i = 0; i < r.slots.size(); ++i)
    r.hooks.push_back(r.slots[i].param.register_post_accumulate_grad_hook(
        [weak, i](const Tensor& leaf) {
          if (auto reducer = weak.lock()) reducer->ready(i, leaf, weak);
        }));
}

DistributedDataParallel::~DistributedDataParallel() {
  for (size_t i = 0; i < reducer_->slots.size(); ++i)
    reducer_->slots[i].param.remove_post_accumulate_grad_hook(reducer_->hooks[i]);
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  if (is_training() && options_.broadcast_buffers() && group_->size() > 1)
    for (const Tensor& t : module_->buffers()) group_->broadcast(t, 0);
  return module_->forward(x);
}

std::string DistributedDataParallel::extra_repr() const {
  std::ostringstream o;
  o << group_->name() << ", rank " << group_->rank() << " of " << group_->size() << ", " << reducer_->buckets.size()
    << " bucket" << (reducer_->buckets.size() == 1 ? "" : "s") << " closed at " << options_.bucket_cap_mb() << " MB";
  return o.str();
}

std::vector<DistributedDataParallel::BucketInfo> DistributedDataParallel::buckets() const {
  std::vector<BucketInfo> out;
  for (const auto& b : reducer_->buckets) {
    int64_t bytes = 0;
    for (size_t i : b.slots) bytes += bytes_of(reducer_->slots[i].param);
    out.push_back({b.slots.size(), bytes});
  }
  return out;
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.reducer_->sync) {
  ddp_.reducer_->sync = false;
}
DistributedDataParallel::NoSync::~NoSync() { ddp_.reducer_->sync = previous_; }

}  // namespace kiln::nn
