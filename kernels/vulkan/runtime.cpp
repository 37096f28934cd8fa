// The Vulkan runtime of kiln: the loader opened at run time, instance and device choice, the block
// sub-allocator, the staging buffer for host transfers, the parameter ring, pipelines and command
// recording.
#define VK_NO_PROTOTYPES  // every Vulkan function comes through the loader opened below
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/core/log.h"
#include "kiln/kernels/vulkan/shaders.h"
#include "kiln/kernels/vulkan/vulkan_backend.h"

namespace kiln::vulkan {

namespace {

// The Vulkan loader (libvulkan.so.1) is opened at run time, not linked: a binary built with the
// Vulkan backend starts, and runs its CPU and CUDA paths, on a machine without it, and
// --device vulkan there is a BackendUnavailable naming the library. KILN_VULKAN_LOADER names
// another file to open. Every function kiln calls is a pointer of the same name, filled from
// vkGetInstanceProcAddr: the loader's trampolines, which serve every instance and device.
#define KILN_VK_INSTANCE_FUNCTIONS(X)                                                                       \
  X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)                      \
  X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceFeatures2) X(vkGetPhysicalDeviceMemoryProperties) \
  X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkEnumerateDeviceExtensionProperties) X(vkCreateDevice)    \
  X(vkGetDeviceProcAddr) X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkDeviceWaitIdle) X(vkQueueSubmit)      \
  X(vkCreateBuffer) X(vkDestroyBuffer) X(vkGetBufferMemoryRequirements) X(vkAllocateMemory)                \
  X(vkFreeMemory) X(vkBindBufferMemory) X(vkMapMemory) X(vkUnmapMemory) X(vkCreateCommandPool)            \
  X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) X(vkBeginCommandBuffer) X(vkEndCommandBuffer)       \
  X(vkResetCommandBuffer) X(vkCreateFence) X(vkDestroyFence) X(vkWaitForFences) X(vkResetFences)          \
  X(vkCreatePipelineCache) X(vkDestroyPipelineCache) X(vkCreateShaderModule) X(vkDestroyShaderModule)     \
  X(vkCreateDescriptorSetLayout) X(vkDestroyDescriptorSetLayout) X(vkCreatePipelineLayout)                \
  X(vkDestroyPipelineLayout) X(vkCreateComputePipelines) X(vkDestroyPipeline) X(vkCreateQueryPool)        \
  X(vkDestroyQueryPool) X(vkGetQueryPoolResults) X(vkCmdPipelineBarrier) X(vkCmdCopyBuffer)               \
  X(vkCmdBindPipeline) X(vkCmdDispatch) X(vkCmdResetQueryPool) X(vkCmdWriteTimestamp)

#define KILN_VK_POINTER(name) PFN_##name name = nullptr;
PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
PFN_vkCreateInstance vkCreateInstance = nullptr;
KILN_VK_INSTANCE_FUNCTIONS(KILN_VK_POINTER)
#undef KILN_VK_POINTER

// Opens the loader once; throws BackendUnavailable (every time asked) where there is none.
void open_loader() {
  static std::mutex mutex;
  static std::string failure;
  std::lock_guard<std::mutex> lock(mutex);
  if (vkGetInstanceProcAddr) return;
  if (failure.empty()) {
    const char* chosen = std::getenv("KILN_VULKAN_LOADER");
    const std::string name = chosen && *chosen ? chosen : "libvulkan.so.1";
    void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library && !(chosen && *chosen)) library = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
    if (library) {
      vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(library, "vkGetInstanceProcAddr"));
      if (vkGetInstanceProcAddr)
        vkCreateInstance = reinterpret_cast<PFN_vkCreateInstance>(vkGetInstanceProcAddr(nullptr, "vkCreateInstance"));
    }
    if (!vkGetInstanceProcAddr || !vkCreateInstance) {
      vkGetInstanceProcAddr = nullptr;
      const char* why = dlerror();
      failure = detail::concat("no Vulkan loader: ", name, " ",
                               library ? "lacks vkGetInstanceProcAddr" : detail::concat("could not be opened (", why ? why : "not found", ")"),
                               "; Debian: libvulkan1, with mesa-vulkan-drivers for lavapipe on the CPU");
    }
  }
  KILN_CHECK(failure.empty(), BackendUnavailable, "vulkan: ", failure);
}

// The rest of the functions, from the first instance.
void load_functions(VkInstance instance) {
  static std::once_flag once;
  std::call_once(once, [instance] {
#define KILN_VK_LOAD(name) name = reinterpret_cast<PFN_##name>(vkGetInstanceProcAddr(instance, #name));
    KILN_VK_INSTANCE_FUNCTIONS(KILN_VK_LOAD)
#undef KILN_VK_LOAD
  });
#define KILN_VK_MISSING(name) KILN_CHECK(name != nullptr, BackendUnavailable, "vulkan: the loader has no " #name);
  KILN_VK_INSTANCE_FUNCTIONS(KILN_VK_MISSING)
#undef KILN_VK_MISSING
}

const char* result_name(VkResult r) {
  switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    default: return "VkResult";
  }
}

// Every Vulkan call that returns a VkResult goes through this: a failure throws DeviceError
// naming the call, the result and where.
#define KILN_VK_CHECK(call)                                                                           \
  do {                                                                                                \
    const VkResult kiln_vk_result = (call);                                                           \
    KILN_CHECK(kiln_vk_result == VK_SUCCESS, DeviceError, "vulkan: ", #call, " failed: ",             \
               result_name(kiln_vk_result), " (", static_cast<int>(kiln_vk_result), ")");             \
  } while (0)

std::mutex g_messages_mutex;
std::vector<std::string> g_messages;

VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                          VkDebugUtilsMessageTypeFlagsEXT, const VkDebugUtilsMessengerCallbackDataEXT* data,
                                          void*) {
  const bool error = severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  std::string text = detail::concat("vulkan validation ", error ? "error" : "warning", ": ", data->pMessage ? data->pMessage : "");
  error ? logging::error(text) : logging::warn(text);
  std::lock_guard<std::mutex> lock(g_messages_mutex);
  g_messages.push_back(std::move(text));
  return VK_FALSE;
}

