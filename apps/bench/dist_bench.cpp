// dist-bench: data parallelism across the ranks of an mpirun job, kiln against what it is measured
// by. One process per GPU (NCCL), or CPU processes through MPI with --device cpu.
//
//   allreduce  an f32 sum all-reduce in place over messages of 4K, 16K, ... 1G bytes (powers of 4,
//              then 128M, 256M): kiln's ProcessGroup::all_reduce against the library under it called
//              directly in the same program: NCCL on CUDA (a communicator of its own, its id sent
//              through MPI, ncclAllReduce on a stream of its own), MPI_Allreduce on the CPU. Per
//              size: time per call, algbw = bytes / time, busbw = algbw x 2(n-1)/n (nccl-tests'
//              formula, which makes rank counts comparable; 0 with one rank, where nothing crosses
//              a link) and the time ratio kiln / reference.
//   ddp        the training step of 8 x (Linear 4096->4096, ReLU) (nn::Sequential), MSE against a
//              fixed random target, SGD lr 0.01, TF32 on: (a) every rank trains its own copy alone,
//              all ranks at once, each on its own GPU, then (b) the same model wrapped in
//              nn::DistributedDataParallel; efficiency = (a) / (b), at each per-rank batch; and
//              (c) the DDP step inside no_sync(), the wrapper without its reduction (what the
//              reduction costs beyond the wire: (b) - (c); what the wrapper costs: (c) - (a)).
//              --model cnn times mnist-train's CNN (PyTorch's examples/mnist Net) instead, on
//              random 28 x 28 images, MSE against random logits: a small model whose step the
//              host's launches can bound. On CUDA, (a) and (b) are timed again with each step
//              captured once as a CUDA graph and replayed (optim::CapturedStep; DDP's all-reduces
//              inside the graph): "alone_graph" and "ddp_graph", their efficiency the ratio. And
//              (d), on CUDA, each rank alone again with an all-reduce of its gradients' size on
//              the group's stream beside every backward ("alone_beside_allreduce"): its GPU phase
//              times against (a)'s tell what NCCL's kernels cost the step's own by sharing the GPU.
//
//   mpirun -np GPUS dist-bench allreduce [--max-bytes 1G] [--iters N] [--warmup 5] [--json FILE]
//   mpirun -np GPUS dist-bench ddp [--batch 512 --batch 2048] [--bucket-mb 25] [--json FILE]
//   mpirun -np GPUS dist-bench ddp --model cnn --batch 64
//   mpirun --oversubscribe -np 2 dist-bench allreduce --device cpu --max-bytes 16M
//   mpirun --oversubscribe -np 2 dist-bench ddp --device cpu --width 512 --batch 64
//
// As root, mpirun needs --allow-run-as-root; on the H100 machines NCCL needs NCCL_NVLS_ENABLE=0
// (mpirun -x NCCL_NVLS_ENABLE=0). scripts/device-run dist runs both modes on every GPU of the
// machine, and scripts/bench_ddp_torch.py the same measures with PyTorch.
//
// Timing: after warmup calls the ranks meet at a barrier with their devices idle; each runs the
// timed calls and stops its clock once its device has finished them (backend synchronize,
// cudaStreamSynchronize, or the loss read back); a figure is the slowest rank's time divided by
// the calls. Rank 0 prints the tables; --json appends one JSON line per measure to FILE.
#include <CLI/CLI.hpp>

// MPI's C interface only (as kernels/cpu/mpi_group.cpp). MPI_COMM_WORLD keeps MPI's default
// error handler, which ends the job on any error: its calls here are not checked.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#if KILN_WITH_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unistd.h>  // environ
#include <utility>
#include <vector>

#include "apps/mnist/cli.h"
#include "apps/mnist/models.h"

#include "kiln/autograd/ops.h"
#include "kiln/core/backend.h"
#include "kiln/core/error.h"
#include "kiln/core/file.h"
#include "kiln/core/precision.h"
#include "kiln/core/process_group.h"
#include "kiln/core/random.h"
#include "kiln/layers/activation.h"
#include "kiln/layers/container.h"
#include "kiln/layers/distributed.h"
#include "kiln/layers/linear.h"
#include "kiln/optim/captured_step.h"
#include "kiln/optim/sgd.h"

