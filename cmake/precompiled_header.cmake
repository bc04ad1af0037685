# The precompiled header (cmake/pch.h: LibTorch and the standard library) and where it is used. It pays only
# in translation units that include LibTorch: there it saves ~7 s each on a 2-core machine
# (engine/bucket.cpp: 6.7 s with it, 14.3 s without), while a unit that includes none of LibTorch pays ~8 s
# for loading it (cli/cmd_launch.cpp: 14.3 s with it, 6.1 s without; formats/yaml_subset.cpp 14.7 / 6.3).
# So every target reuses it, and each source that includes no LibTorch header — directly or through the
# project's own headers, judged from its #include lines when CMake configures — compiles without it. A
# header that later starts to include LibTorch only makes such a unit compile slower until the next
# configure, never wrongly: every file includes what it uses.
add_library(zest_pch STATIC ${CMAKE_SOURCE_DIR}/cmake/pch.cpp)
target_link_libraries(zest_pch PUBLIC zest_deps)
target_precompile_headers(zest_pch PUBLIC ${CMAKE_SOURCE_DIR}/cmake/pch.h)

# Sets <out> to ON when <file> includes a LibTorch header (torch/, ATen/, c10/) itself or through a project
# header ("dir/name.h" found under the source root, tests/ or the including file's folder). Answers are
# remembered per file for the whole configure.
function(_zest_includes_libtorch file out)
  get_property(known GLOBAL PROPERTY "ZEST_LIBTORCH:${file}" SET)
  if(known)
    get_property(answer GLOBAL PROPERTY "ZEST_LIBTORCH:${file}")
    set(${out} ${answer} PARENT_SCOPE)
    return()
  endif()
  set_property(GLOBAL PROPERTY "ZEST_LIBTORCH:${file}" OFF)  # a header that includes itself back: no news
  get_filename_component(folder ${file} DIRECTORY)
  file(STRINGS ${file} includes REGEX "^[ \t]*#[ \t]*include")
  set(answer OFF)
  foreach(line IN LISTS includes)
    if(line MATCHES "[<\"](torch|ATen|c10)/")
      set(answer ON)
      break()
    endif()
    if(NOT line MATCHES "\"([^\"]+)\"")
      continue()
    endif()
    set(name ${CMAKE_MATCH_1})
    foreach(root ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/tests ${folder})
      if(EXISTS ${root}/${name})
        get_filename_component(header ${root}/${name} ABSOLUTE)
        _zest_includes_libtorch(${header} nested)
        if(nested)
          set(answer ON)
        endif()
        break()
      endif()
    endforeach()
    if(answer)
      break()
    endif()
  endforeach()
  set_property(GLOBAL PROPERTY "ZEST_LIBTORCH:${file}" ${answer})
  set(${out} ${answer} PARENT_SCOPE)
endfunction()

# Target <target> reuses the precompiled header. In a unity build (ZEST_UNITY_BUILD) its sources compile in
# batches of sixteen, each batch taking the header once; otherwise its C++ sources that include no LibTorch skip
# it. (Sources with their own compile options or include folders are never batched: CMake compiles them alone.)
function(zest_use_precompiled_header target)
  target_precompile_headers(${target} REUSE_FROM zest_pch)
  if(ZEST_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 16)
    return()
  endif()
  get_target_property(sources ${target} SOURCES)
  get_target_property(target_folder ${target} SOURCE_DIR)
  foreach(source IN LISTS sources)
    get_filename_component(path ${source} ABSOLUTE BASE_DIR ${target_folder})
    if(NOT path MATCHES "\\.cpp$" OR NOT EXISTS ${path})
      continue()
    endif()
    _zest_includes_libtorch(${path} uses_libtorch)
    if(NOT uses_libtorch)
      set_source_files_properties(${source} TARGET_DIRECTORY ${target} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
    endif()
  endforeach()
endfunction()
