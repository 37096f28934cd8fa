#include "kiln/core/capture.h"

#include "kiln/core/backend.h"

namespace kiln {

Graph capture(const Device& device, const std::function<void()>& work) {
  Backend& backend = backend_for(device);
  backend.begin_capture();
  try {
    work();
  } catch (...) {
    backend.end_capture(false);
    throw;
  }
  return Graph(backend.end_capture(true));
}

Capture* capturing(const Device& device) { return backend_for(device).capture(); }

}  // namespace kiln
