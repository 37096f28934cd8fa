// Shapes and strides: short lists of dimensions, counted in elements.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace kiln {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}
  explicit Shape(std::span<const int64_t> dims) : dims_(dims.begin(), dims.end()) {}

  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  size_t size() const { return dims_.size(); }
  bool empty() const { return dims_.empty(); }
  int64_t operator[](size_t i) const { return dims_[i]; }
  int64_t& operator[](size_t i) { return dims_[i]; }
  int64_t back() const { return dims_.back(); }
  auto begin() const { return dims_.begin(); }
  auto end() const { return dims_.end(); }
  void push_back(int64_t d) { dims_.push_back(d); }
  void insert(size_t at, int64_t d) { dims_.insert(dims_.begin() + static_cast<std::ptrdiff_t>(at), d); }
  void erase(size_t at) { dims_.erase(dims_.begin() + static_cast<std::ptrdiff_t>(at)); }
  const std::vector<int64_t>& dims() const { return dims_; }

  int64_t numel() const;  // 1 for a scalar (rank 0); ShapeError when the sizes multiply past int64
  std::string str() const;  // "[2, 3]"
  friend bool operator==(const Shape&, const Shape&) = default;

 private:
  std::vector<int64_t> dims_;
};

using Strides = Shape;

inline std::ostream& operator<<(std::ostream& out, const Shape& s) { return out << s.str(); }

// Row-major strides of a contiguous tensor of this shape.
Strides contiguous_strides(const Shape& shape);

// The shape two shapes broadcast to (NumPy rules), or ShapeError naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Wraps a possibly negative axis into [0, rank); ValueError naming `op` when out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* op);

}  // namespace kiln
