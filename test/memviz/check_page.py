#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The memviz page in a real browser: snapshot_sample writes a JSON
snapshot, apps/memviz/memviz.py turns it into a page, and headless Chromium
loads it. The page must be self-contained (no script from elsewhere), log
nothing to the console (no error, no warning) and, in a screenshot, show
the plot: lines drawn in the plot area.

Usage: check_page.py MEMVIZ_PY SNAPSHOT_SAMPLE OUT_DIR
Exit status 0 passed, 1 failed, 77 skipped (no plotly or no Chromium)."""
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

SKIP = 77


def fail(message):
    print(f"FAIL {message}")
    sys.exit(1)


def read_png(path):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB or RGBA PNG."""
    data = Path(path).read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path} is not a PNG")
    position, idat = 8, b""
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        body = data[position + 8:position + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        position += 12 + length
    if depth != 8 or color not in (2, 6) or interlace != 0:
        fail(f"{path}: a PNG of depth {depth}, color type {color}, interlace {interlace} is not read here")
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up = previous[x]
            upper_left = previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - upper_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - upper_left)
                predictor = left if pa <= pb and pa <= pc else (up if pb <= pc else upper_left)
                line[x] = (line[x] + predictor) & 0xFF
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, channels)])
        previous = line
    return width, height, rows


def main():
    memviz, sample, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    try:
        import plotly  # noqa: F401
    except ImportError:
        print("SKIP plotly is not installed (Debian: python3-plotly)")
        return SKIP
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("SKIP Chromium is not installed (Debian: chromium)")
        return SKIP
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sample, str(out)], check=True, capture_output=True)
    page = out / "snapshot.html"
    subprocess.run([sys.executable, memviz, str(out / "snapshot.json"), "-o", str(page)], check=True)

    html = page.read_text()
    external = re.findall(r"<script[^>]*\bsrc=", html)
    if external:
        fail(f"the page loads {len(external)} script(s) from elsewhere")

    screenshot = out / "snapshot.png"
    run = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000",
                          "--window-size=1400,900", f"--screenshot={screenshot}", page.resolve().as_uri()],
                         capture_output=True, text=True, timeout=300)
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    if console:
        fail("the page logged to the console:\n" + "\n".join(console))
    if run.returncode != 0 or not screenshot.exists():
        fail(f"Chromium exited with {run.returncode} and no screenshot:\n{run.stderr[-2000:]}")

    width, height, rows = read_png(screenshot)
    # The plot area of a 1400x900 page: away from the title, legend and range slider.
    colored = 0
    for y in range(int(height * 0.12), int(height * 0.62)):
        for x in range(int(width * 0.08), int(width * 0.7)):
            red, green, blue = rows[y][x]
            colored += max(red, green, blue) - min(red, green, blue) > 80
    if colored < 300:
        fail(f"the screenshot's plot area has {colored} colored pixels: no plot drawn")
    print(f"PASS the page is self-contained, logs nothing and draws its plot ({colored} colored pixels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
