# SPDX-License-Identifier: Apache-2.0
"""Hands cudapmr buffers to Python tensor libraries through DLPack, zero copy.

Loads the C ABI of libcudapmr_dlpack_capsule.so (dlpack_capsule.cpp) with
ctypes. A `Buffer` has `__dlpack__` and `__dlpack_device__`, so
`torch.from_dlpack(buffer)` and `cupy.from_dlpack(buffer)` take its memory
without copying:

    capsules = Library("build/apps/examples/libcudapmr_dlpack_capsule.so")
    values = cupy.from_dlpack(Buffer(capsules, "device", 1 << 20))
"""

import ctypes

DEVICE_TYPES = {1: "kDLCPU", 2: "kDLCUDA", 3: "kDLCUDAHost", 13: "kDLCUDAManaged"}

# DLPack's name for a capsule no consumer has taken yet (a consumer renames it "used_dltensor").
_UNUSED_NAME = b"dltensor"

_pythonapi = ctypes.pythonapi
_pythonapi.PyCapsule_New.restype = ctypes.py_object
_pythonapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_pythonapi.PyCapsule_IsValid.restype = ctypes.c_int
_pythonapi.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Library:
    """The C functions of libcudapmr_dlpack_capsule.so."""

    def __init__(self, path):
        lib = ctypes.CDLL(path)
        tensor = ctypes.c_void_p
        signatures = {
            "cudapmr_capsule_make_sequence": (tensor, [ctypes.c_char_p, ctypes.c_int64]),
            "cudapmr_capsule_data": (ctypes.c_void_p, [tensor]),
            "cudapmr_capsule_device_type": (ctypes.c_int, [tensor]),
            "cudapmr_capsule_device_id": (ctypes.c_int, [tensor]),
            "cudapmr_capsule_read": (ctypes.c_int, [tensor, ctypes.c_int64, ctypes.POINTER(ctypes.c_float)]),
            "cudapmr_capsule_write": (ctypes.c_int, [tensor, ctypes.c_int64, ctypes.c_float]),
            "cudapmr_capsule_bytes_in_use": (ctypes.c_int64, [ctypes.c_char_p]),
            "cudapmr_capsule_delete": (None, [tensor]),
            "cudapmr_capsule_last_error": (ctypes.c_char_p, []),
        }
        for name, (restype, argtypes) in signatures.items():
            function = getattr(lib, name)
            function.restype, function.argtypes = restype, argtypes
        self.c = lib

        # A capsule that dies still named "dltensor" was never taken by a
        # consumer, so its tensor is still ours to delete; a consumer renames
        # the capsule and calls the tensor's deleter itself when done.
        @_CAPSULE_DESTRUCTOR
        def destroy_unused(capsule):
            if _pythonapi.PyCapsule_IsValid(capsule, _UNUSED_NAME):
                lib.cudapmr_capsule_delete(_pythonapi.PyCapsule_GetPointer(capsule, _UNUSED_NAME))

        self._destroy_unused = destroy_unused  # lives as long as the library, as capsules may

    def fail(self, what):
        raise RuntimeError(f"{what}: {self.c.cudapmr_capsule_last_error().decode()}")

    def capsule(self, tensor):
        """A "dltensor" PyCapsule that hands `tensor` to whoever takes it."""
        return _pythonapi.PyCapsule_New(tensor, _UNUSED_NAME, ctypes.cast(self._destroy_unused, ctypes.c_void_p))

    def bytes_in_use(self, kind):
        """Bytes the library's pool of `kind` has handed out and not got back."""
        in_use = self.c.cudapmr_capsule_bytes_in_use(kind.encode())
        if in_use < 0:
            self.fail(f"bytes in use of {kind}")
        return in_use


class Buffer:
    """`count` float32 values 0, 1, 2, ... in a cudapmr buffer of `kind`
    ("device", "pinned" or "managed"), to be handed over once through DLPack."""

    def __init__(self, library, kind, count):
        self._library = library
        self._handed_over = False
        self._tensor = library.c.cudapmr_capsule_make_sequence(kind.encode(), count)
        if not self._tensor:
            library.fail(f"a {kind} buffer of {count} floats")
        self.kind = kind
        self.address = library.c.cudapmr_capsule_data(self._tensor)

    def __dlpack_device__(self):
        c = self._library.c
        return (c.cudapmr_capsule_device_type(self._tensor), c.cudapmr_capsule_device_id(self._tensor))

    def __dlpack__(self, stream=None, **_):
        # The memory is ready on every stream when the buffer is made, so the
        # consumer's stream needs no ordering; the legacy capsule suits every
        # max_version a consumer may ask for.
        if self._handed_over:
            raise BufferError("this buffer was handed over through DLPack already")
        self._handed_over = True
        return self._library.capsule(self._tensor)

    # Element access through cudapmr's own view of the tensor, valid while
    # the tensor lives (after a hand-over: while the consumer's array does).
    def read(self, index):
        value = ctypes.c_float()
        if self._library.c.cudapmr_capsule_read(self._tensor, index, ctypes.byref(value)) != 0:
            self._library.fail(f"reading element {index}")
        return value.value

    def write(self, index, value):
        if self._library.c.cudapmr_capsule_write(self._tensor, index, value) != 0:
            self._library.fail(f"writing element {index}")

    def __del__(self):
        if not self._handed_over and self._tensor:
            self._library.c.cudapmr_capsule_delete(self._tensor)