bool validation_requested() {
  const char* v = std::getenv("KILN_VULKAN_VALIDATION");
  return v != nullptr && std::string_view(v) != "" && std::string_view(v) != "0";
}

constexpr VkDeviceSize kBlockBytes = VkDeviceSize{64} << 20;    // device memory is taken in blocks of this
constexpr VkDeviceSize kRingBytes = VkDeviceSize{1} << 20;      // each frame's dispatch parameters
constexpr VkDeviceSize kUploadBytes = VkDeviceSize{4} << 20;    // each frame's writes (larger ones wait)
constexpr VkDeviceSize kStagingMax = VkDeviceSize{64} << 20;    // reads and large writes go in chunks of this
constexpr size_t kFrames = 4;                                   // command buffers in flight at most
constexpr uint32_t kSubmitEvery = 32;                           // dispatches: then the frame goes to the GPU
constexpr uint32_t kTimestamps = 1024;                          // slots of the timestamp query pool
constexpr uint32_t kWorkgroup = kWorkgroupSize;                 // invocations per workgroup (constant 0)
constexpr uint32_t kMaxGroups = 65535;                          // the least maxComputeWorkGroupCount[0] of any device

// A Vulkan info struct, zeroed but for its type.
template <class T>
T make(VkStructureType type) {
  T t{};
  t.sType = type;
  return t;
}

const char* fault_op_name(int32_t op) {
  switch (static_cast<FaultOp>(op)) {
    case FaultOp::gather: return "gather";
    case FaultOp::index_add: return "index_add";
    case FaultOp::one_hot: return "one_hot";
    case FaultOp::cross_entropy: return "cross_entropy";
    case FaultOp::cross_entropy_backward: return "cross_entropy_backward";
    default: return "?";
  }
}

VkDeviceSize round_up(VkDeviceSize v, VkDeviceSize a) { return (v + a - 1) / a * a; }

std::string version_string(uint32_t v) {
  return detail::concat(VK_API_VERSION_MAJOR(v), ".", VK_API_VERSION_MINOR(v), ".", VK_API_VERSION_PATCH(v));
}

// Whether matmul_coop.comp can run: VK_NV_cooperative_matrix with 16 x 16 x 16 f16 products
// accumulated in f32 on the subgroup scope, f16 arithmetic, the Vulkan memory model (which the
// shader's scopes declare), and subgroups of 32 (its 8 subgroups of a 256-invocation workgroup).
// (VK_KHR_cooperative_matrix, the cross-vendor successor, needs Vulkan headers 1.3.255 and a
// glslang that Debian 12 does not ship.)
bool cooperative_matrix_support(VkInstance instance, VkPhysicalDevice p, uint32_t subgroup_size) {
  if (subgroup_size != 32) return false;
  uint32_t count = 0;
  if (vkEnumerateDeviceExtensionProperties(p, nullptr, &count, nullptr) != VK_SUCCESS) return false;
  std::vector<VkExtensionProperties> exts(count);
  if (vkEnumerateDeviceExtensionProperties(p, nullptr, &count, exts.data()) != VK_SUCCESS) return false;
  if (std::none_of(exts.begin(), exts.end(), [](const VkExtensionProperties& e) {
        return std::strcmp(e.extensionName, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) == 0;
      }))
    return false;
  auto coop = make<VkPhysicalDeviceCooperativeMatrixFeaturesNV>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV);
  auto features12 = make<VkPhysicalDeviceVulkan12Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
  features12.pNext = &coop;
  auto features = make<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  features.pNext = &features12;
  vkGetPhysicalDeviceFeatures2(p, &features);
  if (!coop.cooperativeMatrix || !features12.shaderFloat16 || !features12.vulkanMemoryModel ||
      !features12.vulkanMemoryModelDeviceScope)
    return false;
  auto list = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
      vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
  if (!list || list(p, &count, nullptr) != VK_SUCCESS) return false;
  std::vector<VkCooperativeMatrixPropertiesNV> shapes(
      count, make<VkCooperativeMatrixPropertiesNV>(VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV));
  if (list(p, &count, shapes.data()) != VK_SUCCESS) return false;
  return std::any_of(shapes.begin(), shapes.end(), [](const VkCooperativeMatrixPropertiesNV& c) {
    return c.MSize == 16 && c.NSize == 16 && c.KSize == 16 && c.AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
           c.BType == VK_COMPONENT_TYPE_FLOAT16_NV && c.CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
           c.DType == VK_COMPONENT_TYPE_FLOAT32_NV && c.scope == VK_SCOPE_SUBGROUP_NV;
  });
}

}  // namespace

int32_t index32(int64_t v, std::string_view op) {
  KILN_CHECK(v >= 0 && v <= std::numeric_limits<int32_t>::max(), ShapeError, "vulkan ", op, ": ", v,
             " does not fit the 32-bit indices of the Vulkan kernels (tensors of up to 2^31 - 1 elements)");
  return static_cast<int32_t>(v);
}

std::vector<std::string> validation_messages() {
  std::lock_guard<std::mutex> lock(g_messages_mutex);
  return g_messages;
}

// A block of device memory and the buffer over it; `free` lists its unused ranges (offset, size),
// sorted by offset, neighbours merged.
struct Block {
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize size = 0;
  std::vector<std::pair<VkDeviceSize, VkDeviceSize>> free;
};

// Host-visible memory mapped for the process's lifetime: the staging buffer and the parameter ring.
struct HostBuffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  void* mapped = nullptr;
  VkDeviceSize size = 0;
};

// A command buffer and what its commands use: its segments of the parameter ring and of the
// upload buffer, free again once its fence has signalled.
struct Frame {
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  bool recording = false, submitted = false;
  uint32_t dispatches = 0;
  VkDeviceSize ring_used = 0, upload_used = 0;  // bytes of its segments
};

struct Pipeline {
  VkPipeline pipeline = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
};

