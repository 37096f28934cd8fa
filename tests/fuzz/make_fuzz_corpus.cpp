// Writes the fuzzers' seed corpus and the dictionaries of mnist-train's flags, with kiln's own
// writers where kiln has one, so that the seeds are the files kiln really reads:
//
//   make_fuzz_corpus tests/fuzz     writes tests/fuzz/corpus/<harness>/<seed> and
//                                   tests/fuzz/fuzz_train_{argv,config}.dict
//
// Seeds are tiny (the whole corpus stays under 100 KB): one valid file of each kind, and a few
// that sit next to a rule. Files under corpus/ that this program does not write (inputs that once
// crashed a harness, kept as regressions) are left alone.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "apps/mnist/checkpoint.h"
#include "apps/mnist/stb.h"
#include "apps/mnist/train_config.h"
#include "kiln/kiln.h"
#include "tests/datasets/idx_writer.h"
#include "tests/temp_dir.h"

namespace {

using namespace kiln;
using kiln::test::Bytes;
namespace fs = std::filesystem;

fs::path g_root;  // tests/fuzz

void write(const std::string& harness, const std::string& name, const std::string& bytes) {
  const fs::path file = g_root / "corpus" / harness / name;
  fs::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::binary);
  out << bytes;
  if (!out) throw std::runtime_error("cannot write " + file.string());
}

void write(const std::string& harness, const std::string& name, const Bytes& bytes) {
  write(harness, name, std::string(bytes.begin(), bytes.end()));
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// ---- fuzz_idx: every element type, raw and gzip'd, and files one byte off a rule ----

void idx_seeds() {
  using kiln::test::big_endian, kiln::test::gzip, kiln::test::idx_file, kiln::test::valid_u8;
  const Bytes labels = valid_u8({5});
  const Bytes images = valid_u8({2, 3, 3});
  write("fuzz_idx", "labels-u8", labels);
  write("fuzz_idx", "images-u8", images);
  write("fuzz_idx", "images-u8.gz", gzip(images));
  write("fuzz_idx", "rank4-u8", valid_u8({1, 2, 2, 3}));
  write("fuzz_idx", "i8", idx_file(0x09, {3}, big_endian<int8_t>({-128, 0, 127})));
  write("fuzz_idx", "i16", idx_file(0x0B, {2}, big_endian<int16_t>({-32768, 32767})));
  write("fuzz_idx", "i32", idx_file(0x0C, {2}, big_endian<int32_t>({-7, 1 << 30})));
  write("fuzz_idx", "f32", idx_file(0x0D, {2, 1}, big_endian<float>({1.5f, -0.0f})));
  write("fuzz_idx", "f64.gz", gzip(idx_file(0x0E, {2}, big_endian<double>({3.25, -1e300}))));
  write("fuzz_idx", "two-members.gz", kiln::test::concat(gzip(Bytes(labels.begin(), labels.begin() + 4)),
                                                         gzip(Bytes(labels.begin() + 4, labels.end()))));
  Bytes over_long = labels;
  over_long.push_back(0);
  write("fuzz_idx", "over-long", over_long);
  write("fuzz_idx", "truncated", Bytes(images.begin(), images.end() - 1));
  write("fuzz_idx", "huge-dims", kiln::test::idx_header(0x08, {60000, 28, 28}));
}

// ---- fuzz_safetensors: kiln's own files, one of PyTorch's integer files, unusual headers ----

// A file with the given JSON header and `data` after it, as another writer could lay it out.
std::string safetensors_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  return out + header + data;
}

void safetensors_seeds() {
  write("fuzz_safetensors", "f32", encode_safetensors({{"w", from_vector<float>({1, -2, 3, 0.5f}, {2, 2})}}));
  write("fuzz_safetensors", "every-dtype",
        encode_safetensors({{"a", from_vector<double>({1.5}, {1})},
                            {"b", from_vector<int32_t>({-1, 7}, {2})},
                            {"c", from_vector<uint8_t>({0, 255, 9}, {3, 1})},
                            {"scalar", scalar(2.0f)},
                            {"empty", zeros({0, 3})}},
                           {{"format", "pt"}, {"note", "quote \" and \\ and \n"}}));
  const std::string i64(16, '\0');
  write("fuzz_safetensors", "i64",
        safetensors_file(R"({"labels":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", i64));
  write("fuzz_safetensors", "escapes",
        safetensors_file(R"( {"__metadata__":{"k\u00e9y":"v\/\t"}, "n\u0041me" : {"shape":[],)"
                         R"("data_offsets":[0,1],"dtype":"U8"}} )",
                         std::string(1, '\x7f')));
  write("fuzz_safetensors", "header-only", safetensors_file("{}", ""));
}

