// SPDX-License-Identifier: Apache-2.0
// The installed public headers that a C++ translation unit without fmt or
// nvcc can include, compiled under a user's -Wall -Wextra -Werror (see
// CMakeLists.txt): a header that warns there breaks such users' builds.
#include <cudapmr/cudapmr.hpp>
#include <cudapmr/interop/cccl.hpp>
#include <cudapmr/interop/dlpack.hpp>
#include <cudapmr/multiprocess/ipc.hpp>
#include <cudapmr/multiprocess/ipc_channel.hpp>
#include <cudapmr/multiprocess/process.hpp>