namespace kiln::bench {
namespace {

// ---- the job: ranks, their clock, their report ----

// The slowest rank's value.
double slowest(double value) {
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return value;
}

// Seconds per call of `call`, made `calls` times: the ranks start together, with nothing queued
// (`synchronize` waits for the device), and each stops its clock once its device is done; the
// slowest rank's time. With `Until::issued`, each stops its clock once the host has issued the
// calls instead: below a few hundred KB a collective takes its issue time when that is longer
// than the GPU's part.
enum class Until { done, issued };
double seconds_per_call(int calls, const std::function<void()>& call, const std::function<void()>& synchronize,
                        Until until = Until::done) {
  synchronize();
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) call();
  if (until == Until::done) synchronize();
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  synchronize();
  return slowest(elapsed.count()) / calls;
}

std::string device_name(const ProcessGroup& group) {
#if KILN_WITH_NCCL
  if (group.device().type == DeviceType::cuda) {
    cudaDeviceProp prop{};
    KILN_CUDA_CHECK(cudaGetDeviceProperties(&prop, group.device().index));
    return prop.name;
  }
#endif
  return group.device().str();
}

// The NCCL_* variables of this process's environment (NCCL_NVLS_ENABLE, NCCL_MAX_CTAS, ...): they
// change what NCCL does, so every JSON line says which were set.
nlohmann::ordered_json nccl_environment() {
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (const auto eq = entry.find('='); entry.starts_with("NCCL_") && eq != std::string::npos) {
      vars[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
  }
  return vars;
}

// --json: one JSON object a line, appended (rank 0): what every line of a run shares, then the
// measure's figures; a figure that is not a finite number is null (it was not measured).
nlohmann::ordered_json json_line(const char* bench, const std::string& impl, const ProcessGroup& group,
                                 const std::string& device) {
  nlohmann::ordered_json line = apps::build_info("dist-bench");
  line.update({{"bench", bench}, {"impl", impl}, {"group", std::string(group.name())}, {"device", device},
               {"ranks", group.size()}, {"nccl_env", nccl_environment()}});
  return line;
}

void append_line(const std::string& path, const nlohmann::ordered_json& line) {
  LineFile(path, true).write_line(apps::json_line(line));
}

// ---- allreduce ----

// The all-reduce kiln's group wraps, called directly: in place, f32, sum.
struct Reference {
  std::string name;  // "nccl", "mpi"
  std::string call;  // what it calls: "ncclAllReduce", "MPI_Allreduce"
  std::function<void(float* data, size_t count)> all_reduce;
  std::function<void()> synchronize;  // waits for the calls queued so far
};

Reference mpi_reference() {
  return {"mpi", "MPI_Allreduce",
          [](float* data, size_t count) {
            MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          },
          [] {}};
}

#if KILN_WITH_NCCL
#define BENCH_NCCL_CHECK(call)                                                                        \
  do {                                                                                                \
    ncclResult_t bench_nccl_rc_ = (call);                                                             \
    KILN_CHECK(bench_nccl_rc_ == ncclSuccess, DistributedError, #call, " failed: ",                    \
               ncclGetErrorString(bench_nccl_rc_));                                                   \
  } while (0)

// NCCL as nccl-tests calls it: a communicator for the job's ranks (rank 0's unique id broadcast
// through MPI) and a stream of its own.
class NcclComm {
 public:
  NcclComm(int device, int rank, int size) {
    KILN_CUDA_CHECK(cudaSetDevice(device));
    ncclUniqueId id;
    if (rank == 0) BENCH_NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    BENCH_NCCL_CHECK(ncclCommInitRank(&comm_, size, id, rank));
    KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~NcclComm() {
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  void all_reduce(float* data, size_t count) {
    BENCH_NCCL_CHECK(ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm_, stream_));
  }
  void synchronize() { KILN_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

Reference nccl_reference(const ProcessGroup& group) {
  auto comm = std::make_shared<NcclComm>(group.device().index, group.rank(), group.size());
  return {"nccl", "ncclAllReduce", [comm](float* data, size_t count) { comm->all_reduce(data, count); },
          [comm] { comm->synchronize(); }};
}
#endif

float* data_of(const Tensor& t) { return static_cast<float*>(t.storage()->data()) + t.offset(); }

// After one sum over the ranks of a tensor of ones, every element must read size().
void check_sum_of_ones(const Tensor& t, int ranks, const std::string& who) {
  const double lo = kiln::min(t).item(), hi = kiln::max(t).item();
  KILN_CHECK(lo == ranks && hi == ranks, Error, "dist-bench: ", who, "'s all-reduce of ones over ", ranks,
             " ranks gave values in [", lo, ", ", hi, "], expected ", ranks);
}

struct AllReduceConfig {
  std::string device = "cuda";
  uint64_t max_bytes = uint64_t{1} << 30;
  int iters = 0;  // 0: as many as take about kTimedSeconds
  int warmup = 5;
  std::string json;
};

constexpr double kTimedSeconds = 0.2;

std::string size_label(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 30)) return std::to_string(bytes >> 30) + "G";
  if (bytes >= (uint64_t{1} << 20)) return std::to_string(bytes >> 20) + "M";
  return std::to_string(bytes >> 10) + "K";
}

void run_allreduce(ProcessGroup& group, const AllReduceConfig& c) {
  const Device device = group.device();
  const int n = group.size();
#if KILN_WITH_NCCL
  Reference reference = device.type == DeviceType::cuda ? nccl_reference(group) : mpi_reference();
#else
  Reference reference = mpi_reference();
#endif
  const std::string name = device_name(group);
  const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
  if (group.rank() == 0) {
    std::printf("dist-bench allreduce: f32 sum in place, %d rank%s on %s; kiln's %s group against %s called "
                "directly\n", n, n == 1 ? "" : "s", name.c_str(), std::string(group.name()).c_str(),
                reference.call.c_str());
    std::printf("time: the slowest rank's, per call; algbw = bytes / time; busbw = algbw x 2(n-1)/n%s\n",
                n == 1 ? " (0 with one rank: nothing crosses a link)" : "");
    std::printf("issue: the host's time to issue one call (32 in a row from an idle device)\n");
    std::printf("%6s %6s | %10s %9s %9s %9s | %10s %9s %9s %9s | %9s\n", "size", "iters", "kiln us", "algbw",
                "busbw", "issue us", (reference.name + " us").c_str(), "algbw", "busbw", "issue us",
                ("kiln/" + reference.name).c_str());
    std::printf("%6s %6s | %10s %9s %9s %9s | %10s %9s %9s %9s | %9s\n", "", "", "", "GB/s", "GB/s", "", "", "GB/s",
                "GB/s", "", "time");
    std::fflush(stdout);
  }
  const std::vector<uint64_t> sizes = {uint64_t{4} << 10,  uint64_t{16} << 10, uint64_t{64} << 10,
                                       uint64_t{256} << 10, uint64_t{1} << 20,  uint64_t{4} << 20,
                                       uint64_t{16} << 20, uint64_t{64} << 20, uint64_t{128} << 20,
                                       uint64_t{256} << 20, uint64_t{1} << 30};
  for (uint64_t bytes : sizes) {
    if (bytes > c.max_bytes) break;
    const auto count = static_cast<int64_t>(bytes / sizeof(float));
    Tensor t = ones({count}, device);
    auto sync = [&] { t.backend().synchronize(); };
    auto kiln_call = [&] { group.all_reduce(t, ReduceOp::sum); };
    auto ref_call = [&] { reference.all_reduce(data_of(t), static_cast<size_t>(count)); };
    auto ref_sync = [&] {
      reference.synchronize();
      sync();
    };
    kiln_call();
    check_sum_of_ones(t, n, "kiln");
    t = ones({count}, device);
    sync();
    ref_call();
    ref_sync();
    check_sum_of_ones(t, n, reference.name);
    // Timed on zeros, which a sum leaves as they are (ones would grow n-fold each call).
    t = zeros({count}, device);
    // Never two communicators' calls at once: NCCL's would wait on each other across the ranks.
    for (int i = 0; i < c.warmup; ++i) kiln_call();
    sync();
    for (int i = 0; i < c.warmup; ++i) ref_call();
    ref_sync();
    int iters = c.iters;
    if (iters == 0) {  // the same count on every rank: from the slowest rank's probe
      const double probe = seconds_per_call(3, kiln_call, sync);
      iters = static_cast<int>(std::clamp(kTimedSeconds / probe, 5.0, 1000.0));
    }
    const double kiln_s = seconds_per_call(iters, kiln_call, sync);
    const double ref_s = seconds_per_call(iters, ref_call, ref_sync);
    const double kiln_issue = seconds_per_call(32, kiln_call, sync, Until::issued);
    const double ref_issue = seconds_per_call(32, ref_call, ref_sync, Until::issued);
    const double kiln_algbw = static_cast<double>(bytes) / kiln_s / 1e9;
    const double ref_algbw = static_cast<double>(bytes) / ref_s / 1e9;
    if (group.rank() != 0) continue;
    std::printf("%6s %6d | %10.1f %9.2f %9.2f %9.1f | %10.1f %9.2f %9.2f %9.1f | %9.3f\n", size_label(bytes).c_str(),
                iters, kiln_s * 1e6, kiln_algbw, kiln_algbw * bus_factor, kiln_issue * 1e6, ref_s * 1e6, ref_algbw,
                ref_algbw * bus_factor, ref_issue * 1e6, kiln_s / ref_s);
    std::fflush(stdout);
    if (c.json.empty()) continue;
    for (const auto& [impl, seconds, algbw, issue] : {std::tuple{std::string("kiln"), kiln_s, kiln_algbw, kiln_issue},
                                                       std::tuple{reference.name, ref_s, ref_algbw, ref_issue}}) {
      nlohmann::ordered_json line = json_line("allreduce", impl, group, name);
      line.update({{"bytes", bytes}, {"iters", iters}, {"us", apps::rounded(seconds * 1e6, 3)},
                   {"issue_us", apps::rounded(issue * 1e6, 3)}, {"algbw_gbs", apps::rounded(algbw, 4)},
                   {"busbw_gbs", apps::rounded(algbw * bus_factor, 4)}});
      if (impl == "kiln") line.update({{"vs", reference.name}, {"time_ratio", apps::rounded(kiln_s / ref_s, 4)}});
      append_line(c.json, line);
    }
  }
}

// ---- ddp ----

struct DdpConfig {
  std::string device = "cuda";
  std::string model = "linear";  // or "cnn"
  std::vector<int64_t> batches = {512, 2048};
  int64_t width = 4096;
  int layers = 8;
  double bucket_mb = 25;
  int warmup = 5;
  int steps = 20;
  std::string json;
};

// `layers` x (Linear width->width, ReLU)
std::shared_ptr<nn::Sequential> make_model(int64_t width, int layers) {
  auto model = std::make_shared<nn::Sequential>();
  for (int i = 0; i < layers; ++i) {
    model->push_back(nn::Linear(width, width));
    model->push_back(nn::ReLU());
  }
  return model;
}

struct StepTime {
  double seconds;  // per step, the slowest rank's
  double loss;     // rank 0's, after the last step
  // On CUDA, this rank's GPU time per step between the ends of its phases (events on kiln's
  // stream): forward and loss; backward, with DDP's waits for its buckets; the optimizer.
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  // The host's time to issue each phase, from steps that each start with the device idle (so that
  // no launch waits for room in the queue): what bounds a step whose kernels are short.
  double host_forward_ms = 0, host_backward_ms = 0, host_optimizer_ms = 0;
};

// GPU time of each phase of a step, from events recorded on kiln's stream after each (CUDA only).
class PhaseClock {
 public:
  explicit PhaseClock(const Device& device) {
#if KILN_WITH_NCCL
    if (device.type == DeviceType::cuda) stream_ = cuda::backend(device.index).stream();
#else
    (void)device;
#endif
  }
  void mark(int phase) {  // 0: step start, 1: forward done, 2: backward done, 3: optimizer done
#if KILN_WITH_NCCL
    if (!stream_) return;
    cudaEvent_t e;
    KILN_CUDA_CHECK(cudaEventCreate(&e));
    KILN_CUDA_CHECK(cudaEventRecord(e, stream_));
    events_[phase].push_back(e);
#else
    (void)phase;
#endif
  }
  // Milliseconds per step of phase 1..3, after the device finished; frees the events.
  void read(StepTime& t) {
#if KILN_WITH_NCCL
    if (!stream_ || events_[0].empty()) return;
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream_));
    double* out[3] = {&t.forward_ms, &t.backward_ms, &t.optimizer_ms};
    const size_t steps = events_[0].size();
    for (int p = 1; p <= 3; ++p)
      for (size_t i = 0; i < steps; ++i) {
        float ms = 0;
        KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[p - 1][i], events_[p][i]));
        *out[p - 1] += ms / static_cast<double>(steps);
      }
    for (auto& list : events_)
      for (cudaEvent_t e : list) cudaEventDestroy(e);
#else
    (void)t;
#endif
  }

 private:
