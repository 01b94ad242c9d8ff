# SPDX-License-Identifier: Apache-2.0
"""Stops a thread at its first touch of a memory range (Linux userfaultfd),
so that a test runs code at a known point inside a call that released the
GIL: a copy or fill waits on its first page while another thread acts."""

import ctypes
import mmap
import os
import platform
import struct
import threading

_SYSCALL_NUMBERS = {"x86_64": 323, "aarch64": 282}
_USER_MODE_ONLY = 1  # faults from user space only: allowed without privileges
_API = 0xAA
_REGISTER_MODE_MISSING = 1
_EVENT_PAGEFAULT = 0x12
_MESSAGE_BYTES = 32

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]


class Unavailable(OSError):
    """The kernel refuses userfaultfd here."""


def _request(direction, number, size):
    return (direction << 30) | (size << 16) | (_API << 8) | number


_IOCTL_API = _request(3, 0x3F, 24)
_IOCTL_REGISTER = _request(3, 0x00, 32)
_IOCTL_WAKE = _request(2, 0x02, 16)
_IOCTL_ZEROPAGE = _request(3, 0x04, 32)


def _ioctl(fd, request, fields):
    """Runs `request` on `fd` with a struct of 64-bit `fields`; the errno on failure, else 0."""
    argument = (ctypes.c_uint64 * len(fields))(*fields)
    if _libc.ioctl(fd, request, ctypes.addressof(argument)) != 0:
        return ctypes.get_errno()
    return 0


def _open():
    number = _SYSCALL_NUMBERS.get(platform.machine())
    if number is None:
        raise Unavailable(f"userfaultfd: no syscall number known for {platform.machine()}")
    for flags in (os.O_CLOEXEC | _USER_MODE_ONLY, os.O_CLOEXEC):  # kernels before 5.11 know no user-mode flag
        fd = _libc.syscall(number, flags)
        if fd >= 0:
            break
    else:
        raise Unavailable(ctypes.get_errno(), "userfaultfd refused")
    error = _ioctl(fd, _IOCTL_API, [_API, 0, 0])
    if error:
        os.close(fd)
        raise Unavailable(error, "UFFDIO_API refused")
    return fd


class PauseOnTouch:
    """Registers the whole pages inside ``[address, address + length)``, none
    of them touched yet. The first thread to touch one waits while
    ``on_touch()`` runs on a helper thread; then every page reads as zeros
    and the thread goes on. If ``on_touch`` unmapped the pages, the thread is
    woken to its fault (a crash), as it would be on freed memory.
    Raises Unavailable where the kernel refuses userfaultfd."""

    def __init__(self, address, length, on_touch):
        page = mmap.PAGESIZE
        self.start = (address + page - 1) // page * page
        end = (address + length) // page * page
        if end <= self.start:
            raise ValueError(f"[{address:#x}, +{length}) holds no whole page")
        self.length = end - self.start
        self._on_touch = on_touch
        self.touched = threading.Event()
        self.error = None
        self._fd = _open()
        error = _ioctl(self._fd, _IOCTL_REGISTER, [self.start, self.length, _REGISTER_MODE_MISSING, 0])
        if error:
            os.close(self._fd)
            raise Unavailable(error, f"UFFDIO_REGISTER of {self.length} bytes at {self.start:#x} refused")
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        message = os.read(self._fd, _MESSAGE_BYTES)  # blocks without the GIL
        try:
            if message[0] != _EVENT_PAGEFAULT:
                raise RuntimeError(f"userfaultfd: event {message[0]:#x}, not a page fault")
            address = struct.unpack_from("Q", message, 16)[0]
            if not self.start <= address < self.start + self.length:
                raise RuntimeError(f"userfaultfd: fault at {address:#x} outside the range")
            self.touched.set()
            self._on_touch()
        except BaseException as failure:  # reported by join(); the toucher must still go on
            self.error = failure
        finally:
            if _ioctl(self._fd, _IOCTL_ZEROPAGE, [self.start, self.length, 0, 0]):
                _ioctl(self._fd, _IOCTL_WAKE, [self.start, self.length])

    def join(self):
        """Waits for the helper thread; raises what ``on_touch`` raised."""
        self._thread.join()
        os.close(self._fd)
        if self.error is not None:
            raise self.error


class Region:
    """Anonymous private memory no one has touched, with the buffer protocol."""

    def __init__(self, length):
        self.length = length
        self._map = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.view = (ctypes.c_char * length).from_buffer(self._map)
        self.address = ctypes.addressof(self.view)
