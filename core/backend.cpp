#include "core/backend.h"

#include "core/error.h"
#include "kernels/cpu/cpu_backend.h"
#ifdef KILN_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace kiln {

bool TensorRef::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

Backend& backend_for(const Device& device) {
  switch (device.type) {
    case DeviceType::cpu:
      return cpu::backend();
    case DeviceType::cuda:
#ifdef KILN_WITH_CUDA
      return cuda::backend(device.index);
#else
      KILN_FAIL(BackendUnavailable, "device ", device,
                ": this build of kiln has no CUDA backend (configure with the CUDA toolkit and "
                "KILN_CUDA=ON; or use --device cpu)");
#endif
    case DeviceType::vulkan:
      KILN_FAIL(BackendUnavailable, "device ", device,
                ": this build of kiln has no Vulkan backend (it arrives with the Vulkan backend; "
                "use --device cpu)");
  }
  KILN_FAIL(DeviceError, "unknown device type");
}

std::string_view unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg: return "neg";
    case UnaryOp::exp: return "exp";
    case UnaryOp::log: return "log";
    case UnaryOp::sqrt: return "sqrt";
    case UnaryOp::abs: return "abs";
    case UnaryOp::sign: return "sign";
    case UnaryOp::relu: return "relu";
    case UnaryOp::leaky_relu: return "leaky_relu";
    case UnaryOp::gelu: return "gelu";
    case UnaryOp::tanh: return "tanh";
    case UnaryOp::sigmoid: return "sigmoid";
    case UnaryOp::pow: return "pow";
    case UnaryOp::add_scalar: return "add";
    case UnaryOp::mul_scalar: return "mul";
  }
  return "?";
}

std::string_view binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::mul: return "mul";
    case BinaryOp::div: return "div";
    case BinaryOp::pow: return "pow";
    case BinaryOp::maximum: return "maximum";
    case BinaryOp::minimum: return "minimum";
    case BinaryOp::eq: return "eq";
    case BinaryOp::ne: return "ne";
    case BinaryOp::gt: return "gt";
    case BinaryOp::ge: return "ge";
    case BinaryOp::lt: return "lt";
    case BinaryOp::le: return "le";
  }
  return "?";
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::mean: return "mean";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::argmax: return "argmax";
    case ReduceOp::argmin: return "argmin";
  }
  return "?";
}

}  // namespace kiln
