# Third-party dependencies, gathered into one interface target `zest_deps`.
# CPU machines: Debian 12 packages. GPU machine: LibTorch from the pip wheel (pass
# -DCMAKE_PREFIX_PATH=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')) and header-only
# deps from a folder given as -DZEST_THIRD_PARTY=DIR (DIR/include holds toml++, nlohmann, CLI, ...).
set(ZEST_THIRD_PARTY "" CACHE PATH "Folder with include/ for header-only deps missing on the system")

find_package(Torch REQUIRED)
find_package(MPI REQUIRED COMPONENTS C)
find_package(Threads REQUIRED)

add_library(zest_deps INTERFACE)
# The LibTorch 2.x wheels export their own copies of libstdc++ symbols (std::filesystem among them,
# built against another libstdc++): listing libstdc++ first makes the dynamic linker bind ours, else
# e.g. std::filesystem::remove_all jumps into libtorch.so and crashes.
if(Torch_VERSION VERSION_GREATER_EQUAL 2.0)
  target_link_libraries(zest_deps INTERFACE -Wl,--push-state,--no-as-needed stdc++ -Wl,--pop-state)
endif()
target_link_libraries(zest_deps INTERFACE ${TORCH_LIBRARIES} MPI::MPI_C Threads::Threads)
# C++ flags only for C++ sources: nvcc compiles our kernels (*.cu) with its own.
separate_arguments(ZEST_TORCH_CXX_FLAGS UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(zest_deps INTERFACE
  "$<$<COMPILE_LANGUAGE:CXX>:${ZEST_TORCH_CXX_FLAGS};-Wall;-Wextra;-Wno-unused-parameter>")
# Open MPI's (deprecated) C++ bindings need libmpi_cxx, which MPI::MPI_C does not link; zest uses the C API.
target_compile_definitions(zest_deps INTERFACE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
if(ZEST_THIRD_PARTY)
  target_include_directories(zest_deps SYSTEM INTERFACE ${ZEST_THIRD_PARTY}/include)
endif()

# toml++: Debian ships it compiled; elsewhere use it header-only.
find_package(tomlplusplus QUIET)
if(TARGET tomlplusplus::tomlplusplus)
  target_link_libraries(zest_deps INTERFACE tomlplusplus::tomlplusplus)
else()
  target_compile_definitions(zest_deps INTERFACE TOML_HEADER_ONLY=1)
endif()

find_package(nlohmann_json QUIET)
if(TARGET nlohmann_json::nlohmann_json)
  target_link_libraries(zest_deps INTERFACE nlohmann_json::nlohmann_json)
endif()

# stb_image (JPEG/PNG decoding for `zest data prepare images`) and stb_image_write (the tests' images): header-only,
# so a build anywhere needs only the headers — Debian's libstb-dev puts them in /usr/include/stb;
# scripts/make-third-party copies them into third_party/include/stb for the GPU machine. One source file
# (data/image_decode.cpp) compiles the decoder; only it and the prepare tests see the folder, so every other
# compile line stays as it was (and ccache's entries stay valid).
find_path(ZEST_STB_INCLUDE_DIR stb_image.h PATHS /usr/include/stb ${ZEST_THIRD_PARTY}/include/stb NO_DEFAULT_PATH)
if(NOT ZEST_STB_INCLUDE_DIR)
  message(FATAL_ERROR "stb_image.h not found: install libstb-dev (scripts/setup), or run scripts/make-third-party "
                      "and pass -DZEST_THIRD_PARTY=<repo>/third_party")
endif()

# xxhash (checksums of checkpoint shards): header-only use via XXH_INLINE_ALL, so no library is needed.

# CUDA: only when the LibTorch found was built with it (Debian's ships ATen/cuda headers without CUDA
# libraries, so headers prove nothing; the torch_cuda target does).
if(TARGET torch_cuda)
  set(ZEST_WITH_CUDA ON)
  target_compile_definitions(zest_deps INTERFACE ZEST_WITH_CUDA=1)
  message(STATUS "zest: LibTorch has CUDA; building the CUDA parts")
else()
  set(ZEST_WITH_CUDA OFF)
  message(STATUS "zest: CPU-only LibTorch")
endif()
