// stb_image's implementation, once for the test program: the tests that decode the PNGs and GIFs zest writes
// include only its declarations, so that they compile in the program's batches (tests/CMakeLists.txt); the
// implementation may appear once in a translation unit. zest's own decoder (data/image_decode.cpp) keeps a
// private (static) copy.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>
#pragma GCC diagnostic pop
