#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""memviz: a cudapmr memory snapshot (the JSON that --snapshot FILE.json and
cudapmr::to_json write) or a logging_adaptor log (CSV) as one self-contained
HTML page: live bytes over time per resource and per stream (where it used more than
one), each peak marked, every event's details on hover, annotated regions shaded, zoom and a
range slider. Everything is in the file (plotly.js included): it opens with
no network and no server.

Usage: memviz.py INPUT [-o PAGE.html] [--title TITLE]
Needs plotly (Debian: python3-plotly)."""
import argparse
import csv
import json
import sys
from pathlib import Path

import plotly.graph_objects as go

LOG_ACTIONS = {"allocate": "allocate", "deallocate": "free", "allocate_failed": "out_of_memory"}


def human(size):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"


def read_stacks(path):
    """[(label, events, annotations)] from a JSON snapshot or a CSV log."""
    text = Path(path).read_text()
    if text.lstrip().startswith("{"):
        document = json.loads(text)
        if document.get("format") != "cudapmr-memory-snapshot":
            sys.exit(f"memviz: {path}: not a cudapmr memory snapshot (format {document.get('format')!r})")
        stacks = []
        for index, stack in enumerate(document["stacks"], 1):
            names = [resource["name"] for resource in stack["resources"]]
            label = f"{index}: {names[-1]}" if names else f"stack {index}"
            stacks.append((label, stack["events"], stack["annotations"]))
        return stacks
    rows = list(csv.DictReader(text.splitlines()))
    if not rows or "action" not in rows[0]:
        sys.exit(f"memviz: {path}: neither a cudapmr JSON snapshot nor a logging_adaptor log")
    events = [{"action": LOG_ACTIONS[row["action"]], "sequence": int(row["sequence"]),
               "time_ns": int(row["time_ns"]), "thread": int(row["thread"]), "address": int(row["pointer"], 16),
               "bytes": int(row["bytes"]), "stream": int(row["stream"], 16)} for row in rows]
    events.sort(key=lambda event: event["sequence"])
    return [(f"log: {rows[0]['kind']} memory", events, [])]


def timeline(events, start_ns):
    """Per-event points of live bytes, overall and per stream, and the peak."""
    live = {}
    total = {"t": [], "y": [], "text": []}
    streams = {}
    current = 0
    by_stream = {}
    peak = (0, None)
    failures = {"t": [], "y": [], "text": []}
    for event in events:
        t = (event["time_ns"] - start_ns) / 1e6
        action = event["action"]
        if action == "allocate":
            live[event["address"]] = (event["bytes"], event["stream"])
            stream = event["stream"]
            current += event["bytes"]
        elif action == "free" and event["address"] in live:
            size, stream = live.pop(event["address"])
            current -= size
        elif action == "out_of_memory":
            failures["t"].append(t)
            failures["y"].append(current)
            failures["text"].append(f"refused {human(event['bytes'])} ({event['bytes']} bytes) "
                                    f"on stream {event['stream']:#x}, thread {event['thread']}")
            continue
        else:
            continue
        size = event["bytes"] if action == "allocate" else size
        by_stream[stream] = by_stream.get(stream, 0) + (size if action == "allocate" else -size)
        detail = (f"{action} {human(size)} ({size} bytes) at {event['address']:#x}<br>stream {stream:#x}, "
                  f"thread {event['thread']}, event #{event['sequence']}<br>live {human(current)}")
        total["t"].append(t)
        total["y"].append(current)
        total["text"].append(detail)
        points = streams.setdefault(stream, {"t": [], "y": [], "text": []})
        points["t"].append(t)
        points["y"].append(by_stream[stream])
        points["text"].append(detail)
        if current > peak[0]:
            peak = (current, t)
    return total, streams, peak, failures


def build_figure(stacks, title):
    times = [event["time_ns"] for _, events, _ in stacks for event in events]
    times += [mark["time_ns"] for _, _, marks in stacks for mark in marks]
    start_ns = min(times) if times else 0
    figure = go.Figure()
    for label, events, marks in stacks:
        total, streams, (peak_bytes, peak_t), failures = timeline(events, start_ns)
        figure.add_trace(go.Scatter(x=total["t"], y=total["y"], text=total["text"], hoverinfo="text+x",
                                    mode="lines", line_shape="hv", name=f"{label}: all streams", legendgroup=label))
        for stream, points in sorted(streams.items()) if len(streams) > 1 else []:
            figure.add_trace(go.Scatter(x=points["t"], y=points["y"], text=points["text"], hoverinfo="text+x",
                                        mode="lines", line_shape="hv", line={"dash": "dot", "width": 1},
                                        name=f"{label}: stream {stream:#x}", legendgroup=label,
                                        visible=True if len(streams) <= 8 else "legendonly"))
        if peak_t is not None:
            figure.add_trace(go.Scatter(x=[peak_t], y=[peak_bytes], mode="markers+text",
                                        marker={"symbol": "star", "size": 14, "color": "crimson"},
                                        text=[f"peak {human(peak_bytes)}"], textposition="top center",
                                        hovertext=[f"{label}<br>peak {human(peak_bytes)} ({peak_bytes} bytes)"],
                                        hoverinfo="text", name=f"{label}: peak {peak_bytes} bytes",
                                        legendgroup=label))
        if failures["t"]:
            figure.add_trace(go.Scatter(x=failures["t"], y=failures["y"], text=failures["text"], hoverinfo="text+x",
                                        mode="markers", marker={"symbol": "x", "size": 10, "color": "black"},
                                        name=f"{label}: out of memory", legendgroup=label))
        begun = {}
        for mark in marks:
            t = (mark["time_ns"] - start_ns) / 1e6
            if mark["stage"] == "begin":
                begun.setdefault(mark["name"], []).append(t)
            elif begun.get(mark["name"]):
                figure.add_vrect(x0=begun[mark["name"]].pop(), x1=t, fillcolor="lightskyblue", opacity=0.25,
                                 line_width=0, annotation_text=mark["name"], annotation_position="top left")
    figure.update_layout(title=title, template="plotly_white", hovermode="closest",
                         xaxis={"title": "time (ms)", "rangeslider": {"visible": True}},
                         yaxis={"title": "live bytes", "rangemode": "tozero"},
                         legend={"title": {"text": "resource and stream"}})
    return figure


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input", help="a cudapmr JSON snapshot or a logging_adaptor CSV log")
    parser.add_argument("-o", "--output", help="the page to write (default: INPUT.html)")
    parser.add_argument("--title", help="the page's title (default: the input's name)")
    arguments = parser.parse_args()
    stacks = read_stacks(arguments.input)
    output = arguments.output or f"{arguments.input}.html"
    figure = build_figure(stacks, arguments.title or f"cudapmr memory: {Path(arguments.input).name}")
    figure.write_html(output, include_plotlyjs=True, full_html=True)
    events = sum(len(events) for _, events, _ in stacks)
    print(f"memviz: {output}: {len(stacks)} resource{'s' if len(stacks) != 1 else ''}, {events} events")


if __name__ == "__main__":
    main()
