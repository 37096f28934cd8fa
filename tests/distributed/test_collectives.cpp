// The collectives of the job's process group against their definitions, on every rank: all_reduce
// (sum, mean, max, min) on every dtype at sizes 0, 1, odd and large, several in flight at once;
// broadcast from every root; all_gather; barrier; check_same; and the errors raised before any
// rank communicates.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/process_group.h"
#include "kiln/kiln.h"
#include "tests/distributed/distributed.h"

namespace {

using namespace kiln;
using kiln::test::group;

// Element i of rank r's tensor: small integers (exact in every dtype, their sums too), different
// on every rank; non-negative for u8.
double value(int r, int64_t i, DType dtype) {
  double v = static_cast<double>((i * 7 + r * 3) % 11);
  return dtype == DType::u8 ? v : v - 5;
}

Tensor rank_tensor(int64_t n, DType dtype) {
  std::vector<double> values;
  for (int64_t i = 0; i < n; ++i) values.push_back(value(group().rank(), i, dtype));
  return from_vector(values, {n}, TensorOptions(dtype).device(group().device()));
}

// What op over the ranks makes of element i.
double expected(ReduceOp op, int64_t i, DType dtype) {
  double result = value(0, i, dtype);
  for (int r = 1; r < group().size(); ++r) {
    double v = value(r, i, dtype);
    if (op == ReduceOp::max) result = std::max(result, v);
    else if (op == ReduceOp::min) result = std::min(result, v);
    else result += v;
  }
  return op == ReduceOp::mean ? result / group().size() : result;
}

const std::vector<int64_t> kSizes = {0, 1, 7, 1000003};

}  // namespace

TEST_CASE("the group knows its ranks") {
  ProcessGroup& g = group();
  REQUIRE(g.size() >= 1);
  CHECK(g.rank() >= 0);
  CHECK(g.rank() < g.size());
  CHECK(g.local_rank() < g.local_size());
  std::vector<std::string> ranks = g.all_gather_string(std::to_string(g.rank()));
  REQUIRE(ranks.size() == static_cast<size_t>(g.size()));
  for (int r = 0; r < g.size(); ++r) CHECK(ranks[static_cast<size_t>(r)] == std::to_string(r));
  if (g.name() == "nccl") CHECK(g.device() == Device::cuda(g.local_rank()));
  else CHECK(g.device() == Device::cpu());
}

TEST_CASE("all_reduce: sum, mean, max and min of every dtype, sizes 0, 1, odd and large") {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::u8}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min}) {
      if (op == ReduceOp::mean && !is_floating(dtype)) continue;
      for (int64_t n : kSizes) {
        CAPTURE(dtype);
        CAPTURE(reduce_op_name(op));
        CAPTURE(n);
        Tensor t = rank_tensor(n, dtype);
        group().all_reduce(t, op);
        std::vector<double> got = t.to_vector<double>();
        REQUIRE(got.size() == static_cast<size_t>(n));
        int64_t wrong = 0, first = -1;
        for (int64_t i = 0; i < n; ++i) {
          double want = expected(op, i, dtype);
          // the mean is a division in the tensor's dtype: within its rounding
          double tolerance = op == ReduceOp::mean ? std::abs(want) * (dtype == DType::f32 ? 1e-6 : 1e-15) : 0.0;
          if (std::abs(got[static_cast<size_t>(i)] - want) > tolerance && wrong++ == 0) first = i;
        }
        CHECK_MESSAGE(wrong == 0, wrong, " wrong elements, the first at ", first);
      }
    }
  }
}

TEST_CASE("all_reduce: several in flight at once, waited in any order") {
  std::vector<Tensor> ts;
  std::vector<std::unique_ptr<Work>> works;
  for (int64_t n : {5, 300, 70001}) {
    ts.push_back(rank_tensor(n, DType::f32));
    works.push_back(group().all_reduce_async(ts.back(), ReduceOp::sum));
  }
  for (size_t k = works.size(); k-- > 0;) works[k]->wait();
  for (const Tensor& t : ts) {
    std::vector<float> got = t.to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != static_cast<float>(expected(ReduceOp::sum, static_cast<int64_t>(i), DType::f32)))
        FAIL("element ", i, " of a tensor of ", got.size(), " is ", got[i]);
  }
}

