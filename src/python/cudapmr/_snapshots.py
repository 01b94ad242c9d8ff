# SPDX-License-Identifier: Apache-2.0
"""Snapshots of whole stacks, and named regions of a HistoryAdaptor."""

import contextlib
import json
import os

from ._cudapmr import HistoryAdaptor, MemoryResource, _export_snapshot

_FORMATS = ("json", "pickle", "chrome")


def _stacks(resources, operation):
    if isinstance(resources, MemoryResource):
        return [resources]
    try:
        stacks = list(resources)
    except TypeError:
        raise TypeError(f"{operation}: expected a MemoryResource or a list of them; got an object of type "
                        f"{type(resources).__name__}") from None
    for each in stacks:
        if not isinstance(each, MemoryResource):
            raise TypeError(f"{operation}: expected a MemoryResource or a list of them; the list holds an object of "
                            f"type {type(each).__name__}")
    return stacks


def _format_of(path):
    name = os.fsdecode(path).lower()
    if name.endswith(".trace.json"):
        return "chrome"
    for suffix, format in ((".json", "json"), (".pickle", "pickle"), (".pkl", "pickle")):
        if name.endswith(suffix):
            return format
    raise ValueError(f"dump_snapshot: cannot tell the format of {os.fsdecode(path)!r} from its name; end it in "
                     f".json, .trace.json or .pickle, or pass format= one of {', '.join(map(repr, _FORMATS))}")


def snapshot(resources):
    """The stack from a resource down (or from each of a list of resources),
    now, as a dict in cudapmr's JSON format (docs/observability.md): each
    resource's state, top first; the live blocks and events of the topmost
    HistoryAdaptor (or TrackingAdaptor); its annotations."""
    return json.loads(_export_snapshot(_stacks(resources, "snapshot"), "json"))


def dump_snapshot(resources, path, *, format=None):
    """Writes the stack from a resource down (or from each of a list of
    resources) to ``path``: ``format`` "json" (cudapmr's), "pickle" (PyTorch's,
    for ``torch.cuda._memory_viz`` and its viewer page: one trace per device) or
    "chrome" (a trace for Perfetto); None takes it from the name (``.json``,
    ``.trace.json``: chrome, ``.pickle``, ``.pkl``). A refused format or
    resource writes nothing."""
    format = _format_of(path) if format is None else str(format).lower()
    exported = _export_snapshot(_stacks(resources, "dump_snapshot"), format)
    with open(path, "wb") as file:
        file.write(exported)


@contextlib.contextmanager
def _annotate(self, name):
    """A region named ``name`` in the history while the block runs, like
    ``torch.cuda.memory``'s annotations."""
    self.annotate_begin(name)
    try:
        yield self
    finally:
        self.annotate_end(name)


HistoryAdaptor.annotate = _annotate
