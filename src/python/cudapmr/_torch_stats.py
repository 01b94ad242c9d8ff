# SPDX-License-Identifier: Apache-2.0
"""What ``cudapmr.torch`` answers in PyTorch's place, without importing
PyTorch: the statistics under ``torch.cuda.memory_stats``' keys and the
memory snapshot in ``torch.cuda.memory._snapshot()``'s format, from the
bridge's own counts and history and the registered resource's ``state()``.
PyTorch's own statistics, snapshot and history calls raise while a
pluggable allocator is its current one."""

import pickle as _pickle
import sys as _sys

from . import _cudapmr

# _record_memory_history's arguments PyTorch accepts.
_ENABLED = (None, "state", "all")  # and the legacy bools
_CONTEXTS = (None, "state", "alloc", "all")
_STACKS = ("python", "cpp", "all")


def _device(device):
    """A device ordinal from what PyTorch's calls take: None (the current
    device), an int, a ``torch.device`` or a string such as ``"cuda:1"``."""
    if device is None:
        return _cudapmr.current_device()
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        if kind != "cuda" or (index and not index.isdigit()):
            raise ValueError(f"device {device!r}: expected 'cuda' or 'cuda:N'")
        return int(index) if index else _cudapmr.current_device()
    if hasattr(device, "type") and hasattr(device, "index"):  # torch.device
        if device.type != "cuda":
            raise ValueError(f"device {device}: expected a CUDA device")
        return device.index if device.index is not None else _cudapmr.current_device()
    if isinstance(device, bool) or int(device) < 0:
        raise ValueError(f"device {device!r}: expected a device ordinal (0 or more)")
    return int(device)


def _resource_state(device):
    """The state of the resource registered for ``device``, or {} where none is."""
    resource = _cudapmr._torch_resource(device)
    return resource.state() if resource is not None else {}


def memory_stats(device=None):
    """``torch.cuda.memory_stats``' keys that the bridge and the registered
    resource answer for ``device`` (default: the current one).

    - ``allocated_bytes.all.*``, ``allocation.all.*``: the tensors' blocks,
      in bytes and in blocks: ``current``, ``peak``, and since the start or
      the last ``reset_accumulated_memory_stats`` ``allocated`` and ``freed``;
    - ``active_bytes.all.*``, ``active.all.*``, ``requested_bytes.all.*``:
      the same figures (a block is active from its allocation to its free, and
      the bridge is asked for the bytes a tensor requested, unrounded);
    - ``reserved_bytes.all.current``/``.peak``: what the resource holds from
      the device, where it says;
    - ``num_ooms``: refused allocations;
    - cudapmr's own counts under ``cudapmr.*``."""
    device = _device(device)
    bridge = _cudapmr._torch_bridge_state(device)
    stats = {}
    for name in ("allocated_bytes", "active_bytes", "requested_bytes"):
        stats[f"{name}.all.current"] = bridge["bytes"]
        stats[f"{name}.all.peak"] = bridge["peak_bytes"]
        stats[f"{name}.all.allocated"] = bridge["bytes_allocated"]
        stats[f"{name}.all.freed"] = bridge["bytes_freed"]
    for name in ("allocation", "active"):
        stats[f"{name}.all.current"] = bridge["blocks"]
        stats[f"{name}.all.peak"] = bridge["peak_blocks"]
        stats[f"{name}.all.allocated"] = bridge["allocations"]
        stats[f"{name}.all.freed"] = bridge["frees"]
    stats["num_ooms"] = bridge["refused_allocations"]
    state = _resource_state(device)
    if state.get("reserved_bytes") is not None:
        stats["reserved_bytes.all.current"] = state["reserved_bytes"]
    if state.get("peak_reserved_bytes") is not None:
        stats["reserved_bytes.all.peak"] = state["peak_reserved_bytes"]
    stats["cudapmr.blocks_used_on_other_streams"] = bridge["blocks_used_on_other_streams"]
    stats["cudapmr.frees_after_other_streams"] = bridge["frees_after_other_streams"]
    stats["cudapmr.empty_cache_calls"] = bridge["empty_cache_calls"]
    return dict(sorted(stats.items()))


def memory_allocated(device=None):
    """Bytes the tensors of ``device`` hold through cudapmr (``torch.cuda.memory_allocated``)."""
    return _cudapmr._torch_bridge_state(_device(device))["bytes"]


def max_memory_allocated(device=None):
    """The most ``memory_allocated`` was since the start or the last ``reset_peak_memory_stats``."""
    return _cudapmr._torch_bridge_state(_device(device))["peak_bytes"]