TEST_CASE("all_reduce of several tensors at once: each its own reduction, whatever its dtype and size") {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
    CAPTURE(reduce_op_name(op));
    const std::vector<std::pair<int64_t, DType>> specs = {
        {300, DType::f32}, {0, DType::f32}, {70007, DType::i32}, {1, DType::u8}, {4099, DType::f64}};
    std::vector<Tensor> ts;
    for (auto [n, dtype] : specs) ts.push_back(rank_tensor(n, dtype));
    ts[2] = ts[2].reshape({7, 10001});  // any shape, contiguous
    group().all_reduce_async(ts, op)->wait();
    for (size_t k = 0; k < ts.size(); ++k) {
      std::vector<double> got = ts[k].to_vector<double>();
      REQUIRE(got.size() == static_cast<size_t>(specs[k].first));
      for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != expected(op, static_cast<int64_t>(i), specs[k].second))
          FAIL("tensor ", k, ": element ", i, " is ", got[i]);
    }
  }
  // one bad tensor: refused before any of them goes, on every rank alike
  std::vector<Tensor> mixed = {rank_tensor(5, DType::f32), rank_tensor(5, DType::i32)};
  CHECK_THROWS_AS(group().all_reduce_async(mixed, ReduceOp::mean), DTypeError);
  std::vector<Tensor> none;
  group().all_reduce_async(none, ReduceOp::sum)->wait();
}

TEST_CASE("broadcast: every rank gets the root's tensor, from every root") {
  for (int root = 0; root < group().size(); ++root) {
    for (DType dtype : {DType::f32, DType::i32, DType::u8}) {
      Tensor t = rank_tensor(1001, dtype);
      group().broadcast(t, root);
      std::vector<double> got = t.to_vector<double>();
      for (int64_t i = 0; i < 1001; ++i) REQUIRE(got[static_cast<size_t>(i)] == value(root, i, dtype));
    }
  }
  Tensor empty_tensor = rank_tensor(0, DType::f32);
  group().broadcast(empty_tensor, 0);
  CHECK_THROWS_AS(group().broadcast(rank_tensor(3, DType::f32), group().size()), ValueError);
}

TEST_CASE("all_gather: out[r] is rank r's tensor") {
  const int64_t n = 257;
  Tensor t = rank_tensor(n, DType::f64).reshape({1, n});
  Tensor out = zeros({group().size(), 1, n}, TensorOptions(DType::f64).device(group().device()));
  group().all_gather(t, out);
  std::vector<double> got = out.to_vector<double>();
  for (int r = 0; r < group().size(); ++r)
    for (int64_t i = 0; i < n; ++i) REQUIRE(got[static_cast<size_t>(r * n + i)] == value(r, i, DType::f64));
  Tensor wrong = zeros({group().size() + 1, 1, n}, TensorOptions(DType::f64).device(group().device()));
  CHECK_THROWS_AS(group().all_gather(t, wrong), ShapeError);
}

TEST_CASE("a collective's write is counted: a graph that saved the tensor refuses its backward") {
  const TensorOptions f32 = TensorOptions(DType::f32).device(group().device());
  Tensor w = ones({4}, f32).requires_grad_();
  Tensor x = rank_tensor(4, DType::f32);
  Tensor y = (w * x).sum();  // saves x, for w's gradient
  const uint64_t before = x.version();
  group().all_reduce(x, ReduceOp::sum);
  CHECK(x.version() > before);
  CHECK_THROWS_AS(y.backward(), AutogradError);
  Tensor z = (w * x).sum();
  group().broadcast(x, 0);
  CHECK_THROWS_AS(z.backward(), AutogradError);
  Tensor out = zeros({group().size(), 4}, f32);
  const uint64_t gathered = out.version();
  group().all_gather(x, out);
  CHECK(out.version() > gathered);
}

TEST_CASE("barrier and check_same") {
  group().barrier();
  group().check_same("the answer", "42");
  // rank 1 (when there is one) disagrees; every rank throws the same error, naming both values
  std::string mine = group().rank() == 1 ? "cnn" : "mlp";
  if (group().size() > 1) {
    try {
      group().check_same("--model", mine);
      FAIL("check_same let different values through");
    } catch (const DistributedError& e) {
      std::string what = e.what();
      CHECK(what.find("the ranks disagree on --model: rank 0 has mlp, rank 1 has cnn") != std::string::npos);
    }
  }
}

TEST_CASE("collectives refuse tensors they cannot take, before any rank communicates") {
  Device other = group().device().is_cpu() ? Device::cuda(0) : Device::cpu();
  if (other.is_cpu()) CHECK_THROWS_AS(group().all_reduce(zeros({4}), ReduceOp::sum), DeviceError);
  Tensor t = zeros({4, 3}, TensorOptions().device(group().device()));
  CHECK_THROWS_AS(group().all_reduce(t.t(), ReduceOp::sum), ValueError);  // not contiguous
  CHECK_THROWS_AS(group().all_reduce(t, ReduceOp::argmax), ValueError);
  CHECK_THROWS_AS(group().all_reduce(zeros({4}, TensorOptions(DType::i32).device(group().device())), ReduceOp::mean),
                  DTypeError);
  CHECK_THROWS_AS(group().all_reduce(Tensor(), ReduceOp::sum), ValueError);
}
