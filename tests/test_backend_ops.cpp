// test_backend_ops: one table of op cases, run on every device backend compiled in (CUDA, Vulkan)
// against the CPU backend, the reference. A row names an op (or an op family), the dtypes it
// takes on each backend with a tolerance for each (empty: the backend lacks the op), and its cases
// (tests/*_cases.h, each written once for every backend): random shapes that are not multiples of
// any tile, size 1, empty where meaningful, broadcasting, non-contiguous views (transposes,
// slices, expands), special values where the op has rules for them (NaN and infinities, ties),
// and the backward where the op has one. What only one backend has (CUDA's kernel versions,
// Vulkan's memory blocks, frames and validation) is tested in tests/cuda and tests/vulkan.
//
// Each row on each backend is one doctest case, "OP on BACKEND", in the doctest suite BACKEND
// (its line in doctest's reports is the row's place in the table). One op on one backend:
//
//   build/release/tests/test_backend_ops --test-case="conv2d on vulkan"
//   build/release/tests/test_backend_ops --backend=cuda --test-case="softmax*"   (every softmax row, CUDA)
//   build/release/tests/test_backend_ops --backend=vulkan --list-test-cases      (the rows Vulkan runs)
//
// --backend=NAME (tests/device_main.cpp) runs NAME's suite only; without it, every backend that
// has a device here. Each case starts from one seed, so a case run alone draws what it drew in
// the whole run. CTest runs the binary once per backend compiled in (test_backend_ops_cuda, label
// cuda; test_backend_ops_vulkan, label vulkan, the validation layer on) and reports a backend
// without a device as skipped.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "tests/backend_ops.h"
#include "tests/conv_cases.h"
#include "tests/device_backends.h"
#include "tests/elementwise_cases.h"
#include "tests/layer_cases.h"
#include "tests/matmul_cases.h"
#include "tests/optim_cases.h"
#include "tests/reduce_cases.h"
#include "tests/train_cases.h"

