# SPDX-License-Identifier: Apache-2.0
"""The per-device current resource, kept alive while it is registered."""

import threading

from . import _cudapmr

# The registry in C++ only refers to a resource; Python keeps it alive here.
_registered = {}
_lock = threading.Lock()


def get_current_device_resource(device_id=None):
    """The resource registered for ``device_id`` (None: the current device);
    until one is set, the device's default resource."""
    return _cudapmr._current_device_resource(device_id)


def set_current_device_resource(resource, device_id=None):
    """Registers ``resource`` for ``device_id`` (None: the current device) and
    returns the one it replaces. The resource stays alive while registered."""
    if not isinstance(resource, _cudapmr.MemoryResource):
        raise TypeError(f"set_current_device_resource needs a cudapmr.MemoryResource, not {type(resource).__name__}")
    with _lock:
        key = device_id if device_id is not None else _cudapmr.current_device()
        previous = _cudapmr._set_current_device_resource(resource, key)
        _registered[key] = resource
    return previous
