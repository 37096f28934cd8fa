// kiln's exceptions. Every error says what went wrong, where (file:line of the check) and
// which rule was broken; shape errors name the op and show the shapes involved.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kiln {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : Error(message, "") {}
  // `message`, and `where`: the check that threw, "core/tensor.cpp:120" (KILN_CHECK fills it in).
  // what() holds both, "message (where)".
  Error(const std::string& message, const std::string& where)
      : std::runtime_error(where.empty() ? message : message + " (" + where + ")"), message_size_(message.size()) {}

  // what() without where: the words for a user (mnist-train prints these, and where with -v).
  std::string_view message() const { return std::string_view(what(), message_size_); }

 private:
  size_t message_size_;
};

class ShapeError : public Error {  // shapes that an op cannot combine
  using Error::Error;
};
class DTypeError : public Error {  // a dtype an op or backend does not take
  using Error::Error;
};
class DeviceError : public Error {  // tensors on different devices, or a device that does not exist
  using Error::Error;
};
class BackendUnavailable : public DeviceError {  // a backend that is not compiled in or found no device
  using DeviceError::DeviceError;
};
class OutOfMemory : public Error {  // an allocation the device could not satisfy
  using Error::Error;
};
class ValueError : public Error {  // an argument outside what the op accepts (axis, probability, ...)
  using Error::Error;
};
class AutogradError : public Error {  // backward() asked of something that has no gradient
  using Error::Error;
};
class DistributedError : public Error {  // ranks that disagree, a collective that timed out or failed
  using Error::Error;
};
class NonFiniteError : public Error {  // a NaN or an infinity where finite numbers are needed
  using Error::Error;
};
class CaptureError : public Error {  // what a captured step cannot do: wait for the device, read it
  using Error::Error;
};
class IoError : public Error {  // a file that cannot be written or read: no space, no permission, not a file
  using Error::Error;
};

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
[[noreturn]] void throw_with_location(const char* file, int line, const std::string& message,
                                      void (*raise)(const std::string&, const std::string&));
template <class E>
void raise(const std::string& message, const std::string& where) {
  throw E(message, where);
}
}  // namespace detail

}  // namespace kiln

// KILN_CHECK(cond, ErrorType, message parts...): throws ErrorType("message (file:line)").
#define KILN_CHECK(cond, E, ...)                                                            \
  do {                                                                                      \
    if (!(cond))                                                                            \
      ::kiln::detail::throw_with_location(__FILE__, __LINE__,                               \
                                          ::kiln::detail::concat(__VA_ARGS__),              \
                                          &::kiln::detail::raise<E>);                       \
  } while (0)

#define KILN_FAIL(E, ...)                                                                   \
  ::kiln::detail::throw_with_location(__FILE__, __LINE__, ::kiln::detail::concat(__VA_ARGS__), \
                                      &::kiln::detail::raise<E>)
