// Skipped cases (tests/skip.h): a doctest listener follows the run, so that skip() knows which
// case is running and exit_code() how many cases passed the filters.
#include "tests/skip.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <iostream>
#include <string_view>
#include <vector>

namespace kiln::test {
namespace {

struct Skipped {
  std::string test_case, reason;
};

struct RunState {
  const doctest::TestCaseData* current = nullptr;  // the running case
  bool ran = false;                                // a run ended (not a query)
  unsigned cases = 0;                              // the cases that passed the filters
  std::vector<Skipped> skipped;
};

RunState& state() {
  static RunState s;
  return s;
}

// Listens to doctest's run; reports nothing itself.
struct SkipListener : doctest::IReporter {
  explicit SkipListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    state().ran = true;
    state().cases = stats.numTestCasesPassingFilters;
  }
  void test_case_start(const doctest::TestCaseData& data) override { state().current = &data; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("kiln-skips", 1, SkipListener);

}  // namespace

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string_view(ci) == "true";
}

void skip(const std::string& reason, InCi ci) {
  if (ci == InCi::fail && in_ci())
    FAIL(reason << " (CI=true: scripts/setup provides this input, so it must be here)");
  MESSAGE("skipped: " << reason);
  const std::string name = state().current ? state().current->m_name : "";
  std::vector<Skipped>& skipped = state().skipped;
  if (skipped.empty() || skipped.back().test_case != name) skipped.push_back({name, reason});  // once per case
}

int exit_code(int doctest_result) {
  const RunState& s = state();
  if (doctest_result != 0 || !s.ran) return doctest_result;
  if (s.cases == 0) {
    std::cerr << "no test case passed the filters, so nothing was checked: look at the test's arguments\n";
    return 1;
  }
  if (s.skipped.empty()) return 0;
  std::cout << s.skipped.size() << " of " << s.cases << " test case(s) skipped (exit code " << kSkipped << "):\n";
  for (const Skipped& k : s.skipped) std::cout << "  " << k.test_case << ": " << k.reason << "\n";
  return kSkipped;
}

}  // namespace kiln::test