struct Runtime {
  int index = 0;
  VkInstance instance = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkPhysicalDeviceProperties props{};
  VkPhysicalDeviceMemoryProperties memory{};
  VkDevice device = VK_NULL_HANDLE;
  uint32_t queue_family = 0;
  VkQueue queue = VK_NULL_HANDLE;
  VkCommandPool pool = VK_NULL_HANDLE;
  Frame frames[kFrames];
  size_t current = 0;              // the frame being recorded
  struct Range {
    VkBuffer buffer;
    VkDeviceSize begin, end;
  };
  std::vector<Range> unordered;    // memory bound by dispatches since the last barrier
  VkPipelineCache cache = VK_NULL_HANDLE;
  PFN_vkCmdPushDescriptorSetKHR push_descriptor = nullptr;
  uint32_t device_memory_type = 0, host_memory_type = 0;
  VkDeviceSize alignment = 256;  // of every allocation and ring entry
  std::vector<Block> blocks;
  std::map<size_t, VkDescriptorSetLayout> set_layouts;  // by the number of tensor bindings
  std::map<std::string, Pipeline> pipelines;            // by shader and constants
  HostBuffer ring;             // kFrames segments of kRingBytes: the frames' dispatch parameters
  HostBuffer uploads;          // kFrames segments of kUploadBytes: the frames' writes
  HostBuffer staging;          // reads, and writes too large for a frame
  HostBuffer fault;            // FaultSlot, written by kernels that find a bad index
  Allocation fault_binding;    // the fault slot as kernels bind it
  HostBuffer empty;            // bound where a kernel is handed no buffer (an empty scratch):
  Allocation empty_binding;    // it reads and writes none of it
  VkQueryPool timestamps = VK_NULL_HANDLE;  // null where the queue keeps no time
  uint32_t next_timestamp = 0;
  double timestamp_ns = 0;     // nanoseconds per tick
  uint64_t timestamp_mask = 0; // the bits the queue keeps
  std::mutex mutex;

  std::string where() const { return detail::concat("vulkan:", index); }

  uint32_t memory_type(uint32_t allowed, VkMemoryPropertyFlags want, VkMemoryPropertyFlags fallback) const {
    for (VkMemoryPropertyFlags flags : {want, fallback})
      for (uint32_t i = 0; i < memory.memoryTypeCount; ++i)
        if ((allowed & (1u << i)) && (memory.memoryTypes[i].propertyFlags & flags) == flags) return i;
    KILN_FAIL(BackendUnavailable, where(), ": no memory type with the properties kiln needs");
  }

  // A buffer with memory of its own (blocks, the ring, staging). Throws OutOfMemory when the
  // device has no room, naming the request and the heap's size.
  void make_buffer(VkDeviceSize bytes, VkBufferUsageFlags usage, bool host, VkBuffer* buffer, VkDeviceMemory* mem) {
    auto info = make<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
    info.size = bytes;
    info.usage = usage;
    info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    KILN_VK_CHECK(vkCreateBuffer(device, &info, nullptr, buffer));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(device, *buffer, &req);
    auto alloc = make<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
    alloc.allocationSize = req.size;
    alloc.memoryTypeIndex =
        host ? memory_type(req.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
                                                   VK_MEMORY_PROPERTY_HOST_CACHED_BIT,
                           VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT)
             : memory_type(req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
    const VkResult r = vkAllocateMemory(device, &alloc, nullptr, mem);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) {
      vkDestroyBuffer(device, *buffer, nullptr);
      *buffer = VK_NULL_HANDLE;
      const VkDeviceSize heap = memory.memoryHeaps[memory.memoryTypes[alloc.memoryTypeIndex].heapIndex].size;
      VkDeviceSize held = 0;
      for (const Block& b : blocks) held += b.size;
      KILN_FAIL(OutOfMemory, where(), ": out of memory allocating ", bytes, " bytes (", held,
                " bytes already held by kiln in blocks, of a ", heap, "-byte heap; the driver does not report free bytes)");
    }
    KILN_VK_CHECK(r);
    KILN_VK_CHECK(vkBindBufferMemory(device, *buffer, *mem, 0));
  }

  void make_host_buffer(HostBuffer& h, VkDeviceSize bytes, VkBufferUsageFlags usage) {
    if (h.buffer) {
      vkUnmapMemory(device, h.memory);
      vkDestroyBuffer(device, h.buffer, nullptr);
      vkFreeMemory(device, h.memory, nullptr);
      h = HostBuffer{};
    }
    make_buffer(bytes, usage, true, &h.buffer, &h.memory);
    KILN_VK_CHECK(vkMapMemory(device, h.memory, 0, VK_WHOLE_SIZE, 0, &h.mapped));
    h.size = bytes;
  }

  // A staging buffer of at least `bytes` (grown, after the work that may still use it is done).
  void reserve_staging(VkDeviceSize bytes) {
    if (staging.size >= bytes) return;
    submit_and_wait();
    make_host_buffer(staging, std::max<VkDeviceSize>(bytes, VkDeviceSize{1} << 20),
                     VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT);
  }

  Frame& frame() { return frames[current]; }

  void begin() {
    Frame& f = frame();
    if (f.recording) return;
    auto info = make<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    info.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    KILN_VK_CHECK(vkBeginCommandBuffer(f.cmd, &info));
    f.recording = true;
  }

  // Orders everything recorded so far before everything recorded next: kernels and copies each
  // wait for the writes before them (and writes for the reads before them). A global barrier,
  // the simplest order that is always right. A barrier's scopes are the queue's submission
  // order, so it orders the frames' command buffers among themselves too.
  void barrier() {
    auto b = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
    b.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                      VK_ACCESS_TRANSFER_READ_BIT;
    b.dstAccessMask = b.srcAccessMask;
    const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    vkCmdPipelineBarrier(frame().cmd, stages, stages, 0, 1, &b, 0, nullptr, 0, nullptr);
    unordered.clear();
  }

