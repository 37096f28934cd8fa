// kiln's log (core/log.h): one spdlog logger named "kiln" that a program quiets, redirects or
// replaces with spdlog's own API, the levels SPDLOG_LEVEL gives it, and a message the library
// itself logs (a malformed KILN_NUM_THREADS) arriving where the program pointed it.
#include <doctest/doctest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>

#include "kiln/kiln.h"

using namespace kiln;
using logging::Level;

namespace {

// Points kiln's logger at a string for the life of the guard ("LEVEL message" lines), at `level`.
struct CapturedLog {
  explicit CapturedLog(spdlog::level::level_enum level = spdlog::level::info) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
    sink->set_pattern("%l %v");
    logger = logging::logger();
    saved_sinks = logger->sinks();
    saved_level = logger->level();
    logger->sinks() = {sink};
    logger->set_level(level);
  }
  ~CapturedLog() {
    logger->sinks() = saved_sinks;
    logger->set_level(saved_level);
  }
  std::string str() const { return text.str(); }

  std::ostringstream text;
  std::shared_ptr<spdlog::logger> logger;
  std::vector<spdlog::sink_ptr> saved_sinks;
  spdlog::level::level_enum saved_level;
};

}  // namespace

// First: the only case that starts the CPU backend, whose thread count is read once a process.
TEST_CASE("a library warning (a malformed KILN_NUM_THREADS) and its debug lines reach the program's sink") {
  setenv("KILN_NUM_THREADS", "two", 1);
  CapturedLog log(spdlog::level::debug);
  // the CPU backend's first parallel loop reads the variable
  const Tensor product = matmul(ones({64, 64}), ones({64, 64}));
  CHECK(product.sum().item() == 64.0 * 4096);
  CAPTURE(log.str());
  CHECK(log.str().find("warning KILN_NUM_THREADS='two' is not a whole number in [1, 1024]: using the machine's ") !=
        std::string::npos);
  CHECK(log.str().find("debug cpu: ") != std::string::npos);
  unsetenv("KILN_NUM_THREADS");
}

TEST_CASE("kiln's logger is spdlog's \"kiln\", and its level filters what the library says") {
  REQUIRE(logging::logger() != nullptr);
  CHECK(logging::logger()->name() == "kiln");
  CHECK(spdlog::get("kiln") == logging::logger());

  CapturedLog log;
  logging::debug("not shown at info");
  logging::info("shown at info");
  logging::set_level(Level::warn);
  CHECK(logging::level() == Level::warn);
  logging::info("not shown at warn");
  logging::warn("a warning");
  logging::error("an error");
  spdlog::get("kiln")->set_level(spdlog::level::off);  // spdlog's own API, on the same logger
  logging::error("not shown when off");
  CHECK(log.str() == "info shown at info\nwarning a warning\nerror an error\n");
}

TEST_CASE("set_logger replaces kiln's logger; one named \"kiln\" becomes spdlog's \"kiln\" too") {
  const std::shared_ptr<spdlog::logger> before = logging::logger();
  std::ostringstream text;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
  sink->set_pattern("[%n] %v");

  auto mine = std::make_shared<spdlog::logger>("my-app", sink);
  logging::set_logger(mine);
  CHECK(logging::logger() == mine);
  CHECK(spdlog::get("kiln") == before);  // another name: spdlog's "kiln" stays as it was
  logging::warn("to my-app");

  auto named = std::make_shared<spdlog::logger>("kiln", sink);
  logging::set_logger(named);
  CHECK(spdlog::get("kiln") == named);
  logging::warn("to kiln");
  CHECK(text.str() == "[my-app] to my-app\n[kiln] to kiln\n");

  CHECK_THROWS_AS(logging::set_logger(nullptr), ValueError);
  logging::set_logger(before);
  CHECK(spdlog::get("kiln") == before);
}

TEST_CASE("SPDLOG_LEVEL's text: kiln's own entry, else the bare level, read as spdlog reads it") {
  CHECK(logging::level_from_spec("kiln=debug", "kiln") == Level::debug);
  CHECK(logging::level_from_spec("warn", "kiln") == Level::warn);
  CHECK(logging::level_from_spec("off,kiln=debug", "kiln") == Level::debug);
  CHECK(logging::level_from_spec("kiln=trace,err", "kiln") == Level::trace);
  CHECK(logging::level_from_spec("off,kiln=debug", "mnist-train") == Level::off);
  CHECK(logging::level_from_spec(" kiln = ERR , info", "kiln") == Level::error);
  CHECK(logging::level_from_spec("critical", "kiln") == Level::critical);
  CHECK_FALSE(logging::level_from_spec("", "kiln").has_value());
  CHECK_FALSE(logging::level_from_spec("other=trace", "kiln").has_value());
  CHECK_FALSE(logging::level_from_spec("kiln=loud", "kiln").has_value());  // not a level: ignored
  CHECK(logging::level_from_spec("kiln=loud,warn", "kiln") == Level::warn);
  CHECK_FALSE(logging::level_from_spec("kiln" + std::string(600, ' ') + "=debug", "kiln").has_value());  // > 512
}
