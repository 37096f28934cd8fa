// The CUDA matmul ladder against the CPU backend: every version (10 included) called directly
// (kernels/cuda/matmul/matmul.cuh) on odd shapes and all four transpose combinations; then TF32
// (production, 10_tf32_async on its cp.async path and on 08's, and 13_tf32_wgmma with operands
// read in place and packed); then 12_3xtf32's and 17_3xtf32_wgmma's f32 accuracy and special
// values, 17 in every layout and split of k; then 09_split_k at
// chosen split counts; and the fused bias and ReLU through autograd at the shapes of each
// production kernel. (matmul through kiln::matmul on every backend, f32 and f64: the "matmul"
// rows of test_backend_ops.)
#include "tests/cuda/cuda_test.h"
#include "tests/matmul_cases.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "kiln/core/precision.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/matmul/matmul.cuh"

using namespace kiln;
using namespace kiln::test;

namespace {

// Restores allow_tf32 to off however the case ends.
struct Tf32Guard {
  explicit Tf32Guard(bool on) { set_allow_tf32(on); }
  ~Tf32Guard() { set_allow_tf32(false); }
  Tf32Guard(const Tf32Guard&) = delete;
  Tf32Guard& operator=(const Tf32Guard&) = delete;
};

// The epilogue of layout `trans` (0-3) in the version sweeps: none, a bias, a bias and ReLU, ReLU
// alone. apply() passes a CPU result through it.
struct SweepEpilogue {
  Tensor bias, gpu_bias;
  bool with_bias;
  Activation act;
  SweepEpilogue(int trans, int64_t n)
      : bias(uniform({n}, -1, 1)), gpu_bias(bias.to(kCuda)), with_bias(trans == 1 || trans == 2),
        act(trans >= 2 ? Activation::relu : Activation::none) {}
  Tensor apply(Tensor want) const {
    if (with_bias) want = want + bias.to(want.dtype());
    return act == Activation::relu ? relu(want) : want;
  }
  cuda::DeviceEpilogue<float> device() const { return {with_bias ? gpu_bias.ref().data<float>() : nullptr, act}; }
};

// A product as the kernels take it: A [batch, m, k] ([batch, k, m] when transposed) and B likewise,
// each row padded to lda / ldb floats, values uniform in [lo, 1); one A (or B) for every batch
// entry when broadcast. `a` and `b` are the stored buffers (CPU), a_used and b_used their views
// without the padding, `shape` names it all for messages.
struct StoredProduct {
  MatmulParams p;
  Tensor a, b;
  std::string shape;
  Tensor a_used(DType t = DType::f32) const { return a.to(t).slice(2, 0, p.trans_a ? p.m : p.k); }
  Tensor b_used(DType t = DType::f32) const { return b.to(t).slice(2, 0, p.trans_b ? p.k : p.n); }
  // the product in `t`, from the used values
  Tensor want(DType t = DType::f32) const {
    Tensor av = a_used(t), bv = b_used(t);
    return matmul(p.trans_a ? av.transpose(1, 2) : av, p.trans_b ? bv.transpose(1, 2) : bv);
  }
};
struct StoredLayout {
  bool trans_a = false, trans_b = false;
  int64_t lda_pad = 0, ldb_pad = 0;
  bool broadcast_a = false, broadcast_b = false;
  double lo = -1;
};
StoredProduct stored_product(int64_t batch, int64_t m, int64_t n, int64_t k, const StoredLayout& l) {
  StoredProduct s;
  MatmulParams& p = s.p;
  p.batch = batch, p.m = m, p.n = n, p.k = k, p.trans_a = l.trans_a, p.trans_b = l.trans_b;
  const int64_t a_rows = p.trans_a ? k : m, a_cols = p.trans_a ? m : k;
  const int64_t b_rows = p.trans_b ? n : k, b_cols = p.trans_b ? k : n;
  p.lda = a_cols + l.lda_pad, p.ldb = b_cols + l.ldb_pad;
  p.batch_stride_a = l.broadcast_a ? 0 : a_rows * p.lda;
  p.batch_stride_b = l.broadcast_b ? 0 : b_rows * p.ldb;
  s.a = uniform({l.broadcast_a ? 1 : batch, a_rows, p.lda}, l.lo, 1);
  s.b = uniform({l.broadcast_b ? 1 : batch, b_rows, p.ldb}, l.lo, 1);
  s.shape = std::to_string(batch) + "x" + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
            (p.trans_a ? " A^T" : "") + (p.trans_b ? " B^T" : "") + " lda " + std::to_string(p.lda) + " ldb " +
            std::to_string(p.ldb) + (l.broadcast_a ? " A broadcast" : "") + (l.broadcast_b ? " B broadcast" : "");
  return s;
}

// A stored product in bf16 for the bf16 versions: the operands rounded to bf16 on the GPU, the
// epilogue's bias too, and the CPU's answer: the product of the bf16 operands in f32, through the
// epilogue (its bias rounded to bf16 as the kernels get it) in f32, rounded once.
struct Bf16Product {
  Tensor want, ga, gb, gbias;
  cuda::DeviceEpilogue<bf16> e;
  Bf16Product(const StoredProduct& sp, const SweepEpilogue& ep)
      : ga(sp.a.to(DType::bf16).to(kCuda)), gb(sp.b.to(DType::bf16).to(kCuda)), gbias(ep.bias.to(DType::bf16).to(kCuda)),
        e{ep.with_bias ? gbias.ref().data<bf16>() : nullptr, ep.act} {
    const MatmulParams& p = sp.p;
    const Tensor av = sp.a_used(DType::bf16).to(DType::f32), bv = sp.b_used(DType::bf16).to(DType::f32);
    want = matmul(p.trans_a ? av.transpose(1, 2) : av, p.trans_b ? bv.transpose(1, 2) : bv);
    if (ep.with_bias) want = want + ep.bias.to(DType::bf16).to(DType::f32);
    if (ep.act == Activation::relu) want = relu(want);
    want = want.to(DType::bf16);
  }
  const bf16* a() const { return ga.ref().data<bf16>(); }
  const bf16* b() const { return gb.ref().data<bf16>(); }
};

}  // namespace

