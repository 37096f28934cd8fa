// picture_decode.h: libjpeg-turbo for JPEG, its errors and warnings caught and turned into
// kiln's; stb_image 2.27 for the rest, reading from memory through callbacks, its failure reasons
// made into sentences.
#include "apps/mnist/picture_decode.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>  // before jpeglib.h, which uses FILE
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <jerror.h>
#include <jpeglib.h>

#include "apps/mnist/picture_check.h"
#include "apps/mnist/stb.h"
#include "kiln/core/error.h"
#include "kiln/datasets/idx.h"

namespace kiln::apps {

namespace {

// stb_image reads the file's bytes through these callbacks (as from a file), which also notice
// when the decoder wants bytes that the file does not hold. stb reads through a buffer of
// kStbBuffer (128) bytes, whose refills may get fewer at the end of the file, and reads blocks of
// pixels directly, asking for exactly what it needs: a refill that gets nothing, or a direct read
// that gets less than it asked for, means the file ends before the picture does. stb itself
// decodes zeros for what is missing (BMP, TGA, PNM) or fails for another reason.
class StbReader {
 public:
  explicit StbReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  const stbi_io_callbacks* callbacks() const { return &kCallbacks; }
  bool ran_out() const { return ran_out_; }

 private:
  static constexpr int kStbBuffer = sizeof(stbi__context::buffer_start);

  static int read(void* user, char* data, int size) {
    auto* self = static_cast<StbReader*>(user);
    const size_t got = std::min(static_cast<size_t>(size), self->bytes_.size() - self->at_);
    std::memcpy(data, self->bytes_.data() + self->at_, got);
    self->at_ += got;
    if (got == 0 || (size != kStbBuffer && got < static_cast<size_t>(size))) self->ran_out_ = true;
    return static_cast<int>(got);
  }
  static void skip(void* user, int n) {  // n < 0 steps back (stb's GIF reader does)
    auto* self = static_cast<StbReader*>(user);
    const int64_t to = static_cast<int64_t>(self->at_) + n;
    if (to > static_cast<int64_t>(self->bytes_.size())) self->ran_out_ = true;
    self->at_ = static_cast<size_t>(std::clamp<int64_t>(to, 0, static_cast<int64_t>(self->bytes_.size())));
  }
  static int eof(void* user) {
    auto* self = static_cast<StbReader*>(user);
    return self->at_ >= self->bytes_.size();
  }
  static constexpr stbi_io_callbacks kCallbacks = {&StbReader::read, &StbReader::skip, &StbReader::eof};

  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
  bool ran_out_ = false;
};

// stb keeps the reason for its last failure in a global that only failures write, and its probes
// for each format write it too while ruling formats out: a JPEG's decoder may fail silently after
// the PNG probe has said "Not a PNG". So the global is cleared before each call into stb, and an
// empty reason, or a probe's, is reported as no reason at all.
void clear_stb_reason() { stbi__g_failure_reason = nullptr; }  // stb has no call for it

std::string stb_reason() {
  const char* reason = stbi_failure_reason();
  const std::string_view text = reason ? reason : "";
  if (text.empty() || text == "Not a PNG")
    return "stb_image gives no reason (corrupt data, or a feature it does not support)";
  return std::string(text);
}

// ---- JPEG, by libjpeg-turbo

// More scans than a progressive JPEG has any use for (encoders write about 10): a hostile file of
// thousands of tiny scans would take minutes (libjpeg-turbo's own fuzzers stop at 500).
constexpr int kMaxJpegScans = 500;

// A libjpeg decompressor over bytes in memory. libjpeg is C: an error may not unwind through it as
// an exception, so its error handler jumps back (longjmp) to the setjmp in the function that
// called into it, which then throws. That is why this lives on the heap: what the jump finds
// here is what libjpeg left, not a copy in a register.
struct Jpeg {
  jpeg_decompress_struct info{};
  jpeg_error_mgr errors{};
  jpeg_progress_mgr progress{};
  std::jmp_buf back{};
  char message[JMSG_LENGTH_MAX] = {};  // why libjpeg stopped, as it words it
  bool truncated = false;              // the data ended before the picture did
  bool created = false;

  Jpeg() = default;
  Jpeg(const Jpeg&) = delete;
  Jpeg& operator=(const Jpeg&) = delete;
  ~Jpeg() {
    if (created) jpeg_destroy_decompress(&info);
  }

  static Jpeg& of(j_common_ptr common) { return *static_cast<Jpeg*>(common->client_data); }

  // libjpeg's error_exit: keep the reason and jump back
  [[noreturn]] static void stop(j_common_ptr common) {
    Jpeg& self = of(common);
    common->err->format_message(common, self.message);
    std::longjmp(self.back, 1);
  }
  // libjpeg's emit_message: level -1 is a warning about the data, which libjpeg would decode past
  // (with grey for what is missing or wrong). The file ending early is a truncated picture, damaged
  // entropy-coded data or scans a corrupt one, both refused; the warnings that lose no pixel pass
  // (bytes between segments, an unknown JFIF revision or Adobe transform, a bad ICC profile).
  static void warn(j_common_ptr common, int level) {
    const int code = common->err->msg_code;
    if (level >= 0 || code == JWRN_EXTRANEOUS_DATA || code == JWRN_JFIF_MAJOR || code == JWRN_ADOBE_XFORM ||
        code == JWRN_BOGUS_ICC)
      return;
    of(common).truncated = code == JWRN_JPEG_EOF;
    stop(common);
  }
  static void count_scans(j_common_ptr common) {
    if (reinterpret_cast<j_decompress_ptr>(common)->input_scan_number <= kMaxJpegScans) return;
    std::snprintf(of(common).message, sizeof message, "more than %d scans (a progressive JPEG needs about 10)",
                  kMaxJpegScans);
    std::longjmp(of(common).back, 1);
  }

