// stb_image and stb_image_write (header-only C, Debian's libstb-dev), compiled into the file that
// includes this, once per program: static, so their symbols stay in that file and cannot clash
// with another copy, and not held to kiln's warning flags. stb_image's failure reasons come as
// sentences ("Image not of any known type, or corrupt", not "unknown type"). stb_image decodes
// PNG, BMP, GIF, TGA and PNM only: the formats of a digit's picture but JPEG, which libjpeg-turbo
// decodes (apps/mnist/picture_decode.h says why).
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wdouble-promotion"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"  // GCC 12, in stbi__convert_format: a false positive
#endif
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_FAILURE_USERMSG
// the formats a digit's picture comes in (apps/mnist/picture_check.h says why not HDR, PSD, PIC)
#define STBI_ONLY_PNG
#define STBI_ONLY_BMP
#define STBI_ONLY_GIF
#define STBI_ONLY_TGA
#define STBI_ONLY_PNM
#include <stb_image.h>
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>
#pragma GCC diagnostic pop
