#!/usr/bin/env python3
"""Checks of a ka-db report page for tests/cli/ka_db_report_test.sh (standard library only).

  report_page_check.py marks PAGE.html    prints "<data-plot> <number of .mark elements>" per plot
  report_page_check.py not-blank SHOT.png exits 1 when the screenshot is (nearly) one colour
"""
import struct
import sys
import zlib
from html.parser import HTMLParser


class MarkCounter(HTMLParser):
    """Counts the elements whose class list holds "mark" inside each <svg data-plot=...>."""

    def __init__(self):
        super().__init__()
        self.plot = None
        self.depth = 0
        self.counts = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "svg" and "data-plot" in attrs:
            self.plot = attrs["data-plot"]
            self.depth = 0
            self.counts.setdefault(self.plot, 0)
        if self.plot is None:
            return
        if tag == "svg":
            self.depth += 1
        if "mark" in (attrs.get("class") or "").split():
            self.counts[self.plot] += 1

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag == "svg" and self.plot is not None:
            self.handle_endtag(tag)

    def handle_endtag(self, tag):
        if tag == "svg" and self.plot is not None:
            self.depth -= 1
            if self.depth == 0:
                self.plot = None


def marks(path):
    counter = MarkCounter()
    with open(path, encoding="utf-8") as f:
        counter.feed(f.read())
    for plot, n in counter.counts.items():
        print(plot, n)
    return 0


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def png_rows(path):
    """The rows of an 8-bit RGB or RGBA PNG as bytes, unfiltered."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace != 0:
        raise ValueError(f"{path}: expected 8-bit RGB(A), not interlaced")
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = prev[i]
            corner = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + ((left + up) >> 1)) & 0xFF
            elif kind == 4:
                line[i] = (line[i] + paeth(left, up, corner)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def not_blank(path):
    width, height, bpp, rows = png_rows(path)
    colours = {}
    for row in rows[::4]:
        for x in range(0, width * bpp, bpp * 4):
            px = row[x:x + 3]
            colours[px] = colours.get(px, 0) + 1
    total = sum(colours.values())
    background = max(colours.values())
    drawn = 1.0 - background / total
    print(f"{path}: {width}x{height}, {len(colours)} colours sampled, {drawn:.1%} not background")
    # Text, tables and plots: a real page has many colours and covers a few percent at least.
    return 0 if len(colours) >= 16 and drawn >= 0.02 else 1


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("marks", "not-blank"):
        sys.exit(__doc__)
    sys.exit(marks(sys.argv[2]) if sys.argv[1] == "marks" else not_blank(sys.argv[2]))