namespace {

using namespace kiln;
using namespace kiln::test;

constexpr DType f32 = DType::f32, f64 = DType::f64, i32 = DType::i32, u8 = DType::u8, b16 = DType::bf16;

using Cases = std::function<void(const Run&)>;

struct UnaryOptions {
  bool gradient = true;  // compared through autograd
  bool specials = true;  // infinities, NaN, signed zeros and the saturating functions' limits
};
Cases unary(UnaryFn fn, UnaryOptions o = {}) {
  return [=](const Run& r) { unary_cases(r, fn, o.gradient, o.specials); };
}
Cases binary(BinaryFn fn, bool gradient = true) {
  return [=](const Run& r) { binary_cases(r, fn, gradient); };
}

// Exact, in every dtype the backend takes.
const Takes cuda_exact = {{f32, 0}, {f64, 0}, {i32, 0}, {u8, 0}, {b16, 0}};
const Takes vulkan_exact = {{f32, 0}, {i32, 0}, {u8, 0}};
// Elementwise math on CUDA: f32 within its math library's last bits, f64 likewise; bf16 computes
// in f32 and rounds once, so those last bits can tip a rounding: an ulp of bf16 (2^-8 relative).
constexpr Tol bf16_ulp = {8e-3, 1e-6};
const Takes cuda_math = {{f32, 2e-6}, {f64, 1e-14}, {b16, bf16_ulp}};
const Takes cuda_math_i32 = {{f32, 2e-6}, {f64, 1e-14}, {i32, 0}, {b16, bf16_ulp}};
// bf16 products: the f32 sums of exact products in another order than the CPU's, rounded once.
constexpr Tol bf16_product = {8e-3, 8e-3};
// Reductions and the softmax family against the CPU's double accumulation (f32 accumulates in
// float on both devices).
const Takes cuda_softmax = {{f32, {1e-5, 1e-6}}, {f64, {1e-12, 1e-13}}};
const Takes vulkan_softmax = {{f32, {1e-5, 1e-6}}};
// Losses read bf16 logits and compute in f32, their results f32 (a loss outside autocast, and the
// gradient, rounded to bf16 once: an ulp of it).
const Takes cuda_loss = {{f32, {1e-5, 1e-6}}, {f64, {1e-12, 1e-13}}, {b16, bf16_ulp}};
// conv2d: an atol per term of the sums (times their length).
const Takes cuda_conv = {{f32, {1e-4, 1e-6}}, {f64, {1e-12, 1e-14}}, {b16, {8e-3, 1e-6}}};
const Takes vulkan_conv = {{f32, {1e-4, 1e-6}}};

// In-place writes after autograd saved a tensor, on the device: each kind is caught (versions are
// counted on the host, whatever the device), and training steps as usual run and match the CPU's.
void inplace_after_save_cases(const Run& r) {
  auto leaf = [&](const std::vector<float>& v) {
    return from_vector<float>(v, {static_cast<int64_t>(v.size())}).to(r.device).requires_grad_();
  };
  const std::vector<std::pair<std::string, std::function<void(const Tensor&)>>> writes = {
      {"copy_", [&](const Tensor& b) { Tensor(b).copy_(zeros({4}, TensorOptions(f32).device(r.device))); }},
      {"fill_", [](const Tensor& b) { Tensor(b).fill_(1.0); }},
      {"fill_ through a slice", [](const Tensor& b) { b.slice(0, 1, 3).fill_(2.0); }},
      {"through a detached handle", [](const Tensor& b) { b.detach().zero_(); }},
  };
  for (const auto& entry : writes) {
    const std::string& name = entry.first;  // not a structured binding: clang 14's lambdas (CAPTURE) cannot capture one
    const auto& write = entry.second;
    CAPTURE(name);
    Tensor a = leaf({0, 1, 2, 3});
    Tensor b = exp(a);
    {
      NoGradGuard no_grad;
      write(b);
    }
    CHECK_THROWS_WITH_AS(b.sum().backward(),
                         doctest::Contains("one of the tensors saved by 'exp' for its backward (its output, [4] f32) "
                                           "was modified in place: version 1, expected 0"),
                         AutogradError);
  }

  // SGD with momentum on the device and on the CPU: the same steps, then a graph recorded before a
  // step refuses its backward.
  std::vector<Tensor> ws;
  for (const Device& d : {r.device, Device::cpu()}) {
    Tensor w = from_vector<float>({1, -2, 3}, {3}).to(d).requires_grad_();
    Tensor x = from_vector<float>({0.5, 1, 2}, {3}).to(d);
    optim::SGD opt({w}, optim::SGDOptions(0.125).momentum(0.5));
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      (w * w * x).sum().backward();
      opt.step();
    }
    CHECK(w.version() == 3);
    Tensor pending = (w * x).sum();  // saves x, for w's gradient
    {
      NoGradGuard no_grad;
      x.fill_(0.0);
    }
    CHECK_THROWS_WITH_AS(pending.backward(), doctest::Contains("saved by 'mul' for its backward (its input 1, [3] f32)"),
                         AutogradError);
    Tensor uses_w = (w * w).sum();
    opt.step();
    CHECK_THROWS_WITH_AS(uses_w.backward(), doctest::Contains("version 4, expected 3"), AutogradError);
    ws.push_back(w);
  }
  r.check(ws[0], ws[1], r.tol(f32), "SGD's steps, versions counted");
}

