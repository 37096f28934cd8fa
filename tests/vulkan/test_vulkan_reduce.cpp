// The Vulkan reductions without subgroup operations: the shared-memory fallback of devices that
// lack them, on test_backend_ops's "reduce" cases (with subgroups, where the device has them:
// test_backend_ops's row itself).
#include "tests/reduce_cases.h"
#include "tests/vulkan/vulkan_test.h"

using namespace kiln;
using namespace kiln::test;

TEST_CASE("vulkan reductions without subgroup operations match the CPU, NaN and ties included") {
  MESSAGE("subgroup operations: " << std::string(vk().subgroups() ? "yes" : "no"));
  if (!vk().subgroups()) return;  // the row ran the fallback already
  struct SubgroupsOff {  // back on, whatever happens
    SubgroupsOff() { vk().use_subgroups(false); }
    ~SubgroupsOff() { vk().use_subgroups(true); }
  } off;
  reduce_cases({.device = kVulkan, .takes = {{DType::f32, 1e-5}, {DType::i32, 1e-5}}}, 20);
  check_no_validation_messages();
}