#if KILN_WITH_NCCL
  cudaStream_t stream_ = nullptr;
  std::vector<cudaEvent_t> events_[4];
#endif
};

// Trains `model` for warmup + timed steps on x against target, each step captured once as a CUDA
// graph and replayed (warmup: at least the eager step and the capture); the host waits once, at
// the end, reading the loss. The time a step only: a graph has no phases to mark.
StepTime time_captured_steps(nn::Module& model, const Tensor& x, const Tensor& target, int warmup, int steps) {
  optim::SGD opt(model.parameters(), optim::SGDOptions(0.01));
  optim::CapturedStep step(opt, [&](const std::vector<Tensor>& in) {
    opt.zero_grad();
    Tensor loss = mse_loss(model.forward(in[0]), in[1]);
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss.detach()};
  });
  Tensor loss;
  for (int i = 0; i < std::max(warmup, 2); ++i) loss = step({x, target})[0];
  double last = 0;
  const double seconds = seconds_per_call(steps, [&] { loss = step({x, target})[0]; }, [&] {
    last = loss.item();
    x.backend().synchronize();
  });
  return StepTime{seconds, last};
}

// Trains `model` for warmup + timed steps on x against target; the host waits once, at the end,
// reading the loss. With `no_sync`, every step runs inside its no_sync() guard: DDP's wrapper
// without its reduction, which tells the cost of the communication from that of the rest. With
// `beside`, each step starts it once the forward is queued (a collective on the group's stream,
// which then runs beside the backward) and waits for it after the optimizer.
StepTime time_steps(nn::Module& model, const Tensor& x, const Tensor& target, int warmup, int steps,
                    nn::DistributedDataParallel* no_sync = nullptr,
                    const std::function<std::unique_ptr<Work>()>& beside = {}) {
  optim::SGD opt(model.parameters(), optim::SGDOptions(0.01));
  Tensor loss;
  PhaseClock clock(x.device());
  // One step; mark(p) after each phase p: 0 the start, 1 forward and loss, 2 backward, 3 the optimizer.
  auto step = [&](auto&& mark) {
    opt.zero_grad();
    std::optional<nn::DistributedDataParallel::NoSync> guard;
    if (no_sync) guard.emplace(*no_sync);
    mark(0);
    loss = mse_loss(model.forward(x), target);
    mark(1);
    std::unique_ptr<Work> work = beside ? beside() : nullptr;
    loss.backward();
    mark(2);
    opt.step();
    mark(3);
    if (work) work->wait();
  };
  auto unmarked = [](int) {};
  for (int i = 0; i < warmup; ++i) step(unmarked);
  double last = 0;
  auto sync = [&] {
    last = loss.item();
    x.backend().synchronize();  // the last step's update too, queued after the loss
  };
  const double seconds = seconds_per_call(steps, [&] { step(unmarked); }, sync);
  StepTime t{seconds, last};
  // The phases, from steps of their own: the events cost a little, which the timing above keeps out.
  for (int i = 0; i < steps; ++i) step([&](int phase) { clock.mark(phase); });
  // The host's share: each step from an idle device, its clock read after each phase.
  using Clock = std::chrono::steady_clock;
  double* host[3] = {&t.host_forward_ms, &t.host_backward_ms, &t.host_optimizer_ms};
  for (int i = 0; i < steps; ++i) {
    x.backend().synchronize();
    Clock::time_point stamps[4];
    step([&](int phase) { stamps[phase] = Clock::now(); });
    for (int p = 0; p < 3; ++p)
      *host[p] += std::chrono::duration<double, std::milli>(stamps[p + 1] - stamps[p]).count() / steps;
  }
  clock.read(t);
  return t;
}

