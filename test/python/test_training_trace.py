# SPDX-License-Identifier: Apache-2.0
"""apps/python/training_trace.py: the log it writes is one that cudapmr's
logging_adaptor would write, and so one that replay reads."""

import importlib.util
from pathlib import Path

import pytest

import cudapmr

_SCRIPT = Path(__file__).resolve().parents[2] / "apps" / "python" / "training_trace.py"


@pytest.fixture(scope="module")
def training_trace():
    spec = importlib.util.spec_from_file_location("training_trace", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_its_header_is_the_logging_adaptors(training_trace, tmp_path):
    path = tmp_path / "adaptor.csv"
    logged = cudapmr.LoggingAdaptor(cudapmr.HostMemoryResource(), str(path))
    logged.flush()
    assert path.read_text().splitlines()[0] == training_trace.CSV_HEADER


def test_it_writes_allocations_and_the_frees_of_what_it_allocated(training_trace, tmp_path):
    out = tmp_path / "trace.csv"
    events = [(0, 0x1000, 4096, 0), (10, 0x7f00, 512, 0x5a), (15, 0x7f00, 0, 0), (20, 0x1000, -4096, 0),
              (30, 0x5000, -256, 0)]  # an empty event, and a free of a block allocated before recording
    assert training_trace.write_log(events, out) == (3, 1)
    assert out.read_text().splitlines() == [
        training_trace.CSV_HEADER,
        "0,0,0,allocate,0x1000,4096,256,0x0,device",
        "1,10,0,allocate,0x7f00,512,256,0x5a,device",
        "2,20,0,deallocate,0x1000,4096,256,0x0,device"]


def test_one_step_on_the_cpu_frees_what_it_allocates_but_the_state(training_trace, tmp_path):
    pytest.importorskip("torch", reason="needs PyTorch")
    events = training_trace.record(1, "cpu")
    written, outstanding = training_trace.write_log(events, tmp_path / "trace.csv")
    parameters = 6  # three weights, three biases
    assert events[:parameters] == [(0, 0x1000 * (index + 1), size, 0) for index, size in
                                   enumerate([4096 * 1024 * 4, 4096 * 4, 4096 * 4096 * 4, 4096 * 4, 1024 * 4096 * 4,
                                              1024 * 4])]
    # What stays after a step: the parameters, their gradients and AdamW's two moments (and its step counts).
    assert written > 100 and outstanding >= 4 * parameters
