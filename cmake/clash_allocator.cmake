# clash_link_allocator(target): links gperftools' tcmalloc_minimal into a server executable when
# CLASH_TCMALLOC is on (the default) and no sanitizer is enabled (a sanitizer brings its own
# allocator). glibc's malloc spends a fifth of a large ray pick's time through gRPC consolidating
# free chunks (README, Service benchmarks); tcmalloc's per-thread caches do not. Nothing calls
# tcmalloc by name, so the library is linked even where the linker drops unreferenced ones.
function(clash_link_allocator target)
  if(NOT CLASH_TCMALLOC OR CLASH_SANITIZE)
    return()
  endif()
  find_library(CLASH_TCMALLOC_LIBRARY NAMES tcmalloc_minimal)
  if(NOT CLASH_TCMALLOC_LIBRARY)
    message(FATAL_ERROR "CLASH_TCMALLOC is on but libtcmalloc_minimal was not found: install "
                        "libgoogle-perftools-dev (.ci/install-deps.sh) or configure with "
                        "-DCLASH_TCMALLOC=OFF")
  endif()
  target_link_libraries(${target} PRIVATE "$<LINK_LIBRARY:CLASH_NO_AS_NEEDED,${CLASH_TCMALLOC_LIBRARY}>")
endfunction()

# A link feature keeping a library nobody references by name (CMake de-duplicates raw
# push-state/pop-state flags across targets, which unbalances them).
set(CMAKE_LINK_LIBRARY_USING_CLASH_NO_AS_NEEDED "LINKER:--push-state,--no-as-needed" "<LINK_ITEM>"
    "LINKER:--pop-state")
set(CMAKE_LINK_LIBRARY_USING_CLASH_NO_AS_NEEDED_SUPPORTED TRUE)