TEST_CASE("every matmul version matches the CPU on odd shapes, both transposes, batches") {
  struct Case { int64_t batch, m, n, k; bool broadcast_b; int64_t pad; };
  const Case cases[] = {
      {1, 1, 1, 1, false, 0},     {1, 1, 7, 5, false, 0},      {1, 13, 1, 17, false, 1},
      {1, 37, 53, 29, false, 0},  {2, 129, 131, 67, false, 3}, {3, 64, 128, 784, true, 0},
      {1, 200, 17, 300, false, 4}, {2, 128, 128, 128, false, 0}, {1, 5, 300, 3, true, 2},
      {1, 33, 65, 0, false, 0},
  };
  cuda::CudaBackend& be = cuda::backend(0);
  for (const Case& cs : cases)
    for (int trans = 0; trans < 4; ++trans) {
      const StoredProduct sp = stored_product(cs.batch, cs.m, cs.n, cs.k,
                                              {.trans_a = (trans & 1) != 0, .trans_b = (trans & 2) != 0,
                                               .lda_pad = cs.pad, .ldb_pad = cs.pad, .broadcast_b = cs.broadcast_b});
      const MatmulParams& p = sp.p;
      const SweepEpilogue ep(trans, cs.n);
      const Tensor want = ep.apply(sp.want());
      const cuda::DeviceEpilogue<float> epilogue = ep.device();
      Tensor ga = sp.a.to(kCuda), gb = sp.b.to(kCuda);
      const std::string& shape = sp.shape;
      const double sk = std::sqrt(static_cast<double>(std::max<int64_t>(cs.k, 1)));
      for (const auto& v : cuda::matmul::versions()) {
        Tensor out = full({cs.batch, cs.m, cs.n}, 7.0, kCuda);  // stale values must be overwritten
        v.run(p, ga.ref().data<float>(), gb.ref().data<float>(), out.ref().data<float>(), epilogue, be.stream());
        const double tol = v.tf32 ? 2e-3 : 1e-4;
        check_close(out, want, tol, tol * sk, std::string(v.name) + " " + shape + " epilogue " + std::to_string(trans));
      }
      const Tensor want64 = ep.apply(sp.want(DType::f64));
      Tensor ga64 = sp.a.to(DType::f64).to(kCuda), gb64 = sp.b.to(DType::f64).to(kCuda);
      Tensor gbias64 = ep.gpu_bias.to(DType::f64);
      Tensor out64 = full({cs.batch, cs.m, cs.n}, 7.0, TensorOptions(DType::f64).device(kCuda));
      cuda::matmul::smem_tiling_f64(p, ga64.ref().data<double>(), gb64.ref().data<double>(),
                                    out64.ref().data<double>(),
                                    {ep.with_bias ? gbias64.ref().data<double>() : nullptr, ep.act}, be.stream());
      check_close(out64, want64, 1e-12, 1e-12 * sk, "03_smem_tiling f64 " + shape);
    }
}

TEST_CASE("with allow_tf32, f32 matmul runs on TF32 tensor cores within its error bound") {
  Tf32Guard tf32(true);
  std::mt19937 rng(13);
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t m = pick(rng), n = pick(rng), k = pick(rng);
    std::string how = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " tf32";
    Operand a = operand(rng, {2}, m, k, DType::f32, how), b = operand(rng, {}, k, n, DType::f32, how);
    // The truth in f64: TF32's rounding (2^-11 relative per input) is the only error allowed.
    Tensor want = matmul(a.cpu().to(DType::f64), b.cpu().to(DType::f64));
    Tensor got = matmul(a.on(kCuda), b.on(kCuda)).to(DType::f64);
    check_close(got, want, 1e-3, 1e-3 * std::sqrt(static_cast<double>(k)), how);
  }
}

