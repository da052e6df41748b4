# clash_enable_sanitizers(target): applies CLASH_SANITIZE (e.g. "address;undefined").
function(clash_enable_sanitizers target)
  if(CLASH_SANITIZE)
    list(JOIN CLASH_SANITIZE "," _list)
    target_compile_options(${target} PRIVATE -fsanitize=${_list} -fno-omit-frame-pointer
                                             -fno-sanitize-recover=all)
    target_link_options(${target} PRIVATE -fsanitize=${_list})
  endif()
endfunction()
