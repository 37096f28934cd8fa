#include "kiln/core/error.h"

#include <string_view>

namespace kiln::detail {

void throw_with_location(const char* file, int line, const std::string& message,
                         void (*raise)(const std::string&, const std::string&)) {
  // Keep the path from the repository's top folder on: "core/ops.cpp:120" reads better than an
  // absolute path of the machine that built the library.
  std::string_view path(file);
  for (std::string_view top : {"/core/", "/autograd/", "/kernels/", "/layers/", "/optim/",
                               "/datasets/", "/apps/", "/tests/"}) {
    if (auto at = path.rfind(top); at != std::string_view::npos) {
      path.remove_prefix(at + 1);
      break;
    }
  }
  raise(message, concat(path, ":", line));
  __builtin_unreachable();
}

}  // namespace kiln::detail