TEST_CASE("10_tf32_async stays within TF32's error bound of the f64 result, on its fast path and on 08's") {
  // Odd m, n (never whole 128 x 128 tiles) and k (partial cp.async chunks at the k edge); row
  // strides padded to a multiple of 4 floats take the cp.async path, others fall back to 08.
  struct Case { int64_t batch, m, n, k; bool trans_a, trans_b; int64_t lda_pad, ldb_pad; bool fast; bool positive; };
  const Case cases[] = {
      {1, 131, 77, 45, false, false, 3, 3, true, false},  // lda 48, ldb 80
      {2, 257, 129, 301, false, true, 3, 3, true, false}, // B^T: ldb 304
      {1, 97, 200, 64, true, false, 3, 0, true, false},   // A^T: lda 100
      {3, 65, 33, 7, true, true, 3, 1, true, false},      // k 7: a partial chunk per row of B
      {1, 1, 1, 1, false, false, 3, 3, true, false},
      {1, 300, 260, 515, false, false, 1, 0, true, true},  // all positive: truncation's bias adds up
      {1, 131, 77, 45, false, false, 0, 0, false, false}, // lda 45: not 16-byte rows, runs 08
      {2, 129, 131, 67, true, true, 1, 2, false, false},  // lda 131 % 4 != 0: runs 08
  };
  cuda::CudaBackend& be = cuda::backend(0);
  for (const Case& cs : cases) {
    const StoredProduct sp = stored_product(cs.batch, cs.m, cs.n, cs.k,
                                            {.trans_a = cs.trans_a, .trans_b = cs.trans_b, .lda_pad = cs.lda_pad,
                                             .ldb_pad = cs.ldb_pad, .lo = cs.positive ? 0.0 : -1.0});
    const MatmulParams& p = sp.p;
    const Tensor want = sp.want(DType::f64);
    Tensor ga = sp.a.to(kCuda), gb = sp.b.to(kCuda);
    const std::string& shape = sp.shape;
    CHECK_MESSAGE(cuda::matmul::async_applies(p, ga.ref().data<float>(), gb.ref().data<float>()) == cs.fast,
                  shape);
    Tensor out = full({cs.batch, cs.m, cs.n}, 7.0, kCuda);  // stale values must be overwritten
    cuda::matmul::tf32_async(p, ga.ref().data<float>(), gb.ref().data<float>(), out.ref().data<float>(), {},
                             be.stream());
    // Truncation to TF32 costs up to 2^-10 per input (mean about 2^-11 on random mantissas), so about
    // 1e-3 relative on a sum of same-sign products and a random walk of sqrt(k) such terms otherwise.
    const double rtol = cs.positive ? 2e-3 : 1e-3;
    check_close(out.to(DType::f64), want, rtol, 1e-3 * std::sqrt(static_cast<double>(cs.k)),
                "10_tf32_async " + shape);
  }
}

TEST_CASE("13_tf32_wgmma stays within TF32's error bound of the f64 result, in every layout and tile") {
  // 13 reads a K-major operand (A not transposed, B transposed) from shared memory and an MN-major
  // one (A^T, B plain) through registers; when both are MN-major it packs the smaller K-major into
  // a workspace, as it does any operand TMA cannot read in place (rows not 16-byte aligned). On a
  // GPU that is not an sm_90 it runs 11, which must pass the same checks. Every tile width
  // (128 x 256, 128 x 128, 128 x 64); shapes span several tiles with ragged edges, k several ring
  // turns of 32 with a partial last slice, batches with A broadcast.
  struct Case {
    int64_t batch, m, n, k;
    bool trans_a, trans_b;
    int64_t lda_pad, ldb_pad;
    bool broadcast_a;
    bool pack_a, pack_b;  // what 13 packs into its workspace
  };
  const Case cases[] = {
      {1, 300, 520, 515, false, true, 1, 1, false, false, false},  // lda = ldb = 516: both K-major in place
      {2, 257, 129, 301, false, false, 3, 3, false, false, false}, // B runs along n: B's rows through registers
      {2, 300, 260, 200, true, true, 0, 0, false, false, false},   // A^T's rows through registers
      {3, 65, 33, 7, true, true, 3, 1, true, false, false},        // A^T broadcast over the 3 entries
      {1, 97, 600, 64, true, false, 3, 0, false, true, false},     // both MN-major: A, the smaller, packed
      {1, 600, 97, 64, true, false, 0, 3, false, false, true},     // both MN-major: B, the smaller, packed
      {1, 131, 77, 45, false, true, 0, 3, false, true, false},     // lda 45: rows not 16-byte aligned, A packed
      {1, 131, 77, 45, false, false, 3, 0, false, false, true},    // ldb 77: B packed, then both K-major
      {4, 200, 260, 96, false, true, 0, 0, true, false, false},    // A broadcast, read in place
      {1, 1, 1, 1, false, false, 3, 3, false, false, false},
  };
  cuda::CudaBackend& be = cuda::backend(0);
  for (const Case& cs : cases) {
    const StoredProduct sp = stored_product(cs.batch, cs.m, cs.n, cs.k,
                                            {.trans_a = cs.trans_a, .trans_b = cs.trans_b, .lda_pad = cs.lda_pad,
                                             .ldb_pad = cs.ldb_pad, .broadcast_a = cs.broadcast_a});
    const MatmulParams& p = sp.p;
    const Tensor want = sp.want(DType::f64);
    Tensor ga = sp.a.to(kCuda), gb = sp.b.to(kCuda);
    const std::string& shape = sp.shape;
    const float* a = ga.ref().data<float>();
    const float* b = gb.ref().data<float>();
    // The workspace holds the packed operands: rows of k rounded up to 4 floats.
    const int64_t row = (cs.k + 3) / 4 * 4;
    const int64_t floats = (cs.pack_a ? (cs.broadcast_a ? 1 : cs.batch) * cs.m * row : 0) +
                           (cs.pack_b ? cs.batch * cs.n * row : 0);
    CHECK_MESSAGE(cuda::matmul::tf32_wgmma_workspace(p, a, b) == static_cast<size_t>(floats) * sizeof(float), shape);
    using Named = std::pair<const char*, cuda::matmul::Version>;
    const Named tiles[] = {{"13_tf32_wgmma", cuda::matmul::tf32_wgmma},
                           {"13_tf32_wgmma_128x128", cuda::matmul::tf32_wgmma_128x128},
                           {"13_tf32_wgmma_128x64", cuda::matmul::tf32_wgmma_128x64}};
    for (const auto& [name, version] : tiles) {
      Tensor out = full({cs.batch, cs.m, cs.n}, 7.0, kCuda);  // stale values must be overwritten
      version(p, a, b, out.ref().data<float>(), {}, be.stream());
      check_close(out.to(DType::f64), want, 1e-3, 1e-3 * std::sqrt(static_cast<double>(cs.k)),
                  std::string(name) + " " + shape);
    }
  }
}

