# SPDX-License-Identifier: Apache-2.0
# Runs a program and checks how it ends (CTest cannot check an exit status
# other than zero by itself):
#   cmake -DCOMMAND_LINE="program|arg|arg" -DEXPECTED_RC=2 [-DSTDERR_LINES=1]
#         [-DMATCH=regex] [-DREJECT=regex] -P expect_exit.cmake
# Arguments are separated by "|". MATCH must be found in stderr, REJECT must
# not be found in stdout or stderr; STDERR_LINES is the exact line count of stderr.
string(REPLACE "|" ";" command "${COMMAND_LINE}")
execute_process(COMMAND ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("exit status ${rc}\nstdout:\n${out}\nstderr:\n${err}")
if(NOT rc STREQUAL EXPECTED_RC)
  message(FATAL_ERROR "exit status ${rc}, expected ${EXPECTED_RC}")
endif()
if(DEFINED STDERR_LINES)
  string(REGEX MATCHALL "\n" newlines "${err}")
  list(LENGTH newlines lines)
  if(NOT lines EQUAL STDERR_LINES)
    message(FATAL_ERROR "stderr has ${lines} lines, expected ${STDERR_LINES}")
  endif()
endif()
if(DEFINED MATCH AND NOT err MATCHES "${MATCH}")
  message(FATAL_ERROR "stderr does not match '${MATCH}'")
endif()
if(DEFINED REJECT AND "${out}${err}" MATCHES "${REJECT}")
  message(FATAL_ERROR "the output matches '${REJECT}', which it must not")
endif()
