// safetensors files (https://github.com/huggingface/safetensors): the format kiln writes
// checkpoints in, so that PyTorch reads them with safetensors.torch.load_file.
//
// Layout: 8 bytes little-endian N, then N bytes of JSON header, then the data. The header maps
// each tensor's name to {"dtype", "shape", "data_offsets": [begin, end)} (offsets into the data
// that follows the header) and may hold "__metadata__", a map of strings. Tensors are stored
// row-major, little-endian, back to back.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

struct SafetensorsFile {
  NamedTensors tensors;                         // in the file's data order
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

// Writes atomically (write_file_atomically, core/file.h): a failure at any point, a full disk say,
// is an IoError and leaves an existing file at `path` untouched; a directory, FIFO or device at
// `path` is refused, a symbolic link followed. Tensors may be on any device; names must be unique
// and non-empty.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads every tensor onto the CPU. F32, F64, BF16, I32 and U8 load as they are; I64 loads as i32 when
// every value fits (PyTorch's class labels and counters). Anything malformed throws
// SerializationError naming the file, the byte offset and the rule.
SafetensorsFile load_safetensors(const std::string& path);

// The same, in memory: the bytes of a safetensors file, and back (`name` stands for the file
// in error messages). A checkpoint nests one file in another's metadata this way.
std::string encode_safetensors(const NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata = {},
                               const std::string& name = "<memory>");
SafetensorsFile decode_safetensors(const std::string& bytes, const std::string& name = "<memory>");

class SerializationError : public Error {
  using Error::Error;
};

}  // namespace kiln
