# clash_set_warnings(target): the project's warning set, applied per target.
function(clash_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
                                           -Wnon-virtual-dtor -Wcast-align -Wunused
                                           -Woverloaded-virtual -Wnull-dereference
                                           -Wimplicit-fallthrough)
  if(CLASH_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
    # GCC 12 (Debian 12's) reports -Wrestrict inside libstdc++'s inlined std::string code at
    # -O2/-O3 where there is no overlap (GCC bug 105329): still shown, but not an error there.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
       AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
      target_compile_options(${target} PRIVATE -Wno-error=restrict)
    endif()
  endif()
endfunction()