// Vulkan lacks f64 (many devices have none); its GLSL math (exp, log, sqrt, tanh, pow, division)
// carries the driver's precision, and the rest it computes as the CPU does, exactly.
const std::vector<Row>& table() {
  static const std::vector<Row> rows = {
      // op                 on CUDA                on Vulkan          cases
      {"transfer", cuda_exact, {{f32, 0}, {f64, 0}, {i32, 0}, {u8, 0}}, transfer_cases},
      {"fill", cuda_exact, vulkan_exact, fill_cases},
      {"arange", {{f32, 0}, {f64, 0}, {i32, 0}, {b16, 0}}, {{f32, {1.2e-7, 0}}, {i32, 0}}, arange_cases},
      {"copy", cuda_exact, vulkan_exact, copy_cases},
      {"convert", cuda_exact, vulkan_exact, convert_cases},

      {"neg", cuda_math_i32, {{f32, 0}, {i32, 0}}, unary([](const Tensor& x) { return neg(x); })},
      {"exp", cuda_math, {{f32, 2e-6}}, unary([](const Tensor& x) { return exp(x); })},
      {"log", cuda_math, {{f32, 2e-6}}, unary([](const Tensor& x) { return log(abs(x) + 0.1); }, {.specials = false})},
      {"sqrt", cuda_math, {{f32, 2e-6}}, unary([](const Tensor& x) { return sqrt(abs(x)); })},
      {"abs", cuda_math_i32, {{f32, 0}, {i32, 0}}, unary([](const Tensor& x) { return abs(x); })},
      {"sign", cuda_math_i32, {{f32, 0}, {i32, 0}}, unary([](const Tensor& x) { return sign(x); }, {.gradient = false})},
      {"relu", cuda_math, {{f32, 0}}, unary([](const Tensor& x) { return relu(x); })},
      {"leaky_relu", cuda_math, {{f32, 0}}, unary([](const Tensor& x) { return leaky_relu(x, 0.2); })},
      {"gelu", cuda_math, {{f32, 2e-6}}, unary([](const Tensor& x) { return gelu(x); })},
      {"tanh", cuda_math, {{f32, 2e-6}}, unary([](const Tensor& x) { return tanh(x); })},
      {"sigmoid", cuda_math, {{f32, 2e-6}}, unary([](const Tensor& x) { return sigmoid(x); })},
      {"pow scalar", cuda_math, {{f32, 4e-6}}, pow_scalar_cases},
      {"isfinite", cuda_exact, vulkan_exact, isfinite_cases},
      {"scalars", cuda_math_i32, {{f32, 0}, {i32, 0}}, unary([](const Tensor& x) { return x * 3.0 + 7.0; })},
      {"in-place arithmetic", cuda_math_i32, {{f32, 2e-6}, {i32, 0}}, inplace_arithmetic_cases},
      {"relu_backward", cuda_math, {{f32, 0}},
       unary([](const Tensor& x) { return relu_backward(x, x * 0.5); }, {.gradient = false})},
      {"leaky_relu_backward", cuda_math, {{f32, 0}},
       unary([](const Tensor& x) { return leaky_relu_backward(x, x * 0.5, 0.1); }, {.gradient = false})},
      {"gelu_backward", cuda_math, {{f32, 2e-6}},
       unary([](const Tensor& x) { return gelu_backward(x, x * 0.5); }, {.gradient = false})},

      {"add", cuda_math_i32, {{f32, 0}, {i32, 0}}, binary([](const Tensor& a, const Tensor& b) { return a + b; })},
      {"sub", cuda_math_i32, {{f32, 0}, {i32, 0}}, binary([](const Tensor& a, const Tensor& b) { return a - b; })},
      {"mul", cuda_math_i32, {{f32, 0}, {i32, 0}}, binary([](const Tensor& a, const Tensor& b) { return a * b; })},
      {"div", cuda_math_i32, {{f32, 1e-6}, {i32, 0}}, binary([](const Tensor& a, const Tensor& b) { return a / b; })},
      {"pow", cuda_math_i32, {{f32, 4e-6}, {i32, 0}}, pow_cases},
      {"maximum", cuda_math_i32, {{f32, 0}, {i32, 0}}, binary([](const Tensor& a, const Tensor& b) { return maximum(a, b); })},
      {"minimum", cuda_math_i32, {{f32, 0}, {i32, 0}}, binary([](const Tensor& a, const Tensor& b) { return minimum(a, b); })},
      {"eq", cuda_math_i32, {{f32, 0}, {i32, 0}}, binary([](const Tensor& a, const Tensor& b) { return eq(a, b); }, false)},
      {"ne", cuda_math_i32, {{f32, 0}, {i32, 0}}, binary([](const Tensor& a, const Tensor& b) { return ne(a, b); }, false)},
      {"gt", cuda_math_i32, {{f32, 0}, {i32, 0}}, binary([](const Tensor& a, const Tensor& b) { return gt(a, b); }, false)},
      {"ge", cuda_math_i32, {{f32, 0}, {i32, 0}}, binary([](const Tensor& a, const Tensor& b) { return ge(a, b); }, false)},
      {"lt", cuda_math_i32, {{f32, 0}, {i32, 0}}, binary([](const Tensor& a, const Tensor& b) { return lt(a, b); }, false)},
      {"le", cuda_math_i32, {{f32, 0}, {i32, 0}}, binary([](const Tensor& a, const Tensor& b) { return le(a, b); }, false)},

      // Philox draws: the CPU's numbers; normal through the backend's log, sin and cos
      {"uniform", {{f32, 0}, {f64, 0}}, {{f32, 0}}, uniform_cases},
      {"normal", {{f32, 1e-6}, {f64, {1e-12, 1e-6}}}, {{f32, 1e-6}}, normal_cases},
      {"dropout", {{f32, 0}, {f64, 0}, {b16, 0}}, {{f32, 0}}, dropout_cases},
      {"bad indices", {{f32, 0}}, {{f32, 0}}, bad_index_cases},
      {"read_async", cuda_exact, vulkan_exact, read_async_cases},
      {"ring_push", cuda_exact, vulkan_exact, ring_push_cases},
      {"anomaly mode", {{f32, 0}}, {{f32, 0}}, anomaly_cases},

      {"reduce", {{f32, 1e-5}, {f64, 1e-12}, {i32, 1e-5}, {b16, bf16_ulp}}, {{f32, 1e-5}, {i32, 1e-5}},
       [](const Run& r) { reduce_cases(r, 60); }},
      {"add_correct", {{f32, 0}, {f64, 0}, {i32, 0}, {b16, 0}}, {{f32, 0}, {i32, 0}}, add_correct_cases},
      {"cross_entropy_counting", {{f32, 0}, {f64, 0}, {b16, 0}}, {{f32, 0}}, cross_entropy_counting_cases},
      {"softmax", cuda_softmax, vulkan_softmax, softmax_cases},
      {"softmax special values", cuda_softmax, vulkan_softmax, softmax_special_cases},
      {"cross_entropy", cuda_loss, vulkan_softmax, cross_entropy_cases},
      {"cross_entropy special values", cuda_loss, vulkan_softmax, cross_entropy_special_cases},
      // the tolerance: index_add's with repeated indices (CUDA adds them in another order; Vulkan
      // in the CPU's)
      {"index_select", {{f32, 1e-5}, {f64, 1e-13}, {i32, 0}, {u8, 0}}, {{f32, 0}, {i32, 0}, {u8, 0}},
       index_select_cases},

      // matmul: an atol per sqrt(k), the spread of a sum of k products
      {"matmul", {{f32, 1e-4}, {f64, 1e-12}, {b16, bf16_product}}, {{f32, 1e-4}}, matmul_cases},
      {"matmul large products", {{f32, 1e-5}, {f64, 1e-12}, {b16, bf16_product}}, {{f32, 1e-5}}, matmul_large_cases},
      {"matmul layers", {{f32, 1e-4}, {f64, 1e-12}, {b16, bf16_product}}, {{f32, 1e-4}}, matmul_layer_cases},
      // odd shapes (test_cuda: the shapes of each CUDA production kernel)
      {"matmul bias relu", {{f32, 1e-4}, {f64, 1e-12}, {b16, bf16_product}}, {{f32, 1e-4}},
       [](const Run& r) { matmul_bias_relu_cases(r, {{64, 10, 128}, {1, 7, 5}, {33, 65, 17}, {129, 31, 300}}); }},

      // with the MNIST CNN's layers at batch 8 (test_cuda: at 64 and 16, CUDA's production versions)
      {"conv2d", cuda_conv, vulkan_conv,
       [](const Run& r) {
         conv2d_cases(r);
         conv2d_layer_cases(r, mnist_conv_layers(8, 8));
       }},
      {"conv2d special values", cuda_conv, vulkan_conv, conv2d_special_cases},
      // CUDA in f32, whose tensor-core versions recompute non-finite outputs in plain f32 (its f64
      // versions are untried). Vulkan: an input pixel that no tap of the infinite weight reaches
      // comes out NaN, not the CPU's finite sum (conv2d.comp's backward input loads zeros for the
      // taps outside the output and multiplies them by the weight: 0 * inf); left out there until
      // it skips them.
      {"conv2d_backward_input special values", {{f32, {1e-4, 1e-6}}}, {}, conv2d_backward_input_special_cases},
      {"conv2d bias relu", {{f32, 1e-4}, {f64, 1e-12}, {b16, {8e-3, 1e-6}}}, {{f32, 1e-4}},
       [](const Run& r) { conv2d_bias_relu_cases(r, mnist_conv_layers(8, 8)); }},
      // values and indices exact; the tolerance is the backward's and the gradient's
      {"max_pool2d", {{f32, 0}, {f64, 0}, {b16, 0}}, {{f32, 0}}, max_pool2d_cases},
      {"max_pool2d_dropout", {{f32, 0}, {f64, 0}, {b16, 0}}, {{f32, 0}}, max_pool2d_dropout_cases},
      {"avg_pool2d", {{f32, 1e-6}, {f64, 1e-14}, {b16, bf16_ulp}}, {{f32, 1e-6}}, avg_pool2d_cases},
      {"batch_norm", {{f32, 1e-4}, {f64, 1e-10}}, {{f32, 1e-4}}, batch_norm_cases},
      // LayerNorm, GroupNorm, Embedding, AdaptiveAvgPool2d, Unflatten, Identity: kiln's ops put together
      {"layers of ops", {{f32, 1e-4}, {f64, 1e-10}}, {{f32, 1e-4}}, layer_cases},

      // every rule, on tensors that are empty, of one element, and of a few launches' worth
      {"optimizer", {{f32, 2e-5}, {f64, 1e-12}}, {{f32, 2e-5}},
       [](const Run& r) { optimizer_cases(r, {{70000}, {0}, {1}, {3, 7}, {16385}, {100, 31}}); }},
      {"gradcheck", {{f32, 1e-2}}, {{f32, 1e-2}}, gradcheck_cases},
      {"training steps", {{f32, {2e-3, 2e-4}}}, {{f32, {2e-3, 2e-4}}}, training_steps_cases},
      {"in-place writes after a save", {{f32, 1e-6}}, {{f32, 1e-6}}, inplace_after_save_cases},
  };
  return rows;
}