TEST_CASE("14_bf16_mma, 15_bf16_wgmma and 09_split_k in bf16 match the CPU's bf16 product in every layout, epilogue and tile") {
  // bf16 operands and result: the CPU's reference widens the operands to f32, multiplies and rounds
  // each element once (kernels/cpu/widen.cpp), as the kernels do with f32 accumulation in another
  // order: they agree to an ulp of bf16 (2^-8 relative) plus the f32 sums' reordering. 15 reads
  // every operand in place, K-major or MN-major (wgmma's transpose), and packs only one whose rows
  // are not 16-byte aligned (8 bf16); elsewhere than on an sm_90 it runs 14. Shapes span several tiles with ragged edges, k several
  // ring turns of 64 with a partial last slice; the production path on each too.
  struct Case {
    int64_t batch, m, n, k;
    bool trans_a, trans_b;
    int64_t lda_pad, ldb_pad;
    bool broadcast_a;
    bool pack_a, pack_b;  // what 15 packs into its workspace
  };
  const Case cases[] = {
      {1, 300, 520, 515, false, true, 5, 5, false, false, false},  // lda = ldb = 520: both K-major in place
      {2, 257, 129, 301, false, false, 3, 7, false, false, false},  // B runs along n: read MN-major
      {2, 300, 260, 200, true, true, 4, 0, false, false, false},    // A^T read MN-major
      {1, 200, 300, 150, true, false, 0, 4, false, false, false},   // both MN-major
      {3, 65, 33, 7, false, true, 1, 1, true, false, false},        // A broadcast over the 3 entries
      {1, 131, 77, 45, false, true, 0, 3, false, true, false},      // lda 45: rows not 16-byte aligned
      {1, 131, 77, 45, false, false, 3, 0, false, false, true},     // ldb 77: B packed
      {1, 1, 1, 1, false, false, 7, 7, false, false, false},
  };
  cuda::CudaBackend& be = cuda::backend(0);
  for (const Case& cs : cases) {
    for (int epilogue = 0; epilogue < 4; ++epilogue) {
      const StoredProduct sp = stored_product(cs.batch, cs.m, cs.n, cs.k,
                                              {.trans_a = cs.trans_a, .trans_b = cs.trans_b, .lda_pad = cs.lda_pad,
                                               .ldb_pad = cs.ldb_pad, .broadcast_a = cs.broadcast_a});
      const MatmulParams& p = sp.p;
      const SweepEpilogue ep(epilogue, cs.n);
      const Bf16Product bp(sp, ep);
      const Tensor& want = bp.want;
      const cuda::DeviceEpilogue<bf16>& e = bp.e;
      const bf16 *a = bp.a(), *b = bp.b();
      const int64_t row = (cs.k + 7) / 8 * 8;  // packed rows: k rounded up to 8 bf16
      const int64_t elements = (cs.pack_a ? (cs.broadcast_a ? 1 : cs.batch) * cs.m * row : 0) +
                               (cs.pack_b ? cs.batch * cs.n * row : 0);
      CHECK_MESSAGE(cuda::matmul::bf16_wgmma_workspace(p, a, b) == static_cast<size_t>(elements) * 2, sp.shape);
      Tensor ws = full({5 * cs.m * cs.n}, 7.0, TensorOptions(DType::f32).device(kCuda));  // 09's partials
      float* partials = ws.ref().data<float>();
      using Run = std::function<void(bf16*)>;
      const std::pair<const char*, Run> versions[] = {
          {"14_bf16_mma", [&](bf16* c) { cuda::matmul::bf16_mma(p, a, b, c, e, be.stream()); }},
          {"15_bf16_wgmma", [&](bf16* c) { cuda::matmul::bf16_wgmma(p, a, b, c, e, be.stream()); }},
          {"09_split_k (bf16), one chunk",
           [&](bf16* c) { cuda::matmul::split_k_run(p, a, b, c, e, 1, nullptr, be.stream()); }},
          {"09_split_k (bf16), up to 5 chunks",
           [&](bf16* c) { cuda::matmul::split_k_run(p, a, b, c, e, 5, partials, be.stream()); }},
      };
      for (const auto& [name, run] : versions) {
        Tensor out = full({cs.batch, cs.m, cs.n}, 7.0, TensorOptions(DType::bf16).device(kCuda));  // overwritten
        run(out.ref().data<bf16>());
        check_close(out.to(DType::f64), want.to(DType::f64), 8e-3, 1e-4 * std::sqrt(static_cast<double>(cs.k)),
                    std::string(name) + " " + sp.shape + " epilogue " + std::to_string(epilogue));
      }
    }
  }
}

