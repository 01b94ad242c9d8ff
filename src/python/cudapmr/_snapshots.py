# SPDX-License-Identifier: Apache-2.0
"""Snapshots of a whole stack, and named regions of a HistoryAdaptor."""

import contextlib
import json
import os

from ._cudapmr import HistoryAdaptor, _export_snapshot

_FORMAT_BY_SUFFIX = {".json": "json", ".pickle": "pickle", ".pkl": "pickle"}


def snapshot(resource):
    """The stack from ``resource`` down, now, as a dict in cudapmr's JSON
    format (docs/observability.md): each resource's state, top first; the live
    blocks and events of the topmost HistoryAdaptor (or TrackingAdaptor); its
    annotations."""
    return json.loads(_export_snapshot(resource, "json"))


def dump_snapshot(resource, path, *, format=None):
    """Writes the stack from ``resource`` down to ``path``: ``format`` "json"
    (cudapmr's), "pickle" (PyTorch's, for ``torch.cuda._memory_viz`` and its
    viewer page) or "chrome" (a trace for Perfetto); None takes it from the
    name (``.json``, ``.pickle`` or ``.pkl``)."""
    if format is None:
        suffix = os.path.splitext(os.fspath(path))[1].lower()
        format = _FORMAT_BY_SUFFIX.get(suffix)
        if format is None:
            raise ValueError(f"dump_snapshot: cannot tell the format of {os.fspath(path)!r} from its suffix "
                             f"{suffix!r}; name it .json or .pickle, or pass format='json', 'pickle' or 'chrome'")
    exported = _export_snapshot(resource, format)
    with open(path, "wb") as file:
        file.write(exported)


@contextlib.contextmanager
def _annotate(self, name):
    """A region named ``name`` in the history while the block runs, like
    ``torch.cuda._memory_viz``'s annotations."""
    self.annotate_begin(name)
    try:
        yield self
    finally:
        self.annotate_end(name)


HistoryAdaptor.annotate = _annotate