void run_ddp(const std::shared_ptr<ProcessGroup>& group, const DdpConfig& c) {
  set_allow_tf32(true);
  const Device device = group->device();
  const int n = group->size();
  const std::string name = device_name(*group);
  const bool cnn = c.model == "cnn";
  std::shared_ptr<nn::Module> model =
      cnn ? apps::make_model("cnn") : std::static_pointer_cast<nn::Module>(make_model(c.width, c.layers));
  model->to(device);
  int64_t parameters = 0;
  for (const Tensor& p : model->parameters()) parameters += p.numel();
  // Each rank its own batch (seeded by rank) and one fixed target.
  std::vector<std::pair<Tensor, Tensor>> data;
  for (int64_t batch : c.batches) {
    Generator gen(1000 + static_cast<uint64_t>(group->rank()));
    Tensor x = cnn ? normal({batch, 1, 28, 28}, 0, 1, device, &gen) : normal({batch, c.width}, 0, 1, device, &gen);
    data.emplace_back(x, normal({batch, cnn ? 10 : c.width}, 0, 1, device, &gen));
  }
  if (group->rank() == 0) {
    std::string what = cnn ? std::string("mnist-train's CNN") : std::to_string(c.layers) + " x (Linear " +
                                                                 std::to_string(c.width) + "->" +
                                                                 std::to_string(c.width) + ", ReLU)";
    std::printf("dist-bench ddp: %s, %.1fM parameters (%.1f MB of f32 gradients), MSE, SGD lr 0.01, TF32; %d rank%s "
                "on %s (%s), bucket_cap_mb %g; %d warmup + %d timed steps\n",
                what.c_str(), static_cast<double>(parameters) / 1e6, static_cast<double>(parameters) * 4 / 1e6, n,
                n == 1 ? "" : "s", name.c_str(), std::string(group->name()).c_str(), c.bucket_mb, c.warmup,
                c.steps);
    std::printf("alone: every rank trains its own copy without DDP, all at once; times: the slowest rank's\n");
    std::fflush(stdout);
  }
  // (a) every rank alone, before any DDP; on CUDA, also (d) with an all-reduce of as many bytes as
  // the gradients running beside each backward on the group's stream (not the gradients: they are
  // still being computed): what sharing the GPU with NCCL costs the step's own kernels.
  const bool graphs = backend_for(device).can_capture();
  Tensor flat = zeros({parameters}, device);
  std::vector<StepTime> alone, alone_graph, beside;
  for (const auto& [x, target] : data) {
    alone.push_back(time_steps(*model, x, target, c.warmup, c.steps));
    if (graphs) {
      alone_graph.push_back(time_captured_steps(*model, x, target, c.warmup, c.steps));
      beside.push_back(time_steps(*model, x, target, c.warmup, c.steps, nullptr,
                                  [&] { return group->all_reduce_async(flat, ReduceOp::sum); }));
    }
  }
  model->zero_grad();
  // (b) the same model under DDP (which starts every rank from rank 0's parameters)
  auto ddp = std::make_shared<nn::DistributedDataParallel>(
      model, group, nn::DistributedDataParallelOptions().bucket_cap_mb(c.bucket_mb));
  std::vector<StepTime> together, unsynced, together_graph;
  for (const auto& [x, target] : data) {
    together.push_back(time_steps(*ddp, x, target, c.warmup, c.steps));
    unsynced.push_back(time_steps(*ddp, x, target, c.warmup, c.steps, ddp.get()));
    if (graphs) together_graph.push_back(time_captured_steps(*ddp, x, target, c.warmup, c.steps));
  }
  // The reduction of one step's gradients alone, on an idle device: as DDP queues it (the
  // parameters' shapes, one NCCL group) and as one flat tensor of as many elements.
  std::vector<Tensor> grads;
  for (const Tensor& p : model->parameters()) grads.push_back(zeros_like(p));
  auto sync = [&] { flat.backend().synchronize(); };
  auto grouped_call = [&] { group->all_reduce(grads, ReduceOp::mean); };
  auto flat_call = [&] { group->all_reduce(flat, ReduceOp::mean); };
  for (int i = 0; i < 20; ++i) grouped_call(), flat_call();
  const double grouped_us = seconds_per_call(200, grouped_call, sync) * 1e6;
  const double flat_us = seconds_per_call(200, flat_call, sync) * 1e6;
  if (group->rank() != 0) return;
  std::printf("the gradients' all-reduce alone: %.1f us as %zu tensors in one group, %.1f us as one flat tensor\n",
              grouped_us, grads.size(), flat_us);
  std::printf("%10s | %10s %10s | %10s %10s | %10s %14s | %12s\n", "batch/rank", "alone ms", "loss", "DDP ms", "loss",
              "efficiency", "samples/s, all", "no_sync ms");
  for (size_t i = 0; i < c.batches.size(); ++i) {
    const double efficiency = alone[i].seconds / together[i].seconds;
    const double samples_s = static_cast<double>(c.batches[i] * n) / together[i].seconds;
    std::printf("%10lld | %10.3f %10.4g | %10.3f %10.4g | %9.1f%% %14.0f | %12.3f\n",
                static_cast<long long>(c.batches[i]), alone[i].seconds * 1e3, alone[i].loss, together[i].seconds * 1e3,
                together[i].loss, 100 * efficiency, samples_s, unsynced[i].seconds * 1e3);
    if (alone[i].backward_ms > 0)
      std::printf("%10s   GPU ms, forward / backward / optimizer: alone %.3f / %.3f / %.3f, DDP %.3f / %.3f / %.3f, "
                  "no_sync %.3f / %.3f / %.3f\n", "", alone[i].forward_ms, alone[i].backward_ms, alone[i].optimizer_ms,
                  together[i].forward_ms, together[i].backward_ms, together[i].optimizer_ms, unsynced[i].forward_ms,
                  unsynced[i].backward_ms, unsynced[i].optimizer_ms);
    std::printf("%10s   host ms to issue them:                     alone %.3f / %.3f / %.3f, DDP %.3f / %.3f / %.3f, "
                "no_sync %.3f / %.3f / %.3f\n", "", alone[i].host_forward_ms, alone[i].host_backward_ms,
                alone[i].host_optimizer_ms, together[i].host_forward_ms, together[i].host_backward_ms,
                together[i].host_optimizer_ms, unsynced[i].host_forward_ms, unsynced[i].host_backward_ms,
                unsynced[i].host_optimizer_ms);
    if (graphs) {
      std::printf("%10s   each step one CUDA graph: alone %.3f ms, DDP %.3f ms, efficiency %.1f%%\n", "",
                  alone_graph[i].seconds * 1e3, together_graph[i].seconds * 1e3,
                  100 * alone_graph[i].seconds / together_graph[i].seconds);
      std::printf("%10s   alone, an all-reduce of the gradients' size beside each backward: step %.3f ms, GPU ms "
                  "forward / backward / optimizer %.3f / %.3f / %.3f\n", "", beside[i].seconds * 1e3,
                  beside[i].forward_ms, beside[i].backward_ms, beside[i].optimizer_ms);
    }
    if (c.json.empty()) continue;
    std::vector<std::pair<const char*, StepTime>> modes = {{"alone", alone[i]}, {"ddp", together[i]},
                                                            {"ddp_no_sync", unsynced[i]}};
    if (graphs)
      modes.insert(modes.end(), {{"alone_graph", alone_graph[i]}, {"ddp_graph", together_graph[i]},
                                 {"alone_beside_allreduce", beside[i]}});
    for (const auto& [mode, t] : modes) {
      nlohmann::ordered_json line = json_line("ddp", "kiln", *group, name);
      line.update({{"mode", mode}, {"batch", c.batches[i]}});
      if (cnn) line["model"] = "cnn";
      else line.update({{"width", c.width}, {"layers", c.layers}});
      line.update({{"step_ms", apps::rounded(t.seconds * 1e3, 4)}, {"loss", t.loss}, {"steps", c.steps}});
      if (t.backward_ms > 0)  // the GPU's phases, where they were timed (CUDA, eager steps)
        line.update({{"forward_ms", apps::rounded(t.forward_ms, 4)}, {"backward_ms", apps::rounded(t.backward_ms, 4)},
                     {"optimizer_ms", apps::rounded(t.optimizer_ms, 4)}});
      if (std::string(mode) == "ddp")
        line.update({{"bucket_cap_mb", c.bucket_mb}, {"efficiency", apps::rounded(efficiency, 4)},
                     {"grads_allreduce_us", apps::rounded(grouped_us, 3)}, {"flat_allreduce_us", apps::rounded(flat_us, 3)}});
      if (std::string(mode) == "ddp_graph")
        line.update({{"bucket_cap_mb", c.bucket_mb},
                     {"efficiency", apps::rounded(alone_graph[i].seconds / together_graph[i].seconds, 4)}});
      append_line(c.json, line);
    }
  }
  std::fflush(stdout);
}