  // Before a dispatch on these buffers: a barrier only if one of them overlaps memory that a
  // dispatch since the last barrier bound (every binding counted as read and written, so this
  // is never too little). Independent kernels in a row (an optimizer's per-parameter steps, the
  // gradients' fills) then run without waiting for each other.
  void order_before(const std::vector<const Allocation*>& buffers) {
    bool overlap = unordered.size() >= 64;  // enough bookkeeping: a barrier
    for (size_t i = 0; !overlap && i < buffers.size(); ++i)
      for (const Range& u : unordered)
        if (u.buffer == buffers[i]->buffer && u.begin < buffers[i]->offset + buffers[i]->size &&
            buffers[i]->offset < u.end) {
          overlap = true;
          break;
        }
    if (overlap) barrier();
    for (const Allocation* a : buffers) unordered.push_back({a->buffer, a->offset, a->offset + a->size});
  }

  // Waits for a submitted frame and makes it ready to record again.
  void retire(Frame& f) {
    if (!f.submitted) return;
    KILN_VK_CHECK(vkWaitForFences(device, 1, &f.fence, VK_TRUE, UINT64_MAX));
    KILN_VK_CHECK(vkResetFences(device, 1, &f.fence));
    KILN_VK_CHECK(vkResetCommandBuffer(f.cmd, 0));
    f.submitted = false;
    f.dispatches = 0;
    f.ring_used = f.upload_used = 0;
  }

  // Sends the frame being recorded to the GPU without waiting for it, and moves to the next
  // frame (waiting only if that one, kFrames submissions back, is still running): the GPU works
  // through a step while the host records the rest of it.
  void flush() {
    Frame& f = frame();
    if (!f.recording) return;
    // the host reads what the commands wrote (staging, the fault slot): make it visible there
    auto to_host = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
    to_host.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    to_host.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(f.cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &to_host, 0, nullptr, 0, nullptr);
    KILN_VK_CHECK(vkEndCommandBuffer(f.cmd));
    f.recording = false;
    auto submit = make<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &f.cmd;
    KILN_VK_CHECK(vkQueueSubmit(queue, 1, &submit, f.fence));
    f.submitted = true;
    current = (current + 1) % kFrames;
    retire(frame());
  }

  // Submits what is recorded and waits for everything submitted: where the host needs the
  // device's results (a read) or its memory back (a large write, the staging buffer grown).
  void submit_and_wait() {
    flush();
    for (Frame& f : frames) retire(f);
    unordered.clear();  // all of it done
    check_fault();
  }

  // Throws the bad index a kernel recorded since the last wait, if any, and clears the slot.
  void check_fault() {
    auto* slot = static_cast<int32_t*>(fault.mapped);
    if (slot[0] == 0) return;
    const int32_t op = slot[0], value = slot[1], position = slot[2], bound = slot[3];
    std::memset(slot, 0, 4 * sizeof(int32_t));
    KILN_CHECK(op != static_cast<int32_t>(FaultOp::division_by_zero), ValueError, where(),
               " binary div: integer division by zero (element ", position, "; found on the device, reported at the next "
               "synchronisation)");
    KILN_CHECK(op != static_cast<int32_t>(FaultOp::negative_power), ValueError, where(),
               " binary pow: negative integer powers are not allowed (element ", position,
               "); convert to a floating dtype first");
    KILN_FAIL(ValueError, where(), " ", fault_op_name(op), ": index ", value, " at position ", position,
              " is outside [0, ", bound, ") (found on the device, reported at the next synchronisation)");
  }

  VkDescriptorSetLayout set_layout(size_t tensors) {
    if (auto it = set_layouts.find(tensors); it != set_layouts.end()) return it->second;
    std::vector<VkDescriptorSetLayoutBinding> bindings(tensors + 1);
    for (uint32_t i = 0; i < bindings.size(); ++i) {
      bindings[i].binding = i;
      bindings[i].descriptorType = i == 0 ? VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      bindings[i].descriptorCount = 1;
      bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    auto info = make<VkDescriptorSetLayoutCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
    info.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR;
    info.bindingCount = static_cast<uint32_t>(bindings.size());
    info.pBindings = bindings.data();
    VkDescriptorSetLayout layout;
    KILN_VK_CHECK(vkCreateDescriptorSetLayout(device, &info, nullptr, &layout));
    set_layouts.emplace(tensors, layout);
    return layout;
  }

  const Pipeline& pipeline(const Dispatch& d) {
    std::string key(d.shader);  // built for every dispatch, so without a stream
    key += '/' + std::to_string(d.buffers.size());
    for (int32_t c : d.constants) key += ',' + std::to_string(c);
    if (auto it = pipelines.find(key); it != pipelines.end()) return it->second;
    const std::span<const uint32_t> code = shader_code(d.shader);
    KILN_CHECK(!code.empty(), DeviceError, where(), ": no shader named ", d.shader, " is embedded in this build");
    auto module_info = make<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
    module_info.codeSize = code.size_bytes();
    module_info.pCode = code.data();
    VkShaderModule module;
    KILN_VK_CHECK(vkCreateShaderModule(device, &module_info, nullptr, &module));
    // constant 0: the workgroup size; 1, 2, ...: the dispatch's constants
    std::vector<int32_t> values{static_cast<int32_t>(kWorkgroup)};
    values.insert(values.end(), d.constants.begin(), d.constants.end());
    std::vector<VkSpecializationMapEntry> entries(values.size());
    for (uint32_t i = 0; i < entries.size(); ++i) entries[i] = {i, i * 4u, 4};
    VkSpecializationInfo spec{static_cast<uint32_t>(entries.size()), entries.data(), values.size() * 4, values.data()};
    Pipeline p;
    const VkDescriptorSetLayout set = set_layout(d.buffers.size());
    auto layout_info = make<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
    layout_info.setLayoutCount = 1;
    layout_info.pSetLayouts = &set;
    KILN_VK_CHECK(vkCreatePipelineLayout(device, &layout_info, nullptr, &p.layout));
    auto info = make<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
    info.stage = make<VkPipelineShaderStageCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO);
    info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    info.stage.module = module;
    info.stage.pName = "main";
    info.stage.pSpecializationInfo = &spec;
    info.layout = p.layout;
    const VkResult r = vkCreateComputePipelines(device, cache, 1, &info, nullptr, &p.pipeline);
    vkDestroyShaderModule(device, module, nullptr);
    KILN_VK_CHECK(r);
    return pipelines.emplace(key, p).first->second;
  }
};

