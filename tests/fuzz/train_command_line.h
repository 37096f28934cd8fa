// What fuzz_train_argv and fuzz_train_config share: mnist-train's command line parsed as
// mnist-train parses it (apps/mnist/train_config.h), and the rules a parse that succeeds must keep.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "apps/mnist/cli.h"
#include "apps/mnist/train_config.h"

namespace kiln::fuzz {

// CLI11 prints help, versions and usage errors on std::cout and std::cerr: with them muted a
// fuzzer runs several times faster, and its own reports go to the C stderr, which stays open.
inline void mute_iostreams() {
  std::cout.rdbuf(nullptr);
  std::cerr.rdbuf(nullptr);
}

// What the flags' checks promise about a Config that parsed (train_config.cpp states each rule).
inline bool keeps_the_rules(const apps::Config& c) {
  auto finite_at_least = [](double v, double lo) { return std::isfinite(v) && v >= lo; };
  auto one_of = [](const std::string& v, const std::vector<std::string>& names) {
    for (const std::string& name : names)
      if (v == name) return true;
    return false;
  };
  return one_of(c.model, {"cnn", "mlp", "fast"}) &&
         one_of(c.optimizer, {"sgd", "adam", "adamw", "adadelta", "rmsprop"}) &&
         one_of(c.scheduler, {"step", "cosine", "onecycle", "none"}) && c.epochs > 0 && c.batch_size > 0 &&
         c.test_batch_size > 0 && c.log_interval > 0 && c.limit_train >= 0 && c.limit_test >= 0 &&
         c.augment >= 0 && c.augment <= 8 && finite_at_least(c.lr, 0) && c.lr > 0 &&
         finite_at_least(c.momentum, 0) && c.momentum <= 1 && finite_at_least(c.weight_decay, 0) &&
         finite_at_least(c.gamma, 0) && c.gamma > 0 && c.verbosity >= 0 && c.verbosity <= 2;
}

// Parses `args` (without the program's name) as mnist-train does: add_options, then
// apps::parse_command_line, which calls CLI::App::parse, prints CLI11's messages and picks the exit
// code. Expects a Config that keeps the rules, or a CLI::ParseError made into exit code 0 (after
// --help and --version) or 2. Aborts on anything else.
inline void parse_train_command_line(const std::vector<std::string>& args) {
  std::vector<std::string> owned{"mnist-train"};
  owned.insert(owned.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : owned) argv.push_back(arg.data());
  argv.push_back(nullptr);

  apps::Config config;
  CLI::App app;
  apps::add_options(app, config);
  const std::optional<int> code = apps::parse_command_line(app, static_cast<int>(owned.size()), argv.data());
  const char* broken = nullptr;
  if (code && *code != 0 && *code != 2) broken = "an exit code other than 0 or 2";
  else if (!code && !keeps_the_rules(config))
    broken = "a parse that succeeded left a Config that breaks the rules of its flags";
  if (broken) {
    std::fprintf(stderr, "fuzz: mnist-train's command line: %s\n", broken);
    std::abort();
  }
}

}  // namespace kiln::fuzz
