# CUDA parts, only with a CUDA LibTorch: our kernels (*.cu, compiled by nvcc for Hopper, sm_90a by
# default), the LibTorch-CUDA glue (*_cuda.cpp) and NCCL. NCCL comes from ZEST_NCCL_ROOT when given
# (e.g. the nvidia-nccl wheel's nvidia/nccl folder; NO_DEFAULT_PATH, so a system NCCL is not mixed in),
# else from the system.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90a)
endif()
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
find_package(CUDAToolkit REQUIRED)

set(ZEST_NCCL_ROOT "" CACHE PATH "NCCL installation (include/nccl.h, lib/libnccl.so*)")
if(ZEST_NCCL_ROOT)
  find_path(ZEST_NCCL_INCLUDE nccl.h PATHS ${ZEST_NCCL_ROOT}/include NO_DEFAULT_PATH)
  find_library(ZEST_NCCL_LIB NAMES nccl libnccl.so.2 PATHS ${ZEST_NCCL_ROOT}/lib NO_DEFAULT_PATH)
else()
  find_path(ZEST_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(ZEST_NCCL_LIB NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR})
endif()
if(NOT ZEST_NCCL_INCLUDE OR NOT ZEST_NCCL_LIB)
  message(FATAL_ERROR "zest: NCCL not found (set ZEST_NCCL_ROOT to a folder with include/nccl.h and lib/libnccl.so*)")
endif()
message(STATUS "zest: NCCL ${ZEST_NCCL_LIB}")

add_library(zest_cuda_deps INTERFACE)
target_include_directories(zest_cuda_deps SYSTEM INTERFACE ${ZEST_NCCL_INCLUDE})
target_link_libraries(zest_cuda_deps INTERFACE ${ZEST_NCCL_LIB} CUDA::cudart)