// ---- creation ----

namespace {

// The devices "vulkan:N" numbers, in the driver's order: those with a compute queue, Vulkan 1.2,
// push descriptors and std430 uniform buffers (kernels read their parameters from a uniform buffer
// laid out as std430), each with its first compute queue family; `seen`, where given, gets the
// names of every device the driver lists.
std::vector<std::pair<VkPhysicalDevice, uint32_t>> usable_devices(VkInstance instance, std::string* seen) {
  uint32_t count = 0;
  KILN_VK_CHECK(vkEnumeratePhysicalDevices(instance, &count, nullptr));
  std::vector<VkPhysicalDevice> all(count);
  KILN_VK_CHECK(vkEnumeratePhysicalDevices(instance, &count, all.data()));
  std::vector<std::pair<VkPhysicalDevice, uint32_t>> usable;
  for (VkPhysicalDevice p : all) {
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(p, &props);
    if (seen) *seen += detail::concat(seen->empty() ? "" : ", ", props.deviceName);
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(p, &n, nullptr);
    std::vector<VkQueueFamilyProperties> families(n);
    vkGetPhysicalDeviceQueueFamilyProperties(p, &n, families.data());
    uint32_t ext_count = 0;
    KILN_VK_CHECK(vkEnumerateDeviceExtensionProperties(p, nullptr, &ext_count, nullptr));
    std::vector<VkExtensionProperties> exts(ext_count);
    KILN_VK_CHECK(vkEnumerateDeviceExtensionProperties(p, nullptr, &ext_count, exts.data()));
    const bool push = std::any_of(exts.begin(), exts.end(), [](const VkExtensionProperties& e) {
      return std::strcmp(e.extensionName, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME) == 0;
    });
    if (props.apiVersion < VK_API_VERSION_1_2 || !push) continue;
    // kernels read their parameters from a uniform buffer laid out as std430
    auto features12 = make<VkPhysicalDeviceVulkan12Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
    auto features = make<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
    features.pNext = &features12;
    vkGetPhysicalDeviceFeatures2(p, &features);
    if (!features12.uniformBufferStandardLayout) continue;
    for (uint32_t f = 0; f < n; ++f)
      if (families[f].queueFlags & VK_QUEUE_COMPUTE_BIT) {
        usable.emplace_back(p, f);
        break;
      }
  }
  return usable;
}

}  // namespace

int device_count() {
  static std::once_flag once;
  static int count = 0;
  std::call_once(once, [] {
    try {
      open_loader();
    } catch (const BackendUnavailable&) {
      return;  // no loader: no device
    }
    auto app = make<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
    app.apiVersion = VK_API_VERSION_1_2;
    auto info = make<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
    info.pApplicationInfo = &app;
    VkInstance instance = VK_NULL_HANDLE;
    if (vkCreateInstance(&info, nullptr, &instance) != VK_SUCCESS) return;  // no driver
    try {
      load_functions(instance);
      count = static_cast<int>(usable_devices(instance, nullptr).size());
    } catch (const Error&) {
      count = 0;  // a loader without the functions kiln needs, or a driver that fails to list
    }
    if (vkDestroyInstance) vkDestroyInstance(instance, nullptr);
  });
  return count;
}

