# interop.safetensors_python: tessera writes the fixture, the Python safetensors package
# checks it. Fails (rather than skips) when the Python environment is missing.
if(NOT EXISTS "${PYTHON}")
  message(FATAL_ERROR "No Python with safetensors at ${PYTHON}: run scripts/python-env "
                      "(scripts/test does), or set -DTESSERA_INTEROP_PYTHON=/path/to/python")
endif()
execute_process(COMMAND "${WRITER}" "${OUT}" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "write_safetensors_fixture failed (${rc}): ${out}${err}")
endif()
execute_process(COMMAND "${PYTHON}" "${SCRIPT}" check "${OUT}" RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the safetensors package rejected tessera's file (${rc})")
endif()