TEST_CASE("16_bf16_wgmma_split_k matches the CPU's bf16 product at any number of chunks, in every layout") {
  // k cut into chunks of whole slices (64), each block's f32 sums added in chunk order by 09's
  // reduce kernel, through the epilogue, rounded once: as 15 to an ulp of bf16 plus the sums'
  // reordering. Ragged m and n, a partial last slice, operands read K-major, MN-major or packed
  // (ldb 133: rows not 16-byte aligned); chunk counts of one (15 itself), a few, and more than
  // chunks of four slices allow (capped there: kMinChunkSlices). Skipped where 16 does not run
  // (wgmma_runs: an sm_90 GPU and a build with sm_90a code).
  struct Case {
    int64_t m, n, k;
    bool trans_a, trans_b;
    int64_t lda_pad, ldb_pad;
  };
  const Case cases[] = {
      {64, 128, 9216, false, true, 0, 0},  // the MNIST CNN's fc1 at batch 64, as production runs it
      {65, 130, 2053, false, false, 3, 6}, {200, 70, 1100, true, true, 0, 5}, {33, 257, 700, true, false, 4, 3},
      {131, 77, 1000, false, false, 0, 56},
  };
  cuda::CudaBackend& be = cuda::backend(0);
  const bool wgmma = cuda::wgmma_runs(be.device());
  if (!wgmma) MESSAGE("16_bf16_wgmma_split_k skipped: not an sm_90 GPU, or built without sm_90a");
  for (const Case& cs : cases)
    for (int64_t splits : {1, 3, 7, 1000}) {
      if (!wgmma) break;
      const StoredProduct sp = stored_product(1, cs.m, cs.n, cs.k,
                                              {.trans_a = cs.trans_a, .trans_b = cs.trans_b, .lda_pad = cs.lda_pad,
                                               .ldb_pad = cs.ldb_pad});
      const MatmulParams& p = sp.p;
      const SweepEpilogue ep(static_cast<int>(splits % 4), cs.n);
      const Bf16Product bp(sp, ep);
      const Tensor& want = bp.want;
      const bf16 *a = bp.a(), *b = bp.b();
      const size_t bytes = cuda::matmul::bf16_wgmma_split_k_workspace(p, a, b, splits);
      Tensor ws = full({static_cast<int64_t>(bytes / 4) + 1}, 7.0, TensorOptions(DType::f32).device(kCuda));
      Tensor out = full({1, cs.m, cs.n}, 7.0, TensorOptions(DType::bf16).device(kCuda));  // overwritten
      cuda::matmul::bf16_wgmma_split_k_run(p, a, b, out.ref().data<bf16>(), bp.e, splits, ws.ref().data<float>(),
                                           be.stream());
      const std::string what = "16_bf16_wgmma_split_k " + sp.shape + ", " + std::to_string(splits) + " chunks";
      check_close(out.to(DType::f64), want.to(DType::f64), 8e-3, 1e-4 * std::sqrt(static_cast<double>(cs.k)), what);
      // the same bits again: the chunks add in a fixed order
      Tensor again = full({1, cs.m, cs.n}, 3.0, TensorOptions(DType::bf16).device(kCuda));
      cuda::matmul::bf16_wgmma_split_k_run(p, a, b, again.ref().data<bf16>(), bp.e, splits,
                                           ws.ref().data<float>(), be.stream());
      CHECK_MESSAGE(again.to(DType::f32).to_vector<float>() == out.to(DType::f32).to_vector<float>(), what);
    }
  // one product at a time
  const StoredProduct two = stored_product(2, 64, 64, 4096, {});
  Tensor ga = two.a.to(DType::bf16).to(kCuda), gb = two.b.to(DType::bf16).to(kCuda);
  Tensor out = empty({2, 64, 64}, TensorOptions(DType::bf16).device(kCuda));
  CHECK_THROWS_AS(cuda::matmul::bf16_wgmma_split_k_run(two.p, ga.ref().data<bf16>(), gb.ref().data<bf16>(),
                                                       out.ref().data<bf16>(), {}, 4, nullptr, be.stream()),
                  ShapeError);
}