def memory_reserved(device=None):
    """Bytes the registered resource holds from ``device`` (``torch.cuda.memory_reserved``); 0 where it cannot say."""
    return _resource_state(_device(device)).get("reserved_bytes") or 0


def max_memory_reserved(device=None):
    """The most the registered resource held from ``device``; 0 where it cannot say."""
    return _resource_state(_device(device)).get("peak_reserved_bytes") or 0


def reset_peak_memory_stats(device=None):
    """Starts the peaks of the bytes and blocks allocated again from what is allocated now."""
    _cudapmr._torch_reset_peak(_device(device))


def reset_accumulated_memory_stats(device=None):
    """Sets the ``allocated`` and ``freed`` counts and ``num_ooms`` back to 0."""
    _cudapmr._torch_reset_accumulated(_device(device))


def memory_fraction(device=None):
    """The fraction set by ``torch.cuda.set_per_process_memory_fraction`` (1.0 where none was)."""
    return _cudapmr._torch_bridge_state(_device(device))["memory_fraction"]


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=_sys.maxsize, device=None,
                           clear_history=False, compile_context=False, global_record_annotations=False, *,
                           trace_alloc_max_entries=None, trace_alloc_record_context=False):
    """``torch.cuda.memory._record_memory_history`` for the bridge: from now
    on its allocations, frees and refusals (every device's, in one history)
    go into what snapshots show in ``device_traces``: the last
    ``max_entries`` of them, an allocation making two entries there
    (``segment_alloc``, ``alloc``), a free three (``free_requested``,
    ``free_completed``, ``segment_free``, all at the free; a free after
    ``record_stream`` completes later on the GPU) and a refusal one (``oom``,
    with the device's free memory). ``enabled`` None or "state" turns it off
    and drops what was recorded (snapshots still list the live blocks);
    ``clear_history`` drops it now. PyTorch's older form, ``enabled`` a bool
    with ``trace_alloc_max_entries``, is taken too. ``context``, ``stacks``,
    ``device``, ``compile_context``, ``global_record_annotations`` and
    ``trace_alloc_record_context`` are taken for PyTorch's signature: the
    entries carry no call stacks (PyTorch gathers them inside its own
    allocator, which a pluggable one bypasses), and their ``time_us`` is
    steady-clock time, not the wall clock's."""
    if isinstance(enabled, bool):  # the legacy signature
        if trace_alloc_max_entries is not None:
            max_entries = trace_alloc_max_entries
        enabled = "all" if enabled else None
    elif not (enabled is None or (isinstance(enabled, str) and enabled in _ENABLED)):
        raise ValueError(f"enabled={enabled!r}: expected None, 'state' or 'all' (or a bool)")
    if context not in _CONTEXTS:
        raise ValueError(f"context={context!r}: expected one of {_CONTEXTS}")
    if stacks not in _STACKS:
        raise ValueError(f"stacks={stacks!r}: expected one of {_STACKS}")
    if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
        raise ValueError(f"max_entries={max_entries!r}: expected a positive int")
    _cudapmr._torch_record_history(min(max_entries, _sys.maxsize) if enabled == "all" else 0, bool(clear_history))


def _snapshot(device=None):
    """``torch.cuda.memory._snapshot()`` for the bridge: a dict with
    ``segments`` (each tensor's block a segment of its own, in state
    ``active_allocated``), ``device_traces`` (per device, the history that
    ``_record_memory_history`` keeps, as ``alloc``, ``free_requested``,
    ``free_completed``, ``segment_alloc``, ``segment_free`` and ``oom``
    entries) and ``external_annotations``: the file format PyTorch's viewer
    (``python -m torch.cuda._memory_viz``, the memory_viz page) reads. Every
    device's by default (those with a registered resource, blocks or
    history), or ``device``'s alone."""
    return _pickle.loads(_cudapmr._torch_snapshot(-1 if device is None else _device(device)))


def memory_snapshot():
    """``torch.cuda.memory_snapshot()`` for the bridge: the segments of ``_snapshot()``."""
    return _snapshot()["segments"]


def _dump_snapshot(filename="dump_snapshot.pickle"):
    """``torch.cuda.memory._dump_snapshot`` for the bridge: ``_snapshot()``
    pickled to ``filename``, for PyTorch's viewer."""
    data = _cudapmr._torch_snapshot(-1)
    with open(filename, "wb") as file:
        file.write(data)


# The same without PyTorch's leading underscores.
record_memory_history = _record_memory_history
snapshot = _snapshot
dump_snapshot = _dump_snapshot
