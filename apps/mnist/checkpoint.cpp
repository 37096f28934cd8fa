#include "apps/mnist/checkpoint.h"

#include <array>
#include <charconv>

namespace kiln::apps {

namespace {

constexpr const char* kFormat = "mnist-checkpoint/1";
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(const std::string& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t chunk = static_cast<uint32_t>(static_cast<unsigned char>(in[i])) << 16;
    if (i + 1 < in.size()) chunk |= static_cast<uint32_t>(static_cast<unsigned char>(in[i + 1])) << 8;
    if (i + 2 < in.size()) chunk |= static_cast<unsigned char>(in[i + 2]);
    out += kAlphabet[(chunk >> 18) & 63];
    out += kAlphabet[(chunk >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(chunk >> 6) & 63] : '=';
    out += i + 2 < in.size() ? kAlphabet[chunk & 63] : '=';
  }
  return out;
}

std::string base64_decode(const std::string& in, const std::string& path, const char* key) {
  std::array<int, 256> value{};
  value.fill(-1);
  for (int i = 0; i < 64; ++i) value[static_cast<unsigned char>(kAlphabet[i])] = i;
  KILN_CHECK(in.size() % 4 == 0, SerializationError, "checkpoint '", path, "': ", key,
             " is not base64 (its length ", in.size(), " is not a multiple of 4)");
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    uint32_t chunk = 0;
    int pad = 0;
    for (size_t j = 0; j < 4; ++j) {
      char c = in[i + j];
      int v = c == '=' && i + 4 == in.size() && j >= 2 ? 0 : value[static_cast<unsigned char>(c)];
      pad += c == '=';
      KILN_CHECK(v >= 0, SerializationError, "checkpoint '", path, "': ", key,
                 " is not base64 (character ", i + j, ")");
      chunk = chunk << 6 | static_cast<uint32_t>(v);
    }
    out += static_cast<char>(chunk >> 16);
    if (pad < 2) out += static_cast<char>(chunk >> 8);
    if (pad < 1) out += static_cast<char>(chunk);
  }
  return out;
}

const std::string& entry(const std::map<std::string, std::string>& meta, const std::string& key,
                         const std::string& path) {
  auto it = meta.find(key);
  KILN_CHECK(it != meta.end(), SerializationError, "checkpoint '", path, "': the metadata lacks '",
             key, "' (is this a checkpoint written by mnist-train?)");
  return it->second;
}

template <class T>
T number(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& path) {
  const std::string& text = entry(meta, key, path);
  T v{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  KILN_CHECK(ec == std::errc() && end == text.data() + text.size(), SerializationError, "checkpoint '",
             path, "': '", key, "' should be a whole number, got '", text, "'");
  return v;
}

// Refuses what a diverged run would have saved.
void check_finite(const NamedTensors& tensors, const std::string& path, const char* part) {
  const std::string bad = first_nonfinite(tensors);
  KILN_CHECK(bad.empty(), NonFiniteError, "checkpoint '", path, "': ", part, " ", bad,
             " (saved by a run whose numbers went bad?); it is not loaded");
}

LoadedCheckpoint read(const std::string& path, bool everything) {
  SafetensorsFile file = load_safetensors(path);
  const auto& meta = file.metadata;
  KILN_CHECK(entry(meta, "kiln.format", path) == kFormat, SerializationError, "checkpoint '", path,
             "': format '", meta.at("kiln.format"), "', this mnist-train reads ", kFormat);
  LoadedCheckpoint c;
  c.model = std::move(file.tensors);
  check_finite(c.model, path, "the weight");
  c.state.model = entry(meta, "kiln.model", path);
  if (!everything) return c;
  c.state.config = entry(meta, "kiln.config", path);
  // Counts in their ranges (the data they must fit is checked by the run that resumes): far
  // below where adding an epoch's steps or images could overflow.
  constexpr int64_t kMaxCount = int64_t{1} << 53;
  auto count = [&](const char* key, int64_t lowest) {
    const auto v = number<int64_t>(meta, key, path);
    KILN_CHECK(v >= lowest && v <= kMaxCount, SerializationError, "checkpoint '", path, "': '", key, "' is ", v,
               ", outside [", lowest, ", 2^53]");
    return v;
  };
  c.state.epoch = count("kiln.epoch", 0);
  c.state.batch = count("kiln.batch", 0);
  c.state.step = count("kiln.step", 0);
  if (meta.count("kiln.images")) c.state.epoch_images = count("kiln.images", -1);
  const std::string& rng = entry(meta, "kiln.rng", path);
  size_t colon = rng.find(':');
  KILN_CHECK(colon != std::string::npos, SerializationError, "checkpoint '", path,
             "': 'kiln.rng' should read seed:offset, got '", rng, "'");
  std::map<std::string, std::string> parts{{"seed", rng.substr(0, colon)}, {"offset", rng.substr(colon + 1)}};
  c.state.rng_seed = number<uint64_t>(parts, "seed", path);
  c.state.rng_offset = number<uint64_t>(parts, "offset", path);
  c.optimizer = decode_safetensors(base64_decode(entry(meta, "kiln.optimizer", path), path, "kiln.optimizer"),
                                   path + " (kiln.optimizer)").tensors;
  check_finite(c.optimizer, path, "the optimizer's state");
  if (meta.count("kiln.scheduler"))
    c.scheduler = decode_safetensors(base64_decode(meta.at("kiln.scheduler"), path, "kiln.scheduler"),
                                     path + " (kiln.scheduler)").tensors;
  return c;
}

}  // namespace

std::string first_nonfinite(const NamedTensors& tensors) {
  for (const auto& [name, t] : tensors) {
    const int64_t bad = count_nonfinite(t.detach());
    if (bad > 0)
      return "'" + name + "' holds " + std::to_string(bad) + " NaN or infinite value" + (bad == 1 ? "" : "s") +
             " of " + std::to_string(t.numel());
  }
  return "";
}

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                     const optim::LRScheduler* scheduler, const RunState& state) {
  NamedTensors weights = model.state_dict(), optimizer_state = optimizer.state_dict();
  for (const auto& [part, tensors] : {std::pair{"the weight", &weights}, std::pair{"the optimizer's state", &optimizer_state}}) {
    const std::string bad = first_nonfinite(*tensors);
    KILN_CHECK(bad.empty(), NonFiniteError, "not saving '", path, "': ", part, " ", bad,
               "; the checkpoint there, if any, is left as it was");
  }
  std::map<std::string, std::string> meta{
      {"kiln.format", kFormat},
      {"kiln.model", state.model},
      {"kiln.config", state.config},
      {"kiln.epoch", std::to_string(state.epoch)},
      {"kiln.batch", std::to_string(state.batch)},
      {"kiln.step", std::to_string(state.step)},
      {"kiln.images", std::to_string(state.epoch_images)},
      {"kiln.rng", std::to_string(state.rng_seed) + ":" + std::to_string(state.rng_offset)},
      {"kiln.optimizer", base64_encode(encode_safetensors(optimizer.state_dict()))},
  };
  if (scheduler) meta["kiln.scheduler"] = base64_encode(encode_safetensors(scheduler->state_dict()));
  save_safetensors(path, weights, meta);
}

LoadedCheckpoint load_checkpoint(const std::string& path) { return read(path, true); }
LoadedCheckpoint load_model_checkpoint(const std::string& path) { return read(path, false); }

}  // namespace kiln::apps
