# Installs a built tessera into a fresh prefix, builds tests/install/consumer against it with
# find_package(tessera), runs the consumer and checks what it prints. Run as
#   cmake -DBUILD_DIR=<tessera build> -DWORK_DIR=<scratch> -DSOURCE_DIR=<consumer source>
#         [-DCHECK_TOOL=ON] [-DGENERATOR=Ninja] [-DCXX_COMPILER=...] [-DCXX_FLAGS=...] -P install_test.cmake
foreach(var BUILD_DIR WORK_DIR SOURCE_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "install_test.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " command)
    message(FATAL_ERROR "install test: '${command}' failed (${rc}):\n${out}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/consumer-build)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
set(expected include/tessera/tessera.h)
if(CHECK_TOOL)
  list(APPEND expected bin/tessera)
endif()
foreach(file ${expected})
  if(NOT EXISTS ${prefix}/${file})
    message(FATAL_ERROR "install test: ${prefix}/${file} was not installed")
  endif()
endforeach()

set(configure_args -S ${SOURCE_DIR} -B ${consumer_build} -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_BUILD_TYPE=Release)
if(GENERATOR)
  list(APPEND configure_args -G ${GENERATOR})
endif()
if(CXX_COMPILER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
if(CXX_FLAGS)
  # A sanitized tessera needs a sanitized consumer (its runtime must come first).
  list(APPEND configure_args "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
       "-DCMAKE_EXE_LINKER_FLAGS=${CXX_FLAGS}")
endif()
run(${CMAKE_COMMAND} ${configure_args})
run(${CMAKE_COMMAND} --build ${consumer_build})

run(${consumer_build}/consumer)
message("${out}")
if(NOT out MATCHES "consumer ok")
  message(FATAL_ERROR "install test: the consumer did not print 'consumer ok'")
endif()

run(${consumer_build}/plot_consumer ${WORK_DIR}/chart.svg)
if(NOT out MATCHES "plot consumer ok")
  message(FATAL_ERROR "install test: the plot consumer did not print 'plot consumer ok':\n${out}")
endif()

# The core library draws no charts: neither it nor a program linking only it loads Cairo or
# X11 (the libraries ldd lists, its own dependencies' included). The plot consumer does load
# Cairo, which shows that the check sees it.
set(drawing_libraries "lib(cairo|X11|xcb|pixman)[^ ]*\\.so")
run(ldd ${consumer_build}/consumer)
if(out MATCHES "${drawing_libraries}")
  message(FATAL_ERROR "install test: a program linking only tessera::tessera loads "
                      "'${CMAKE_MATCH_0}':\n${out}")
endif()
file(GLOB core_library ${prefix}/lib*/libtessera.so)
if(NOT core_library)
  message(FATAL_ERROR "install test: no libtessera.so under ${prefix}")
endif()
run(readelf -d ${core_library})
if(out MATCHES "NEEDED[^\n]*${drawing_libraries}")
  message(FATAL_ERROR "install test: ${core_library} needs '${CMAKE_MATCH_0}':\n${out}")
endif()
run(ldd ${consumer_build}/plot_consumer)
if(NOT out MATCHES "libcairo\\.so")
  message(FATAL_ERROR "install test: the plot consumer does not load Cairo, so the check "
                      "above cannot tell:\n${out}")
endif()
message("the core library loads no Cairo or X11; tessera::plot does")

# The installed tool runs from the prefix too (it finds libtessera through its RPATH).
if(NOT CHECK_TOOL)
  return()
endif()
run(${prefix}/bin/tessera --version)
if(NOT out MATCHES "tessera ")
  message(FATAL_ERROR "install test: installed 'tessera --version' printed: ${out}")
endif()
message("installed tool: ${out}")