// Each (row, backend) as a doctest case: the cases' names lead to their row and backend.
struct Registered {
  const Row* row;
  const DeviceBackend* backend;
};
std::map<std::string, Registered>& registered() {
  static std::map<std::string, Registered> cases;
  return cases;
}

void run_registered() {
  const Registered& c = registered().at(doctest::getContextOptions()->currentTest->m_name);
  manual_seed(1);  // the same inputs whichever cases run before: a case alone reproduces itself
  c.row->cases(Run{c.backend->device, c.row->on(c.backend->name), c.backend->max_binding_bytes});
  c.backend->after_case();
}

const bool registered_all = [] {
  for (const DeviceBackend& backend : compiled_backends()) {
    doctest::detail::TestSuite suite;
    suite.m_test_suite = backend.name.data();  // a string literal: null-terminated
    for (size_t i = 0; i < table().size(); ++i) {
      const Row& row = table()[i];
      if (row.on(backend.name).empty()) continue;
      auto it = registered().emplace(row.op + " on " + std::string(backend.name), Registered{&row, &backend}).first;
      doctest::detail::regTest(
          doctest::detail::TestCase(run_registered, __FILE__, static_cast<unsigned>(i + 1), suite) * it->first.c_str());
    }
  }
  return true;
}();

}  // namespace