// ---- fuzz_checkpoint: mnist-train's checkpoints of a tiny model, with and without a scheduler ----

void checkpoint_seeds() {
  kiln::test::TempDir dir;
  manual_seed(1);
  nn::Linear model(3, 2);
  Tensor x = from_vector<float>({1, 2, 3}, {1, 3});
  struct Seed {
    const char* name;
    std::unique_ptr<optim::Optimizer> optimizer;
    bool scheduler;
  };
  std::vector<Seed> seeds;
  seeds.push_back({"sgd-step", std::make_unique<optim::SGD>(model.parameters(), optim::SGDOptions(0.1).momentum(0.9)), true});
  seeds.push_back({"adam", std::make_unique<optim::Adam>(model.parameters(), optim::AdamOptions(1e-3)), false});
  for (Seed& seed : seeds) {
    seed.optimizer->zero_grad();
    model(x).sum().backward();
    seed.optimizer->step();  // so that the optimizer has state to save
    std::unique_ptr<optim::StepLR> scheduler;
    if (seed.scheduler) scheduler = std::make_unique<optim::StepLR>(*seed.optimizer, 1, 0.7);
    apps::Config config;  // the settings a run records, as mnist-train writes them
    config.model = "mlp";
    apps::RunState state{"mlp", config.settings(1).dump(), 1, 3, 7, 192, 1, 42};
    const std::string path = dir.file(seed.name);
    apps::save_checkpoint(path, model, *seed.optimizer, scheduler.get(), state);
    write("fuzz_checkpoint", seed.name, read(path));
  }
}

// ---- fuzz_digit_image: a stroke on a small canvas in each format stb_image reads ----

void image_seeds() {
  constexpr int kSide = 8;
  std::vector<uint8_t> grey(kSide * kSide, 255);  // white paper, a dark diagonal stroke
  for (int i = 1; i < kSide - 1; ++i) grey[static_cast<size_t>(i * kSide + i)] = 20;
  std::vector<uint8_t> rgba;
  for (uint8_t g : grey) rgba.insert(rgba.end(), {g, g, g, static_cast<uint8_t>(g == 255 ? 0 : 255)});

  auto sink = [](void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<size_t>(size));
  };
  auto with = [&](const char* name, auto write_to) {
    std::string bytes;
    if (!write_to(&bytes)) throw std::runtime_error(std::string("stb_image_write failed on ") + name);
    write("fuzz_digit_image", name, bytes);
  };
  with("grey.png", [&](std::string* s) { return stbi_write_png_to_func(sink, s, kSide, kSide, 1, grey.data(), kSide); });
  with("rgba.png", [&](std::string* s) { return stbi_write_png_to_func(sink, s, kSide, kSide, 4, rgba.data(), 4 * kSide); });
  with("grey.bmp", [&](std::string* s) { return stbi_write_bmp_to_func(sink, s, kSide, kSide, 1, grey.data()); });
  with("rgba.tga", [&](std::string* s) { return stbi_write_tga_to_func(sink, s, kSide, kSide, 4, rgba.data()); });
  with("grey.jpg", [&](std::string* s) { return stbi_write_jpg_to_func(sink, s, kSide, kSide, 1, grey.data(), 90); });
  std::vector<float> light(grey.begin(), grey.end());
  for (float& v : light) v /= 255.0f;
  with("grey.hdr", [&](std::string* s) { return stbi_write_hdr_to_func(sink, s, kSide, kSide, 1, light.data()); });

  std::string pgm = "P5\n# a comment\n8 8\n255\n";  // binary PNM, 8 and 16 bits a sample
  pgm.append(grey.begin(), grey.end());
  write("fuzz_digit_image", "grey.pgm", pgm);
  std::string pgm16 = "P5 8 8 65535\n";
  for (uint8_t g : grey) pgm16 += {static_cast<char>(g), static_cast<char>(g)};
  write("fuzz_digit_image", "grey16.pgm", pgm16);
  // GIF89a, one white pixel: no ink (stb_image writes no GIF; these are its 35 bytes by hand)
  write("fuzz_digit_image", "pixel.gif",
        std::string("GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00"
                    "\x2c\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02\x44\x01\x00\x3b", 35));
}

