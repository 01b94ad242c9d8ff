# SPDX-License-Identifier: Apache-2.0
"""Hands cudapmr buffers to NumPy, CuPy and PyTorch through DLPack and checks
zero copy: the same address, the same values, writes seen both ways, and the
memory given back when the consumer lets go.

    python3 test/gpu_checks/dlpack_check.py [--host] build/apps/examples/libcudapmr_dlpack_capsule.so

With --host (no GPU needed) only NumPy and pageable memory are checked; exit
status 77 then means NumPy is missing. Device memory must be taken by CuPy and
PyTorch, and pageable memory by NumPy and PyTorch. A library may refuse other
kinds (PyTorch refuses kDLCUDAHost and kDLCUDAManaged): that is reported, not
failed, provided the refused buffer is still given back, as DLPack asks: a
capsule destroyed still named "dltensor" deletes its tensor. The "refuser"
consumer, which takes the capsule and refuses it, checks that on every kind
(it must be REFUSED, never FAIL). Exit status: 0 when every check passed, 1 otherwise.
"""

import gc
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "apps", "examples", "dlpack_capsule"))
import cudapmr_capsule  # noqa: E402

COUNT = 1 << 20
REQUIRED = {("cupy", "device"), ("torch", "device"), ("torch", "pageable"), ("numpy", "pageable")}


class Consumer:
    """How one library takes a DLPack buffer, and how to look at what it made."""

    def __init__(self, name, from_dlpack, address_of, to_numpy, synchronize):
        self.name, self.from_dlpack, self.address_of = name, from_dlpack, address_of
        self.to_numpy, self.synchronize = to_numpy, synchronize


def consumers(host_only):
    import numpy

    found = [Consumer("numpy", numpy.from_dlpack, lambda array: array.ctypes.data, numpy.asarray, lambda: None),
             Consumer("refuser", refuse_after_taking_capsule, None, None, lambda: None)]
    if host_only:
        return found
    import cupy
    import torch

    found.append(Consumer("cupy", cupy.from_dlpack, lambda array: array.data.ptr, cupy.asnumpy,
                          lambda: cupy.cuda.Device().synchronize()))
    found.append(Consumer("torch", torch.from_dlpack, lambda tensor: tensor.data_ptr(),
                          lambda tensor: tensor.cpu().numpy(), torch.cuda.synchronize))
    return found


def take(consumer, buffer):
    """(the consumer's array, None), or (None, why it refused the buffer)."""
    try:
        return consumer.from_dlpack(buffer), None
    except Exception as error:
        return None, f"{type(error).__name__}: {error}"


def refuse_after_taking_capsule(buffer):
    """A consumer that asks for the capsule and then refuses it, unconsumed,
    from a Python frame, as torch.from_dlpack does for kDLCUDAHost."""
    capsule = buffer.__dlpack__()
    raise BufferError(f"refusing the capsule {capsule!r} (a stand-in for a library that does)")


def check(library, consumer, kind):
    """Returns (verdict, detail): verdict is PASS, REFUSED or FAIL."""
    import numpy

    buffer = cudapmr_capsule.Buffer(library, kind, COUNT)
    expected_address = buffer.address
    array, refusal = take(consumer, buffer)
    if refusal is not None:  # a library that does not take this kind of memory
        # Counted only now that the exception is gone: its traceback kept the
        # consumer's frames, and with them the capsule (torch.from_dlpack is Python).
        del buffer
        gc.collect()
        leaked = library.bytes_in_use(kind)
        if (consumer.name, kind) in REQUIRED:
            return "FAIL", f"refused: {refusal}"
        if leaked != 0:
            return "FAIL", f"refused ({refusal}), and {leaked} bytes were not given back"
        return "REFUSED", f"{refusal}; the buffer was given back"

    problems, notes = [], []
    if consumer.address_of(array) != expected_address:
        problems.append(f"address {consumer.address_of(array):#x}, not cudapmr's {expected_address:#x}: a copy")
    if not numpy.array_equal(consumer.to_numpy(array), numpy.arange(COUNT, dtype=numpy.float32)):
        problems.append("values differ from 0, 1, 2, ...")
    if getattr(getattr(array, "flags", None), "writeable", True):
        array[5] = 42.0
        consumer.synchronize()
        if buffer.read(5) != 42.0:
            problems.append(f"{consumer.name}'s write to element 5 not seen by cudapmr (read {buffer.read(5)})")
    else:
        notes.append(f"{consumer.name} made a read-only array, so only cudapmr writes")
    buffer.write(7, -3.0)
    if float(array[7]) != -3.0:
        problems.append(f"cudapmr's write to element 7 not seen by {consumer.name} (read {float(array[7])})")
    in_use = library.bytes_in_use(kind)
    if in_use < COUNT * 4:
        problems.append(f"only {in_use} bytes in use while {consumer.name} holds the buffer")
    del array, buffer
    gc.collect()
    consumer.synchronize()
    leaked = library.bytes_in_use(kind)
    if leaked != 0:
        problems.append(f"{leaked} bytes not given back after {consumer.name} let go: the deleter did not run")
    if problems:
        return "FAIL", "; ".join(problems)
    detail = f"zero copy at {expected_address:#x}, values and writes agree, memory given back"
    return "PASS", "; ".join([detail] + notes)


def main(arguments):
    host_only = "--host" in arguments
    paths = [argument for argument in arguments if argument != "--host"]
    if len(paths) != 1:
        print(__doc__)
        return 1
    try:
        found = consumers(host_only)
    except ImportError as error:
        print(f"dlpack_check: {error}")
        return 77 if host_only else 1
    library = cudapmr_capsule.Library(paths[0])
    kinds = ["pageable"] if host_only else ["device", "pinned", "managed", "pageable"]
    results = []
    for consumer in found:
        for kind in kinds:
            try:
                verdict, detail = check(library, consumer, kind)
            except Exception as error:
                verdict, detail = "FAIL", f"{type(error).__name__}: {error}"
            results.append(verdict)
            print(f"{verdict:8} {consumer.name:7} {kind:8} {detail}", flush=True)
    failed = results.count("FAIL")
    print(f"dlpack_check: {results.count('PASS')} passed, {failed} failed, "
          f"{results.count('REFUSED')} refused by their library")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
