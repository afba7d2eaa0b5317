# Compiles SOURCE with CXX (syntax only) and passes when that fails with an error that
# matches EXPECT: a misuse of the API is refused at compile time with a message that names
# the fix. Run as cmake -DCXX=... -DINCLUDE=... -DSOURCE=... -DEXPECT=... [-DFLAGS=...]
# -P expect_error.cmake
separate_arguments(flags UNIX_COMMAND "${FLAGS}")
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only ${flags} -I${INCLUDE} ${SOURCE}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled; it must be refused")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "${SOURCE} was refused without '${EXPECT}':\n${out}")
endif()