TEST_CASE("12_3xtf32 has f32's accuracy on tensor cores, and f32's infinities and NaN") {
  cuda::CudaBackend& be = cuda::backend(0);
  // Against the f64 product, on all-positive inputs (where rounding biases add up instead of
  // cancelling): 12 must stay within a small factor of 07's error (f32 on the CUDA cores), while
  // 11 (inputs cut to TF32) misses by far more, so the comparison can tell them apart.
  struct Case { int64_t m, n, k; bool trans_a, trans_b; };
  for (Case cs : {Case{131, 77, 45, false, false}, Case{300, 260, 2053, false, true}, Case{97, 200, 64, true, false},
                  Case{65, 33, 515, true, true}, Case{128, 128, 4096, false, false}}) {
    MatmulParams p;
    p.m = cs.m, p.n = cs.n, p.k = cs.k, p.trans_a = cs.trans_a, p.trans_b = cs.trans_b;
    const int64_t a_rows = p.trans_a ? cs.k : cs.m, b_rows = p.trans_b ? cs.n : cs.k;
    p.lda = p.trans_a ? cs.m : cs.k, p.ldb = p.trans_b ? cs.k : cs.n;
    const int64_t lda4 = (p.lda + 3) / 4 * 4, ldb4 = (p.ldb + 3) / 4 * 4;  // 16-byte rows: the fast path
    Tensor a_full = uniform({a_rows, lda4}, 0, 1), b_full = uniform({b_rows, ldb4}, 0, 1);
    Tensor a = a_full.slice(1, 0, p.lda).to(DType::f64), b = b_full.slice(1, 0, p.ldb).to(DType::f64);
    Tensor want = matmul(p.trans_a ? a.t() : a, p.trans_b ? b.t() : b);
    p.lda = lda4, p.ldb = ldb4;
    Tensor ga = a_full.to(kCuda), gb = b_full.to(kCuda);
    REQUIRE(cuda::matmul::async_applies(p, ga.ref().data<float>(), gb.ref().data<float>()));
    const double scale = max(abs(want)).item();
    auto error_of = [&](cuda::matmul::Version version) {
      Tensor out = full({cs.m, cs.n}, 7.0, kCuda);
      version(p, ga.ref().data<float>(), gb.ref().data<float>(), out.ref().data<float>(), {}, be.stream());
      return max(abs(out.to(DType::f64).to(Device::cpu()) - want)).item() / scale;
    };
    const double e07 = error_of(cuda::matmul::warptile), e11 = error_of(cuda::matmul::tf32_ldmatrix);
    const double e12 = error_of(cuda::matmul::split_tf32x3), e17 = error_of(cuda::matmul::tf32x3_wgmma);
    const std::string what = std::to_string(cs.m) + "x" + std::to_string(cs.n) + "x" + std::to_string(cs.k) +
                             (p.trans_a ? " A^T" : "") + (p.trans_b ? " B^T" : "") + ": error 07 " +
                             std::to_string(e07) + ", 11 " + std::to_string(e11) + ", 12 " + std::to_string(e12) +
                             ", 17 " + std::to_string(e17);
    CHECK_MESSAGE(e12 <= std::max(4 * e07, 2.4e-7), what);  // 2^-22: a few f32 roundings
    CHECK_MESSAGE(e17 <= std::max(4 * e07, 2.4e-7), what);
    CHECK_MESSAGE(e11 > 10 * e12, what);
    CHECK_MESSAGE(e11 > 10 * e17, what);
    MESSAGE(what);
  }
  // Infinities and NaN: one inf in a row of A makes that row of C inf (B positive), as in f32; a
  // NaN makes its row NaN. Splitting inf into inf + (inf - inf) would have made NaN of the inf.
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> av(64 * 64, 0.5), bv(64 * 64, 0.25);
  av[3 * 64 + 5] = inf, av[7 * 64 + 1] = -inf, av[9 * 64 + 60] = nan;
  Tensor a = from_vector(av, {64, 64}).to(DType::f32), b = from_vector(bv, {64, 64}).to(DType::f32);
  MatmulParams p;
  p.m = p.n = p.k = p.lda = p.ldb = 64;
  Tensor ga = a.to(kCuda), gb = b.to(kCuda), out = full({64, 64}, 7.0, kCuda);
  cuda::matmul::split_tf32x3(p, ga.ref().data<float>(), gb.ref().data<float>(), out.ref().data<float>(), {},
                             be.stream());
  check_close(out, matmul(a, b), 1e-6, 0, "12_3xtf32 with inf and NaN inputs");
  // 17 in each layout: A^T's rows through registers, B's (C^T through shared memory), both K-major
  // from shared memory, both MN-major (A packed); the check for a NaN is made once a thread or a
  // warpgroup, and only those that hold one recompute
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      MatmulParams q = p;
      q.trans_a = ta, q.trans_b = tb;
      Tensor stored_a = (ta ? a.t() : a).contiguous().to(kCuda), stored_b = (tb ? b.t() : b).contiguous().to(kCuda);
      Tensor got = full({64, 64}, 7.0, kCuda);
      cuda::matmul::tf32x3_wgmma(q, stored_a.ref().data<float>(), stored_b.ref().data<float>(), got.ref().data<float>(),
                                 {}, be.stream());
      check_close(got, matmul(a, b), 1e-6, 0,
                  std::string("17_3xtf32_wgmma with inf and NaN inputs") + (ta ? ", A^T" : "") + (tb ? ", B^T" : ""));
    }
}

