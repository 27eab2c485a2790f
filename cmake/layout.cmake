# SPDX-License-Identifier: MIT
# The list of every library the project builds, with its object files, for
# tests/check_layout.py (ctest source_layout): one line per library,
# "name|source directory|object;object;...". Included by the top
# CMakeLists.txt after every directory was added, so that a library added
# anywhere is checked without being named here. A library built from
# another's objects (pkv and pkv_static, from pkv_objects) lists none of
# its own, and the script skips it.

function(pkv_list_libraries dir out)
  get_directory_property(targets DIRECTORY ${dir} BUILDSYSTEM_TARGETS)
  set(libraries "")
  foreach(target ${targets})
    get_target_property(type ${target} TYPE)
    if(type MATCHES "^(STATIC|SHARED|MODULE|OBJECT)_LIBRARY$")
      list(APPEND libraries ${target})
    endif()
  endforeach()
  get_directory_property(subdirs DIRECTORY ${dir} SUBDIRECTORIES)
  foreach(sub ${subdirs})
    pkv_list_libraries(${sub} sub_libraries)
    list(APPEND libraries ${sub_libraries})
  endforeach()
  set(${out} ${libraries} PARENT_SCOPE)
endfunction()

pkv_list_libraries(${PROJECT_SOURCE_DIR} pkv_layout_libraries)
set(pkv_layout_lines "")
foreach(library ${pkv_layout_libraries})
  get_target_property(source_dir ${library} SOURCE_DIR)
  string(APPEND pkv_layout_lines
    "${library}|${source_dir}|$<TARGET_OBJECTS:${library}>\n")
endforeach()
file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/layout_libraries.txt
  CONTENT "${pkv_layout_lines}")
