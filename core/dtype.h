// Element types. f32 is the working type everywhere; f64 exists on the CPU for gradcheck;
// i32 and u8 carry labels and raw data; bf16 (core/bf16.h) is mixed precision's storage type
// (autograd/autocast.h), converted to f32 for arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

#include "kiln/core/bf16.h"

namespace kiln {

enum class DType : uint8_t { f32, f64, i32, u8, bf16 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::u8: return 1;
    case DType::bf16: return 2;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
    case DType::bf16: return "bf16";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::bf16; }

// The dtype arithmetic on `t` happens in: f32 for bf16, t itself otherwise.
constexpr DType compute_dtype(DType t) { return t == DType::bf16 ? DType::f32 : t; }

inline std::ostream& operator<<(std::ostream& out, DType t) { return out << dtype_name(t); }

// The C++ type behind each dtype, and back.
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::bf16; };
template <class T> inline constexpr DType dtype_of_v = dtype_of<T>::value;

// Calls fn with a value of the C++ type of `t` (a tag: only its type matters). bf16's type has
// no arithmetic of its own: code that computes converts it to float (the CPU kernels never see it:
// kernels/cpu/widen.cpp).
template <class Fn>
decltype(auto) visit_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    case DType::i32: return fn(int32_t{});
    case DType::u8: return fn(uint8_t{});
    case DType::bf16: return fn(bf16{});
  }
  return fn(float{});
}

}  // namespace kiln
