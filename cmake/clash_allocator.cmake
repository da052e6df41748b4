# clashd's allocator. CLASH_USES_TCMALLOC: gperftools' tcmalloc_minimal is linked into the server
# executables, when CLASH_TCMALLOC is on (the default) and no sanitizer is enabled, through
# CLASH_SANITIZE or the compiler flags (a sanitizer brings its own allocator). Under glibc's
# malloc, allocation and freeing (malloc, _int_free, malloc_consolidate, _int_malloc) took about a
# fifth of a 256-ray pick through gRPC (README, "The service"); tcmalloc's per-thread caches
# make that cheap.
set(CLASH_USES_TCMALLOC OFF)
if(CLASH_TCMALLOC AND NOT CLASH_SANITIZE AND NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize")
  find_library(CLASH_TCMALLOC_LIBRARY NAMES tcmalloc_minimal)
  if(NOT CLASH_TCMALLOC_LIBRARY)
    message(FATAL_ERROR "CLASH_TCMALLOC is on but libtcmalloc_minimal was not found: install "
                        "libgoogle-perftools-dev (.ci/install-deps.sh) or configure with "
                        "-DCLASH_TCMALLOC=OFF")
  endif()
  set(CLASH_USES_TCMALLOC ON)
endif()

# A link feature that keeps a library nothing references by name (raw push-state/pop-state
# flags would be de-duplicated by CMake across targets, which unbalances them).
set(CMAKE_LINK_LIBRARY_USING_clash_no_as_needed "LINKER:--push-state,--no-as-needed"
    "<LINK_ITEM>" "LINKER:--pop-state")
set(CMAKE_LINK_LIBRARY_USING_clash_no_as_needed_SUPPORTED TRUE)

# clash_link_allocator(target): links the allocator into `target` when CLASH_USES_TCMALLOC.
function(clash_link_allocator target)
  if(CLASH_USES_TCMALLOC)
    target_link_libraries(${target}
                          PRIVATE "$<LINK_LIBRARY:clash_no_as_needed,${CLASH_TCMALLOC_LIBRARY}>")
  endif()
endfunction()