  // Reads the header and picks the output: grey stays grey; CMYK and YCCK (Adobe's, stored
  // inverted) come as CMYK and are made RGB by cmyk_to_rgb, the rest as RGB. Only after setjmp.
  void open(std::span<const uint8_t> bytes) {
    info.err = jpeg_std_error(&errors);
    errors.error_exit = &Jpeg::stop;
    errors.emit_message = &Jpeg::warn;
    jpeg_create_decompress(&info);
    created = true;
    info.client_data = this;
    progress.progress_monitor = &Jpeg::count_scans;
    info.progress = &progress;
    jpeg_mem_src(&info, bytes.data(), static_cast<unsigned long>(bytes.size()));
    jpeg_read_header(&info, TRUE);
    const J_COLOR_SPACE space = info.jpeg_color_space;
    info.out_color_space = space == JCS_GRAYSCALE                 ? JCS_GRAYSCALE
                           : space == JCS_CMYK || space == JCS_YCCK ? JCS_CMYK
                                                                     : JCS_RGB;
  }
  int channels() const { return info.out_color_space == JCS_GRAYSCALE ? 1 : 3; }
};

// Adobe's CMYK, stored inverted (255 is no ink): each of R, G, B is its channel times K / 255, as
// stb_image made it.
void cmyk_to_rgb(const uint8_t* cmyk, uint8_t* rgb, size_t pixels) {
  for (size_t i = 0; i < pixels; ++i, cmyk += 4, rgb += 3)
    for (int c = 0; c < 3; ++c) rgb[c] = static_cast<uint8_t>((cmyk[c] * cmyk[3] + 127) / 255);
}

[[noreturn]] void jpeg_failed(const Jpeg& jpeg, std::span<const uint8_t> bytes, const std::string& path) {
  KILN_CHECK(!jpeg.truncated, data::DataError, path, ": truncated: its ", bytes.size(),
             " bytes end before the picture does (an interrupted download or copy?)");
  KILN_FAIL(data::DataError, path, ": cannot decode: ", jpeg.message);
}

PictureSize jpeg_size(std::span<const uint8_t> bytes, const std::string& path) {
  const auto jpeg = std::make_unique<Jpeg>();
  if (setjmp(jpeg->back) != 0) jpeg_failed(*jpeg, bytes, path);
  jpeg->open(bytes);
  return {static_cast<int>(jpeg->info.image_width), static_cast<int>(jpeg->info.image_height), jpeg->channels()};
}

DecodedPicture decode_jpeg(std::span<const uint8_t> bytes, const std::string& path) {
  const auto jpeg = std::make_unique<Jpeg>();
  DecodedPicture picture;  // set only before setjmp and after the last call into libjpeg
  uint8_t* volatile pixels = nullptr;
  uint8_t* volatile row = nullptr;  // a CMYK row before cmyk_to_rgb
  if (setjmp(jpeg->back) != 0) {
    std::free(pixels);
    std::free(row);
    jpeg_failed(*jpeg, bytes, path);
  }
  jpeg->open(bytes);
  jpeg_decompress_struct& info = jpeg->info;
  jpeg_start_decompress(&info);
  const size_t width = info.output_width, height = info.output_height;
  const size_t channels = static_cast<size_t>(jpeg->channels()), stride = width * channels;
  pixels = static_cast<uint8_t*>(std::malloc(stride * height));
  const bool cmyk = info.out_color_space == JCS_CMYK;
  if (cmyk) row = static_cast<uint8_t*>(std::malloc(width * 4));
  if (pixels == nullptr || (cmyk && row == nullptr)) {
    std::free(pixels);
    std::free(row);
    KILN_FAIL(data::DataError, path, ": out of memory for its ", width, "x", height, " pixels");
  }
  while (info.output_scanline < height) {
    uint8_t* out = pixels + info.output_scanline * stride;
    JSAMPROW rows[1] = {cmyk ? row : out};
    jpeg_read_scanlines(&info, rows, 1);
    if (cmyk) cmyk_to_rgb(row, out, width);
  }
  jpeg_finish_decompress(&info);
  std::free(row);
  picture.pixels.reset(pixels);
  picture.size = {static_cast<int>(width), static_cast<int>(height), static_cast<int>(channels)};
  return picture;
}

}  // namespace

void PixelsFree::operator()(uint8_t* pixels) const { std::free(pixels); }  // stb_image's STBI_FREE too

PictureSize picture_size(std::span<const uint8_t> bytes, const std::string& path) {
  if (is_jpeg(bytes)) return jpeg_size(bytes, path);
  StbReader reader(bytes);
  PictureSize size;
  clear_stb_reason();
  KILN_CHECK(stbi_info_from_callbacks(reader.callbacks(), &reader, &size.width, &size.height, &size.channels),
             data::DataError, path, ": not a picture kiln reads (", kPictureFormats, "): ", stb_reason());
  return size;
}

DecodedPicture decode_picture(std::span<const uint8_t> bytes, const std::string& path) {
  if (is_jpeg(bytes)) return decode_jpeg(bytes, path);
  StbReader reader(bytes);
  DecodedPicture picture;
  PictureSize& size = picture.size;
  clear_stb_reason();
  picture.pixels.reset(
      stbi_load_from_callbacks(reader.callbacks(), &reader, &size.width, &size.height, &size.channels, 0));
  KILN_CHECK(!reader.ran_out(), data::DataError, path, ": truncated: its ", bytes.size(),
             " bytes end before the picture does (an interrupted download or copy?)");
  KILN_CHECK(picture.pixels != nullptr, data::DataError, path, ": cannot decode: ", stb_reason());
  return picture;
}

}  // namespace kiln::apps