TEST_CASE("17_3xtf32_wgmma matches the CPU in every layout, epilogue, batch and split of k, deterministically") {
  // 17 is 13's kernel in 3xTF32: K-major operands from shared memory (kShared), an MN-major one
  // through registers (kRegisters; B's: C^T stored transposed), both MN-major or misaligned: packed.
  // Split k: each chunk's f32 sums to a workspace, added in order by 09's reduce; infinities in a
  // chunk recomputed over that chunk's k alone. Chunk counts of one (no split), a few, and more
  // than chunks of four slices allow. Where tf32_wgmma_applies is false, the test skips 17 (its
  // ladder entry runs 12 there, which the case above checks).
  cuda::CudaBackend& be = cuda::backend(0);
  int device = 0;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  struct Case {
    int64_t batch, m, n, k;
    bool trans_a, trans_b;
    int64_t lda_pad, ldb_pad;
    bool broadcast_b;
  };
  const Case cases[] = {
      {1, 64, 128, 9216, false, true, 0, 0, false},  // the MNIST CNN's fc1 forward at batch 64
      {1, 64, 9216, 128, false, false, 0, 0, false}, // its input gradient: B's rows through registers
      {1, 128, 9216, 64, true, false, 0, 0, false},  // its weight gradient: both MN-major, A packed
      {1, 131, 77, 1000, false, true, 3, 1, false},  // ldb 1001: B packed
      {1, 200, 70, 1100, true, true, 0, 4, false},   // A^T through registers
      {1, 33, 257, 700, true, false, 4, 3, false},   // both MN-major: A packed, C^T
      {3, 129, 65, 67, false, false, 1, 3, true},    // a batch, B broadcast: no split
      {1, 1, 1, 1, false, false, 3, 3, false},
      // more tiles than an H200 has SMs, so that a block takes several (17 is persistent), in each
      // path: C^T through shared memory (the CNN's input gradient at batch 512), A^T through
      // registers, both from shared memory, a batch
      {1, 512, 9216, 128, false, false, 0, 0, false},
      {1, 2304, 520, 40, true, true, 0, 0, false},
      {1, 1100, 1100, 36, false, true, 0, 0, false},
      {3, 1000, 600, 20, false, false, 1, 3, true},
  };
  for (const Case& cs : cases)
    for (int64_t splits : {1, 3, 7, 1000}) {
      if (cs.batch > 1 && splits > 1) continue;
      const StoredProduct sp = stored_product(cs.batch, cs.m, cs.n, cs.k,
                                              {.trans_a = cs.trans_a, .trans_b = cs.trans_b, .lda_pad = cs.lda_pad,
                                               .ldb_pad = cs.ldb_pad, .broadcast_b = cs.broadcast_b});
      const MatmulParams& p = sp.p;
      if (!cuda::matmul::tf32_wgmma_applies(p, device)) {
        MESSAGE("17_3xtf32_wgmma skipped: not an sm_90 GPU, or built without sm_90a");
        return;
      }
      const SweepEpilogue ep(static_cast<int>(splits % 4), cs.n);
      const Tensor want = ep.apply(sp.want());
      Tensor ga = sp.a.to(kCuda), gb = sp.b.to(kCuda);
      const float *a = ga.ref().data<float>(), *b = gb.ref().data<float>();
      const size_t bytes = cuda::matmul::tf32x3_wgmma_workspace(p, a, b, splits);
      Tensor ws = full({static_cast<int64_t>(bytes / 4) + 1}, 7.0, kCuda);
      const std::string what = "17_3xtf32_wgmma " + sp.shape + ", " + std::to_string(splits) + " chunks";
      auto run = [&] {
        Tensor out = full({cs.batch, cs.m, cs.n}, 7.0, kCuda);  // stale values must be overwritten
        cuda::matmul::tf32x3_wgmma_run(p, a, b, out.ref().data<float>(), ep.device(), splits, ws.ref().data<float>(),
                                       be.stream());
        return out;
      };
      const Tensor got = run();
      check_close(got, want, 1e-4, 1e-4 * std::sqrt(static_cast<double>(cs.k)), what);
      CHECK_MESSAGE(run().to_vector<float>() == got.to_vector<float>(), what << ": not deterministic");
    }
  // The MNIST fc1 at batch 64 split as production splits it, with an infinity in one chunk of a row
  // and a NaN in another row: f32's inf and NaN, the other rows exact.
  const StoredProduct sp = stored_product(1, 64, 128, 9216, {.trans_b = true});
  std::vector<float> av = sp.a.to_vector<float>();
  av[5 * 9216 + 4000] = std::numeric_limits<float>::infinity();
  av[9 * 9216 + 100] = std::numeric_limits<float>::quiet_NaN();
  const Tensor a = from_vector(av, {1, 64, 9216});
  Tensor ga = a.to(kCuda), gb = sp.b.to(kCuda);
  const float *pa = ga.ref().data<float>(), *pb = gb.ref().data<float>();
  const int64_t splits = cuda::matmul::tf32x3_wgmma_splits(sp.p, pa, pb, 132);
  CHECK(splits > 1);
  Tensor ws = empty({static_cast<int64_t>(cuda::matmul::tf32x3_wgmma_workspace(sp.p, pa, pb, splits) / 4) + 1},
                    TensorOptions(DType::f32).device(kCuda));
  Tensor out = full({1, 64, 128}, 7.0, kCuda);
  cuda::matmul::tf32x3_wgmma_run(sp.p, pa, pb, out.ref().data<float>(), {}, splits, ws.ref().data<float>(),
                                 be.stream());
  const Tensor want = matmul(a, sp.b.transpose(1, 2));
  check_close(out, want, 1e-4, 1e-4 * 96, "17_3xtf32_wgmma split with inf and NaN inputs");
}

