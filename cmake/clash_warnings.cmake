# clash_set_warnings(target): the project's warning set, applied per target.
function(clash_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow
                                           -Wnon-virtual-dtor -Wcast-align -Wunused
                                           -Woverloaded-virtual -Wnull-dereference
                                           -Wimplicit-fallthrough)
  if(CLASH_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
