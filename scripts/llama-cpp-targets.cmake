# Handed to llama.cpp's configure by scripts/llama-cpp.sh (CMAKE_PROJECT_INCLUDE, so it runs at the first
# project() call). The sdist's setup.py builds `cmake --build .` with no --target, i.e. every program of
# llama.cpp; llmgw runs two. Once the whole tree is configured, every other target leaves the default build.
# The libraries the two link (llama, ggml, common, mtmd, the server's own) are still built as dependencies.
include_guard(GLOBAL)

function(llmgw_only_llmgw_programs)
  set(keep llama-server ggml-rpc-server)
  set(dirs "${CMAKE_SOURCE_DIR}")
  set(excluded 0)
  while(dirs)
    list(POP_FRONT dirs dir)
    get_property(sub DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
    list(APPEND dirs ${sub})
    get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
    foreach(t IN LISTS targets)
      if(NOT t IN_LIST keep)
        set_property(TARGET "${t}" PROPERTY EXCLUDE_FROM_ALL ON)
        math(EXPR excluded "${excluded} + 1")
      endif()
    endforeach()
  endwhile()
  foreach(t IN LISTS keep)
    if(NOT TARGET "${t}")
      message(FATAL_ERROR "llmgw: llama.cpp defines no target ${t}; scripts/llama-cpp-targets.cmake needs the new name")
    endif()
  endforeach()
  message(STATUS "llmgw: default build is ${keep} (${excluded} other targets only as dependencies)")
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL llmgw_only_llmgw_programs)