DeviceType device_type(const std::string& device) { return device == "cpu" ? DeviceType::cpu : DeviceType::cuda; }

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) {
  using namespace kiln::bench;
  CLI::App app{"dist-bench: kiln's all-reduce and DDP step across the ranks of an mpirun job"};
  app.set_version_flag("--version", kiln::apps::version_line("dist-bench"));
  app.require_subcommand(1);
  AllReduceConfig ar;
  DdpConfig dc;
  auto* allreduce = app.add_subcommand("allreduce", "f32 sum all-reduce, 4K to 1G bytes: kiln against NCCL (MPI)");
  allreduce->add_option("--device", ar.device, "cuda (NCCL, one rank per GPU) or cpu (MPI)")
      ->check(CLI::IsMember({"cuda", "cpu"}))->capture_default_str();
  allreduce->add_option("--max-bytes", ar.max_bytes, "the largest message, e.g. 16M")
      ->transform(CLI::AsSizeValue(false))->default_str("1G");
  allreduce->add_option("--iters", ar.iters, "timed calls per size (0: as many as take about 0.2 s)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  allreduce->add_option("--warmup", ar.warmup, "untimed calls per size first")->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  allreduce->add_option("--json", ar.json, "append JSON lines of the results to this file (rank 0)");
  auto* ddp = app.add_subcommand("ddp", "training step of 8 x (Linear 4096->4096, ReLU) alone and under DDP");
  ddp->add_option("--device", dc.device, "cuda (NCCL, one rank per GPU) or cpu (MPI)")
      ->check(CLI::IsMember({"cuda", "cpu"}))->capture_default_str();
  ddp->add_option("--model", dc.model, "linear: layers x (Linear width->width, ReLU); cnn: mnist-train's CNN")
      ->check(CLI::IsMember({"linear", "cnn"}))->capture_default_str();
  ddp->add_option("--batch", dc.batches, "per-rank batch sizes (repeat the flag)")->check(CLI::PositiveNumber)
      ->capture_default_str();
  ddp->add_option("--bucket-mb", dc.bucket_mb, "DDP's bucket_cap_mb")->check(CLI::PositiveNumber)
      ->capture_default_str();
  ddp->add_option("--width", dc.width, "features of every Linear (smaller for a CPU run)")->check(CLI::PositiveNumber)
      ->capture_default_str();
  ddp->add_option("--layers", dc.layers, "Linear+ReLU pairs")->check(CLI::PositiveNumber)->capture_default_str();
  ddp->add_option("--warmup", dc.warmup, "untimed steps first")->check(CLI::NonNegativeNumber)->capture_default_str();
  ddp->add_option("--steps", dc.steps, "timed steps")->check(CLI::PositiveNumber)->capture_default_str();
  ddp->add_option("--json", dc.json, "append JSON lines of the results to this file (rank 0)");
  CLI11_PARSE(app, argc, argv);

  // The program owns MPI (kiln's groups then leave it alone): started here, ended after the groups.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  try {
    const bool is_ddp = ddp->parsed();
    auto group = kiln::init_process_group(device_type(is_ddp ? dc.device : ar.device));
    if (is_ddp) run_ddp(group, dc);
    else run_allreduce(*group, ar);
  } catch (const std::exception& e) {
    // Another rank may wait in a collective for this one: end them all.
    std::cerr << "dist-bench: rank " << rank << ": " << e.what() << std::endl;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return 0;
}