// ---- fuzz_train_argv and fuzz_train_config: command lines and config files ----

// Every flag of mnist-train, as add_options declares it ("--lr", "-v").
std::vector<std::string> flag_names() {
  CLI::App app;
  apps::Config config;
  apps::add_options(app, config);
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
    for (const std::string& name : option->get_snames()) names.push_back("-" + name);
  }
  return names;
}

// A libFuzzer dictionary: one quoted word a line, its quotes and backslashes escaped.
void write_dictionary(const std::string& harness, const std::vector<std::string>& words) {
  const fs::path file = g_root / (harness + ".dict");
  std::ofstream out(file);
  out << "# Written by make_fuzz_corpus from mnist-train's options (apps/mnist/train_config.cpp).\n";
  for (const std::string& word : words) {
    out << '"';
    for (char c : word) {
      if (c == '"' || c == '\\') out << '\\';
      out << c;
    }
    out << "\"\n";
  }
  if (!out) throw std::runtime_error("cannot write " + file.string());
}

void command_line_seeds() {
  using namespace std::string_literals;
  write("fuzz_train_argv", "numbers", "--lr\0" "0.5\0--epochs\0" "3\0--momentum=0.9\0--seed\0" "18446744073709551615"s);
  write("fuzz_train_argv", "choices", "--model\0mlp\0--optimizer\0adamw\0--scheduler\0onecycle\0--device\0cpu"s);
  write("fuzz_train_argv", "flags", "-vq\0--tf32\0--detect-anomaly\0--distributed"s);
  write("fuzz_train_argv", "help", "--help"s);
  write("fuzz_train_argv", "version", "--version"s);
  write("fuzz_train_argv", "config", "--config\0@\0--lr\0" "2\0\0epochs = 2\nlr = 0.25\n"s);

  write("fuzz_train_config", "toml", "# a run\nmodel = \"mlp\"\nepochs = 2\nlr = 0.5\ntf32 = true\nsave = \"a b.safetensors\"\n");
  write("fuzz_train_config", "ini", "[default]\noptimizer=sgd\nmomentum=0.9\nweight-decay=1e-4\n; a comment\n");
  write("fuzz_train_config", "arrays", "verbose = [true, true]\nlimit_train = 100\nlimit-test=0\n");

  std::vector<std::string> argv_words = flag_names(), config_words;
  for (const std::string& flag : argv_words)
    if (flag.rfind("--", 0) == 0) config_words.push_back(flag.substr(2) + " = ");
  for (const char* word : {"auto", "cpu", "cuda:0", "vulkan:1", "cnn", "mlp", "fast", "adadelta", "rmsprop",
                           "cosine", "none", "nan", "inf", "1e308", "0x10", "-0", "true", "@"}) {
    argv_words.push_back(word);
    config_words.push_back(word);
  }
  for (const char* word : {"[default]", "\"\"\"", "'''", "[", "]", "\\n", "#", ";", "=", "."}) config_words.push_back(word);
  write_dictionary("fuzz_train_argv", argv_words);
  write_dictionary("fuzz_train_config", config_words);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_fuzz_corpus DIR    (DIR: tests/fuzz, where corpus/ and the .dict files go)\n";
    return 2;
  }
  g_root = argv[1];
  try {
    idx_seeds();
    safetensors_seeds();
    checkpoint_seeds();
    image_seeds();
    command_line_seeds();
  } catch (const std::exception& e) {
    std::cerr << "make_fuzz_corpus: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