TEST_CASE("the production path's large-product TF32 kernels (11 and 13) through kiln::matmul") {
  // With allow_tf32, TF32 takes 13 on an sm_90 GPU (768 x 4096 and 4096 x 4096 both have SMs / 2
  // tiles of 128 x 256 or more, and B runs along n: packed), elsewhere 11 on 128 x 128 tiles, or on
  // 128 x 256 tiles once those fill the GPU twice (4096 x 4096). (f32's large products, 12 here:
  // test_backend_ops's "matmul large products" row.)
  Tf32Guard tf32(true);
  for (int64_t m : {768, 4096}) {
    Tensor x = uniform({m, 64}, -1, 1), y = uniform({64, 4096}, -1, 1);
    check_close(matmul(x.to(kCuda), y.to(kCuda)), matmul(x, y), 1e-3, 1e-3 * 8, "tf32 " + std::to_string(m) + "x4096x64");
  }
}

TEST_CASE("09_split_k matches the CPU at any number of splits, transposes and odd shapes, deterministically") {
  // splits: as asked; the kernel takes fewer when k is short (k < splits, or chunks of 32).
  struct Case { int64_t batch, m, n, k, splits, pad; };
  const Case cases[] = {
      {1, 1, 1, 1, 4, 0},      {1, 1, 7, 300, 3, 1},    {1, 13, 1, 257, 5, 0},  {1, 64, 128, 784, 7, 0},
      {1, 65, 129, 1000, 16, 3}, {1, 3, 5, 40, 64, 0},  {1, 64, 128, 9216, 116, 0}, {1, 33, 17, 0, 4, 0},
      {2, 37, 70, 333, 6, 2},  {1, 100, 3, 95, 2, 0},
  };
  cuda::CudaBackend& be = cuda::backend(0);
  for (const Case& cs : cases)
    for (int trans = 0; trans < 4; ++trans) {
      const StoredProduct sp = stored_product(cs.batch, cs.m, cs.n, cs.k,
                                              {.trans_a = (trans & 1) != 0, .trans_b = (trans & 2) != 0,
                                               .lda_pad = cs.pad, .ldb_pad = cs.pad});
      const MatmulParams& p = sp.p;
      const SweepEpilogue ep(trans, cs.n);
      const Tensor want = ep.apply(sp.want());
      const cuda::DeviceEpilogue<float> epilogue = ep.device();
      Tensor ga = sp.a.to(kCuda), gb = sp.b.to(kCuda);
      Tensor workspace = full({cs.splits, cs.m, cs.n}, -3.0, kCuda);
      const std::string shape = sp.shape + " splits " + std::to_string(cs.splits);
      auto run = [&] {
        Tensor out = full({cs.batch, cs.m, cs.n}, 7.0, kCuda);  // stale values must be overwritten
        cuda::matmul::split_k_run(p, ga.ref().data<float>(), gb.ref().data<float>(), out.ref().data<float>(), epilogue,
                                  cs.splits, workspace.ref().data<float>(), be.stream());
        return out;
      };
      Tensor got = run();
      const double sk = std::sqrt(static_cast<double>(std::max<int64_t>(cs.k, 1)));
      check_close(got, want, 1e-4, 1e-4 * sk, "09_split_k " + shape + " epilogue " + std::to_string(trans));
      // The partials are added in a fixed order: a second run gives the same bits.
      CHECK_MESSAGE(run().to_vector<float>() == got.to_vector<float>(), "09_split_k not deterministic: " << shape);
    }
}

TEST_CASE("with allow_tf32, a 64 x 9216 -> 128 layer still takes split-K: exact f32") {
  // A product this small goes to 09_split_k under allow_tf32 too, so it keeps f32's tolerance
  // (the layers' products without TF32: test_backend_ops's "matmul layers" row).
  Tf32Guard guard(true);
  Tensor x = uniform({64, 9216}, -1, 1), w = uniform({128, 9216}, -1, 1);
  check_close(matmul(x.to(kCuda), w.to(kCuda).t()), matmul(x, w.t()), 1e-4, 1e-4 * std::sqrt(9216.0),
              "64 x 9216 -> 128 tf32");
}

TEST_CASE("matmul with a fused bias and ReLU through autograd, in every production path") {
  // shapes that take each production kernel (matmul.cu): 03 (a small product), 09 (split-K: the
  // MNIST CNN's fc1, and the MLP's 64 x 128 x 784), 12 (enough 128 x 128 tiles, k >= 256) and 07
  // (k < 256); on an sm_90 GPU fc1 and the large products take 17 (split for fc1), the MLP's
  // product stays on 09, and fc1's weight gradient (k = 64, an operand packed) on 07; 12 runs
  // there only in the sweeps above, which call every version directly
  matmul_bias_relu_cases({.device = kCuda, .takes = {{DType::f32, 1e-4}}},
                         {{64, 10, 128}, {64, 128, 9216}, {64, 128, 784}, {1024, 1024, 512}, {1024, 1024, 128}});
}

TEST_CASE("bf16 matmul with a fused bias and ReLU through autograd, in every production path") {
  // production bf16 (matmul.cu): 09 for a misaligned small product (the CNN's fc2, 64 x 10 x 128,
  // and its gradients), 16 for a long, thin one (fc1, 64 x 128 x 9216), 15 for a short k on a few
  // tiles (the MLP's fc1, 64 x 128 x 784) and for enough tiles; an ulp of bf16 (2^-8) apart
  matmul_bias_relu_cases({.device = kCuda, .takes = {{DType::bf16, {8e-3, 1e-3}}}},
                         {{64, 10, 128}, {64, 128, 9216}, {64, 128, 784}, {1024, 1024, 512}});
}