VulkanBackend::VulkanBackend(int device) : rt_(std::make_unique<Runtime>()) {
  Runtime& r = *rt_;
  r.index = device;
  const bool validation = validation_requested();
  auto app = make<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  app.pApplicationName = "kiln";
  app.pEngineName = "kiln";
  app.apiVersion = VK_API_VERSION_1_2;
  std::vector<const char*> layers, extensions;
  if (validation) {
    layers.push_back("VK_LAYER_KHRONOS_validation");
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  }
  auto messenger = make<VkDebugUtilsMessengerCreateInfoEXT>(VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT);
  messenger.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  messenger.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  messenger.pfnUserCallback = on_message;
  auto info = make<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  info.pApplicationInfo = &app;
  info.enabledLayerCount = static_cast<uint32_t>(layers.size());
  info.ppEnabledLayerNames = layers.data();
  info.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  if (validation) info.pNext = &messenger;  // messages of instance creation too
  open_loader();
  const VkResult created = vkCreateInstance(&info, nullptr, &r.instance);
  KILN_CHECK(created != VK_ERROR_LAYER_NOT_PRESENT, BackendUnavailable, "vulkan:", device,
             ": KILN_VULKAN_VALIDATION asks for VK_LAYER_KHRONOS_validation, which is not installed "
             "(Debian: vulkan-validationlayers)");
  KILN_CHECK(created == VK_SUCCESS, BackendUnavailable, "vulkan:", device, ": no Vulkan driver (vkCreateInstance: ",
             result_name(created), "; Debian: mesa-vulkan-drivers gives lavapipe on the CPU)");
  load_functions(r.instance);
  if (validation) {
    auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(r.instance, "vkCreateDebugUtilsMessengerEXT"));
    KILN_VK_CHECK(create(r.instance, &messenger, nullptr, &r.messenger));
  }

  // "vulkan:N": the N-th device with a compute queue, push descriptors and std430 uniform buffers
  std::string seen;
  const std::vector<std::pair<VkPhysicalDevice, uint32_t>> usable = usable_devices(r.instance, &seen);
  KILN_CHECK(device >= 0 && static_cast<size_t>(device) < usable.size(), BackendUnavailable, "vulkan:", device,
             ": no such device; ", usable.size(),
             " Vulkan device(s) with compute, Vulkan 1.2, push descriptors and std430 uniform buffers (",
             seen.empty() ? "the driver lists none" : detail::concat("the driver lists: ", seen), ")");
  r.physical = usable[static_cast<size_t>(device)].first;
  r.queue_family = usable[static_cast<size_t>(device)].second;
  vkGetPhysicalDeviceProperties(r.physical, &r.props);
  vkGetPhysicalDeviceMemoryProperties(r.physical, &r.memory);
  r.alignment = std::max({VkDeviceSize{256}, r.props.limits.minStorageBufferOffsetAlignment,
                          r.props.limits.minUniformBufferOffsetAlignment});
  software_ = r.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  auto subgroup = make<VkPhysicalDeviceSubgroupProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
  auto props2 = make<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  props2.pNext = &subgroup;
  vkGetPhysicalDeviceProperties2(r.physical, &props2);
  const VkSubgroupFeatureFlags wanted = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT;
  subgroups_ = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0 &&
               (subgroup.supportedOperations & wanted) == wanted && subgroup.subgroupSize >= 1;
  description_ = detail::concat(r.props.deviceName, " (driver ", version_string(r.props.driverVersion), ", Vulkan ",
                                version_string(r.props.apiVersion), ")");
  const bool coop = cooperative_matrix_support(r.instance, r.physical, subgroup.subgroupSize);

  const float priority = 1.0f;
  auto queue = make<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  queue.queueFamilyIndex = r.queue_family;
  queue.queueCount = 1;
  queue.pQueuePriorities = &priority;
  std::vector<const char*> device_extensions{VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME};
  auto dinfo = make<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  dinfo.queueCreateInfoCount = 1;
  dinfo.pQueueCreateInfos = &queue;
  auto enable12 = make<VkPhysicalDeviceVulkan12Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
  enable12.uniformBufferStandardLayout = VK_TRUE;
  auto enable_coop = make<VkPhysicalDeviceCooperativeMatrixFeaturesNV>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV);
  if (coop) {  // matmul_coop.comp: f16 arithmetic and the cooperative-matrix instructions
    device_extensions.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
    enable12.shaderFloat16 = VK_TRUE;
    // declared by the scopes the shader names; then every shader's barriers (device scope) need
    // the model's device scope too
    enable12.vulkanMemoryModel = VK_TRUE;
    enable12.vulkanMemoryModelDeviceScope = VK_TRUE;
    enable_coop.cooperativeMatrix = VK_TRUE;
    enable12.pNext = &enable_coop;
  }
  dinfo.pNext = &enable12;
  dinfo.enabledExtensionCount = static_cast<uint32_t>(device_extensions.size());
  dinfo.ppEnabledExtensionNames = device_extensions.data();
  KILN_VK_CHECK(vkCreateDevice(r.physical, &dinfo, nullptr, &r.device));
  cooperative_matrix_ = coop;
  logging::debug(detail::concat(r.where(), ": ", description_, software_ ? ", on the CPU" : "", "; subgroup shaders ",
                            subgroups_ ? "on" : "off (the device lacks basic and shuffle operations)",
                            "; cooperative-matrix f16 matmul ", coop ? "available" : "unavailable"));
  vkGetDeviceQueue(r.device, r.queue_family, 0, &r.queue);
  r.push_descriptor =
      reinterpret_cast<PFN_vkCmdPushDescriptorSetKHR>(vkGetDeviceProcAddr(r.device, "vkCmdPushDescriptorSetKHR"));
  KILN_CHECK(r.push_descriptor != nullptr, BackendUnavailable, r.where(), ": vkCmdPushDescriptorSetKHR missing");

  auto pool = make<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
  pool.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool.queueFamilyIndex = r.queue_family;
  KILN_VK_CHECK(vkCreateCommandPool(r.device, &pool, nullptr, &r.pool));
  for (Frame& f : r.frames) {
    auto cmd = make<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
    cmd.commandPool = r.pool;
    cmd.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cmd.commandBufferCount = 1;
    KILN_VK_CHECK(vkAllocateCommandBuffers(r.device, &cmd, &f.cmd));
    auto fence = make<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
    KILN_VK_CHECK(vkCreateFence(r.device, &fence, nullptr, &f.fence));
  }
  auto cache = make<VkPipelineCacheCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO);
  KILN_VK_CHECK(vkCreatePipelineCache(r.device, &cache, nullptr, &r.cache));
  r.make_host_buffer(r.ring, kRingBytes * kFrames, VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT);
  r.make_host_buffer(r.uploads, kUploadBytes * kFrames, VK_BUFFER_USAGE_TRANSFER_SRC_BIT);
  // timestamps, where the queue keeps them (timestampValidBits > 0)
  uint32_t n_families = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(r.physical, &n_families, nullptr);
  std::vector<VkQueueFamilyProperties> families(n_families);
  vkGetPhysicalDeviceQueueFamilyProperties(r.physical, &n_families, families.data());
  const uint32_t valid_bits = families[r.queue_family].timestampValidBits;
  if (valid_bits > 0 && r.props.limits.timestampPeriod > 0) {
    auto query = make<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
    query.queryType = VK_QUERY_TYPE_TIMESTAMP;
    query.queryCount = kTimestamps;
    KILN_VK_CHECK(vkCreateQueryPool(r.device, &query, nullptr, &r.timestamps));
    r.timestamp_ns = r.props.limits.timestampPeriod;
    r.timestamp_mask = valid_bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << valid_bits) - 1;
  }
  r.make_host_buffer(r.fault, r.alignment, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT);
  std::memset(r.fault.mapped, 0, r.alignment);
  r.fault_binding = Allocation{r.fault.buffer, 0, r.alignment, 0};
  r.make_host_buffer(r.empty, r.alignment, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT);
  r.empty_binding = Allocation{r.empty.buffer, 0, r.alignment, 0};
}

const Allocation* VulkanBackend::fault_slot() const { return &rt_->fault_binding; }

