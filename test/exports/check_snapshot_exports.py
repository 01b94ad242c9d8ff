#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs snapshot_sample and reads back what it wrote: cudapmr's JSON (with
Python's json), PyTorch's snapshot pickle (with pickle, checked the way
torch.cuda._memory_viz and the memory_viz page read it) and the Chrome trace.
Each peak must equal the statistics adaptor's. Exit status 0 when all hold."""
import json
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

from pytorch_snapshot import trace_peak

# snapshot_sample's second phase is named with bytes that are not UTF-8; every
# export must carry the name as Python's "replace" decoding reads it.
DRAIN = b"drain \xc0\xaf\xed\xa0\x80\xe2\x82".decode("utf-8", "replace")


def fail(message):
    print(f"FAIL {message}")
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def read_utf8(path):
    """The file's text; strict, as json.load of a file opened in UTF-8 reads it."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        fail(f"{path.name} is not valid UTF-8: {error}")


def check_json(path, statistics_peak):
    document = json.loads(read_utf8(path))
    check(document["format"] == "cudapmr-memory-snapshot" and document["version"] == 1, "JSON format and version")
    stack = document["stacks"][0]
    names = [resource["name"] for resource in stack["resources"]]
    check(names[:3] == ["statistics_adaptor", "history_adaptor", "caching_resource"], f"JSON resources {names}")
    check(stack["resources"][0]["statistics"]["bytes"]["peak"] == statistics_peak, "JSON statistics peak")
    check(stack["peak_live_bytes"] == statistics_peak,
          f"JSON peak_live_bytes {stack['peak_live_bytes']} != statistics {statistics_peak}")
    check(stack["live_blocks_complete"] and len(stack["live_blocks"]) == 4, "JSON live blocks: 4 of 8 left")
    check(all(block["call_stack"] for block in stack["live_blocks"]), "JSON live blocks carry call stacks")
    actions = {event["action"] for event in stack["events"]}
    check(actions == {"allocate", "free", "free_completed", "out_of_memory"}, f"JSON event actions {actions}")
    marks = [(mark["name"], mark["stage"]) for mark in stack["annotations"]]
    check(marks == [("fill", "begin"), ("fill", "end"), (DRAIN, "begin"), (DRAIN, "end")], f"JSON annotations {marks}")
    check(stack["resources"][2]["cached_bytes"] is not None, "JSON cache's cached bytes")


def check_pickle(path, statistics_peak):
    try:
        data = pickle.loads(path.read_bytes())
    except UnicodeDecodeError as error:
        fail(f"pickle: a string is not valid UTF-8: {error}")
    check(isinstance(data, dict) and "segments" in data and "device_traces" in data, "pickle: segments and device_traces")
    check(isinstance(data["device_traces"], list) and len(data["device_traces"]) >= 1, "pickle: one trace per device")
    # torch.cuda._memory_viz.segsum's accounting, per segment.
    for segment in data["segments"]:
        for key in ("device", "address", "total_size", "allocated_size", "stream", "segment_type", "blocks"):
            check(key in segment, f"pickle segment lacks {key}")
        allocated = free_internal = free_external = 0
        for block in segment["blocks"]:
            check({"size", "state", "requested_size", "frames"} <= block.keys(), f"pickle block keys {block.keys()}")
            if block["state"] == "active_allocated":
                allocated += block["requested_size"]
                free_internal += block["size"] - block["requested_size"]
            else:
                free_external += block["size"]
        check(allocated + free_internal + free_external == segment["total_size"], "pickle segment sizes add up")
    check(len(data["segments"]) == 4, f"pickle: {len(data['segments'])} segments, 4 live blocks expected")
    trace = next(t for t in data["device_traces"] if t)
    for entry in trace:
        check({"action", "size", "stream", "time_us", "frames"} <= entry.keys(), f"pickle trace entry {entry}")
        check(("device_free" if entry["action"] == "oom" else "addr") in entry, f"pickle trace entry {entry}")
        for frame in entry["frames"]:
            check({"filename", "line", "name"} <= frame.keys(), f"pickle frame {frame}")
    check(any(entry["action"] == "oom" for entry in trace), "pickle: the refusal is an oom entry")
    check(any(entry["frames"] for entry in trace if entry["action"] == "alloc"), "pickle: allocations carry frames")
    times = [entry["time_us"] for entry in trace]
    check(times == sorted(times), "pickle: trace in time order")
    peak, current = trace_peak(trace)
    check(peak == statistics_peak, f"pickle peak {peak} != statistics {statistics_peak}")
    check(current == sum(segment["allocated_size"] for segment in data["segments"]),
          "pickle: what the trace leaves live is what the segments hold")
    annotations = data.get("external_annotations", [])
    check(len(annotations) == 4 and annotations[0]["stage"] == "START", "pickle annotations")
    check([mark["name"] for mark in annotations] == ["fill", "fill", DRAIN, DRAIN], f"pickle annotations {annotations}")


def check_chrome_trace(path, statistics_peak):
    document = json.loads(read_utf8(path))
    events = document["traceEvents"]
    counters = [event for event in events if event["ph"] == "C"]
    check(counters, "Chrome trace: counter events")
    for event in counters:
        check({"name", "pid", "ts", "args"} <= event.keys(), f"Chrome trace counter {event}")
    peak = max(event["args"]["bytes"] for event in counters if event["name"] == "live bytes")
    check(peak == statistics_peak, f"Chrome trace peak {peak} != statistics {statistics_peak}")
    check(any(event["name"].startswith("live bytes on stream") for event in counters), "Chrome trace: per-stream tracks")
    slices = [event["ph"] for event in events if event["ph"] in ("B", "E")]
    check(slices == ["B", "E", "B", "E"], f"Chrome trace annotations {slices}")
    names = [event["name"] for event in events if event["ph"] in ("B", "E")]
    check(names == ["fill", "fill", DRAIN, DRAIN], f"Chrome trace annotation names {names}")
    check(any(event["ph"] == "i" and event["name"] == "out of memory" for event in events), "Chrome trace: the refusal")


def main():
    sample = sys.argv[1]
    with tempfile.TemporaryDirectory() as folder:
        run = subprocess.run([sample, folder], capture_output=True, text=True, check=True)
        lines = dict(line.split(": ", 1) for line in run.stdout.splitlines())
        statistics_peak = int(lines["statistics peak"].split()[0])
        check(lines["refused with a report"] == "1", "the refusal carried a report")
        check_json(Path(folder) / "snapshot.json", statistics_peak)
        check_pickle(Path(folder) / "snapshot.pickle", statistics_peak)
        check_chrome_trace(Path(folder) / "trace.json", statistics_peak)
    print(f"PASS every export reads back; peak {statistics_peak} bytes everywhere")


if __name__ == "__main__":
    main()