VulkanBackend::~VulkanBackend() {
  // Destructors log, never throw: the process is ending or the device is gone.
  Runtime& r = *rt_;
  if (!r.device) {
    if (r.instance) vkDestroyInstance(r.instance, nullptr);
    return;
  }
  if (vkDeviceWaitIdle(r.device) != VK_SUCCESS) logging::error(r.where() + ": vkDeviceWaitIdle failed at exit");
  for (auto& [key, p] : r.pipelines) {
    vkDestroyPipeline(r.device, p.pipeline, nullptr);
    vkDestroyPipelineLayout(r.device, p.layout, nullptr);
  }
  for (auto& [n, layout] : r.set_layouts) vkDestroyDescriptorSetLayout(r.device, layout, nullptr);
  for (HostBuffer* h : {&r.ring, &r.uploads, &r.staging, &r.fault, &r.empty})
    if (h->buffer) {
      vkUnmapMemory(r.device, h->memory);
      vkDestroyBuffer(r.device, h->buffer, nullptr);
      vkFreeMemory(r.device, h->memory, nullptr);
    }
  for (Block& b : r.blocks) {
    vkDestroyBuffer(r.device, b.buffer, nullptr);
    vkFreeMemory(r.device, b.memory, nullptr);
  }
  vkDestroyPipelineCache(r.device, r.cache, nullptr);
  for (Frame& f : r.frames) vkDestroyFence(r.device, f.fence, nullptr);
  if (r.timestamps) vkDestroyQueryPool(r.device, r.timestamps, nullptr);
  vkDestroyCommandPool(r.device, r.pool, nullptr);
  vkDestroyDevice(r.device, nullptr);
  if (r.messenger) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(r.instance, "vkDestroyDebugUtilsMessengerEXT"));
    if (destroy) destroy(r.instance, r.messenger, nullptr);
  }
  vkDestroyInstance(r.instance, nullptr);
}

VulkanBackend& backend(int index) {
  static std::mutex mutex;
  // Never destroyed: tensors freed during static destruction still return their memory here, and
  // at exit NVIDIA's driver may already be torn down (destroying then crashed the process).
  static auto& backends = *new std::map<int, std::unique_ptr<VulkanBackend>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& b = backends[index];
  if (!b) b = std::make_unique<VulkanBackend>(index);
  return *b;
}

// ---- memory ----

void* VulkanBackend::allocate(size_t bytes) {
  Runtime& r = *rt_;
  std::lock_guard<std::mutex> lock(r.mutex);
  const VkDeviceSize size = round_up(std::max<VkDeviceSize>(bytes, 1), r.alignment);
  KILN_CHECK(size <= r.props.limits.maxStorageBufferRange, OutOfMemory, r.where(), ": a tensor of ", bytes,
             " bytes exceeds the largest buffer a shader may bind on this device (maxStorageBufferRange ",
             r.props.limits.maxStorageBufferRange, " bytes)");
  auto take = [&](size_t b) -> void* {  // first fit in block b, or null
    auto& free = r.blocks[b].free;
    for (size_t i = 0; i < free.size(); ++i) {
      auto& [offset, length] = free[i];
      if (length < size) continue;
      auto* a = new Allocation{r.blocks[b].buffer, offset, size, b};
      offset += size;
      length -= size;
      if (length == 0) free.erase(free.begin() + static_cast<std::ptrdiff_t>(i));
      return a;
    }
    return nullptr;
  };
  for (size_t b = 0; b < r.blocks.size(); ++b)
    if (void* a = take(b)) return a;
  Block block;
  block.size = std::max(kBlockBytes, size);
  r.make_buffer(block.size,
                VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                false, &block.buffer, &block.memory);
  block.free.emplace_back(0, block.size);
  r.blocks.push_back(std::move(block));
  return take(r.blocks.size() - 1);
}

// The range goes back to its block at once: work already recorded that still reads it runs before
// anything recorded later can write it (a dispatch on memory that earlier ones bound waits for
// them: order_before).
void VulkanBackend::deallocate(void* buffer) noexcept {
  if (!buffer) return;
  Runtime& r = *rt_;
  std::lock_guard<std::mutex> lock(r.mutex);
  auto* a = static_cast<Allocation*>(buffer);
  auto& free = r.blocks[a->block].free;
  auto next = std::lower_bound(free.begin(), free.end(), std::make_pair(a->offset, VkDeviceSize{0}));
  next = free.insert(next, {a->offset, a->size});
  if (auto after = next + 1; after != free.end() && next->first + next->second == after->first) {
    next->second += after->second;
    free.erase(after);
  }
  if (next != free.begin()) {
    auto before = next - 1;
    if (before->first + before->second == next->first) {
      before->second += next->second;
      free.erase(next);
    }
  }
  delete a;
}

size_t VulkanBackend::bytes_reserved() const {
  std::lock_guard<std::mutex> lock(rt_->mutex);
  size_t total = 0;
  for (const Block& b : rt_->blocks) total += b.size;
  return total;
}

// Host transfers go through the staging buffer in chunks, each waited for: the staging memory is
// reused by the next chunk, and a read is the point where the host needs the values anyway.
void VulkanBackend::write(void* buffer, size_t byte_offset, const void* host, size_t bytes) {
  Runtime& r = *rt_;
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto* a = static_cast<const Allocation*>(buffer);
  KILN_CHECK(byte_offset + bytes <= a->size, ValueError, r.where(), " write: ", bytes, " bytes at ", byte_offset,
             " run past the ", a->size, "-byte allocation");
  const auto* src = static_cast<const unsigned char*>(host);
  if (bytes == 0) return;
  if (bytes <= kUploadBytes) {  // through the frame's upload segment, recorded like a kernel: no wait
    if (r.frame().upload_used + bytes > kUploadBytes) r.flush();
    Frame& f = r.frame();
    const VkDeviceSize at = r.current * kUploadBytes + f.upload_used;
    std::memcpy(static_cast<unsigned char*>(r.uploads.mapped) + at, src, bytes);
    f.upload_used = round_up(f.upload_used + bytes, 16);
    r.begin();
    if (!r.unordered.empty()) r.barrier();  // copies wait for the kernels before them
    VkBufferCopy region{at, a->offset + byte_offset, bytes};
    vkCmdCopyBuffer(r.frame().cmd, r.uploads.buffer, a->buffer, 1, &region);
    r.barrier();
    return;
  }
  while (bytes > 0) {
    const VkDeviceSize chunk = std::min<VkDeviceSize>(bytes, kStagingMax);
    r.reserve_staging(chunk);
    std::memcpy(r.staging.mapped, src, chunk);
    r.begin();
    if (!r.unordered.empty()) r.barrier();
    VkBufferCopy region{0, a->offset + byte_offset, chunk};
    vkCmdCopyBuffer(r.frame().cmd, r.staging.buffer, a->buffer, 1, &region);
    r.barrier();
    r.submit_and_wait();
    src += chunk;
    byte_offset += chunk;
    bytes -= chunk;
  }
}

void VulkanBackend::read(const void* buffer, size_t byte_offset, void* host, size_t bytes) {
  Runtime& r = *rt_;
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto* a = static_cast<const Allocation*>(buffer);
  KILN_CHECK(byte_offset + bytes <= a->size, ValueError, r.where(), " read: ", bytes, " bytes at ", byte_offset,
             " run past the ", a->size, "-byte allocation");
  auto* dst = static_cast<unsigned char*>(host);
  while (bytes > 0) {
    const VkDeviceSize chunk = std::min<VkDeviceSize>(bytes, kStagingMax);
    r.reserve_staging(chunk);
    r.begin();
    if (!r.unordered.empty()) r.barrier();
    VkBufferCopy region{a->offset + byte_offset, 0, chunk};
    vkCmdCopyBuffer(r.frame().cmd, a->buffer, r.staging.buffer, 1, &region);
    r.barrier();
    r.submit_and_wait();
    std::memcpy(dst, r.staging.mapped, chunk);
    dst += chunk;
    byte_offset += chunk;
    bytes -= chunk;
  }
}

void VulkanBackend::synchronize() {
  std::lock_guard<std::mutex> lock(rt_->mutex);
  rt_->submit_and_wait();
}

// ---- kernels ----

void VulkanBackend::record(const Dispatch& d) {
  if (d.invocations <= 0) return;
  Runtime& r = *rt_;
  std::lock_guard<std::mutex> lock(r.mutex);
  const Pipeline& p = r.pipeline(d);
  const VkDeviceSize params = round_up(std::max<size_t>(d.params_bytes, 16), 16);
  KILN_CHECK(params <= std::min<VkDeviceSize>(kRingBytes, r.props.limits.maxUniformBufferRange), ValueError, r.where(),
             " ", d.shader, ": ", d.params_bytes, " bytes of parameters exceed the device's uniform buffer range (",
             r.props.limits.maxUniformBufferRange, " bytes)");
  if (r.frame().ring_used + params > kRingBytes) r.flush();  // the frame's parameter segment is full
  Frame& f = r.frame();
  const VkDeviceSize at = r.current * kRingBytes + f.ring_used;
  std::memcpy(static_cast<unsigned char*>(r.ring.mapped) + at, d.params, d.params_bytes);
  f.ring_used = round_up(f.ring_used + params, r.alignment);

  r.begin();
  std::vector<const Allocation*> buffers = d.buffers;
  for (const Allocation*& a : buffers)
    if (!a) a = &r.empty_binding;  // a Scratch of no bytes (a default method on an empty batch)
  r.order_before(buffers);
  vkCmdBindPipeline(r.frame().cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
  std::vector<VkDescriptorBufferInfo> infos;
  infos.reserve(buffers.size() + 1);
  infos.push_back({r.ring.buffer, at, params});
  for (const Allocation* a : buffers) infos.push_back({a->buffer, a->offset, a->size});
  std::vector<VkWriteDescriptorSet> writes(infos.size());
  for (uint32_t i = 0; i < writes.size(); ++i) {
    writes[i] = make<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
    writes[i].dstBinding = i;
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = i == 0 ? VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  r.push_descriptor(r.frame().cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, static_cast<uint32_t>(writes.size()),
                    writes.data());
  const int64_t groups = (d.invocations + kWorkgroup - 1) / kWorkgroup;
  vkCmdDispatch(r.frame().cmd, static_cast<uint32_t>(std::min<int64_t>(groups, kMaxGroups)), 1, 1);
  if (++f.dispatches == kSubmitEvery) r.flush();
}

// ---- timestamps ----

uint32_t VulkanBackend::timestamp() {
  Runtime& r = *rt_;
  std::lock_guard<std::mutex> lock(r.mutex);
  KILN_CHECK(r.timestamps != VK_NULL_HANDLE, BackendUnavailable, r.where(), " (", description_,
             "): its compute queue keeps no timestamps (timestampValidBits 0)");
  r.begin();
  if (!r.unordered.empty()) r.barrier();  // the work before it is done before the work after starts
  const uint32_t slot = r.next_timestamp++ % kTimestamps;
  vkCmdResetQueryPool(r.frame().cmd, r.timestamps, slot, 1);
  vkCmdWriteTimestamp(r.frame().cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, r.timestamps, slot);
  return slot;
}

double VulkanBackend::elapsed_ms(uint32_t from, uint32_t to) {
  Runtime& r = *rt_;
  std::lock_guard<std::mutex> lock(r.mutex);
  KILN_CHECK(r.timestamps != VK_NULL_HANDLE && from < kTimestamps && to < kTimestamps, ValueError, r.where(),
             " elapsed_ms: ", from, " and ", to, " are not timestamps of this device");
  r.submit_and_wait();
  uint64_t ticks[2];
  for (int i = 0; i < 2; ++i)
    KILN_VK_CHECK(vkGetQueryPoolResults(r.device, r.timestamps, i == 0 ? from : to, 1, sizeof(uint64_t), &ticks[i],
                                        sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
  const uint64_t delta = (ticks[1] - ticks[0]) & r.timestamp_mask;
  return static_cast<double>(delta) * r.timestamp_ns * 1e-6;
}

}  // namespace kiln::vulkan
