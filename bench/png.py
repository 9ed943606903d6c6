"""A tiny PNG line-chart renderer (zlib + struct only), so the benchmark needs no plotting
library. Good for a few series of a few thousand points with axes, ticks, a title and a
legend; text is a 5×7 bitmap font (upper case, digits, a little punctuation, ×).

    line_chart(path, "Title", "x label", "y label",
               [Series("phalanx", [(0, 0), (1, 3)]), ...])
"""

from __future__ import annotations

import itertools
import math
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

RGB = tuple[int, int, int]

WHITE: RGB = (255, 255, 255)
BLACK: RGB = (0, 0, 0)
GREY: RGB = (225, 225, 225)
DARK: RGB = (90, 90, 90)
#: One colour per scheduler, the same in every chart.
PALETTE: dict[str, RGB] = {
    "vanilla": (120, 120, 120),
    "phalanx": (214, 39, 40),
    "coscheduling": (31, 119, 180),
}
FALLBACK: tuple[RGB, ...] = ((44, 160, 44), (148, 103, 189), (255, 127, 14))

# 5×7 glyphs: seven rows, each a base-32 digit whose five low bits are the pixels.
_FONT = {
    '0': 'EHJLPHE', '1': '4C4444E', '2': 'EH1248V', '3': 'V2421HE', '4': '26AIV22', '5': 'VGU11HE',
    '6': '68GUHHE', '7': 'V124888', '8': 'EHHEHHE', '9': 'EHHF12C', 'A': 'EHHVHHH', 'B': 'UHHUHHU',
    'C': 'EHGGGHE', 'D': 'SIHHHIS', 'E': 'VGGUGGV', 'F': 'VGGUGGG', 'G': 'EHGNHHF', 'H': 'HHHVHHH',
    'I': 'E44444E', 'J': '72222IC', 'K': 'HIKOKIH', 'L': 'GGGGGGV', 'M': 'HRLLHHH', 'N': 'HHPLJHH',
    'O': 'EHHHHHE', 'P': 'UHHUGGG', 'Q': 'EHHHLID', 'R': 'UHHUKIH', 'S': 'FGGE11U', 'T': 'V444444',
    'U': 'HHHHHHE', 'V': 'HHHHHA4', 'W': 'HHHLLLA', 'X': 'HHA4AHH', 'Y': 'HHA4444', 'Z': 'V1248GV',
    '.': '00000CC', ',': '0000C48', ':': '0CC0CC0', '-': '000V000', '+': '044V440', '/': '01248G0',
    '%': 'PP248JJ', '(': '2488842', ')': '8422248', '_': '000000V', '=': '00V0V00', '<': '248G842',
    '>': '8421248', '×': '00HA4AH', '*': '04LEL40', '#': 'AAVAVAA', "'": '4480000',
}  # fmt: skip
_B32 = "0123456789ABCDEFGHIJKLMNOPQRSTUV"


class Canvas:
    def __init__(self, width: int, height: int, background: RGB = WHITE) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def dot(self, x: int, y: int, color: RGB) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            i = (y * self.width + x) * 3
            self.pixels[i : i + 3] = bytes(color)

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: RGB) -> None:
        for y in range(max(0, y0), min(self.height, y1 + 1)):
            for x in range(max(0, x0), min(self.width, x1 + 1)):
                self.dot(x, y, color)

    def line(self, x0: int, y0: int, x1: int, y1: int, color: RGB, width: int = 1) -> None:
        """Bresenham, thickened by stamping a ``width``-pixel square."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        half = width // 2
        while True:
            if width == 1:
                self.dot(x0, y0, color)
            else:
                self.rect(x0 - half, y0 - half, x0 - half + width - 1, y0 - half + width - 1, color)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def text(self, x: int, y: int, text: str, color: RGB = BLACK, scale: int = 1) -> None:
        """Draw ``text`` with its top-left corner at (x, y); 6×scale pixels per character."""
        for ch in text.replace("≥", ">").replace("–", "-"):
            glyph = _FONT.get(ch) or _FONT.get(ch.upper())
            if glyph is not None:
                for row, digit in enumerate(glyph):
                    bits = _B32.index(digit)
                    for col in range(5):
                        if bits & (1 << (4 - col)):
                            self.rect(
                                x + col * scale,
                                y + row * scale,
                                x + col * scale + scale - 1,
                                y + row * scale + scale - 1,
                                color,
                            )
            x += 6 * scale

    def save(self, path: Path) -> None:
        stride = self.width * 3
        raw = b"".join(
            b"\x00" + bytes(self.pixels[y * stride : (y + 1) * stride]) for y in range(self.height)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        path.write_bytes(
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )


def text_width(text: str, scale: int = 1) -> int:
    return len(text) * 6 * scale


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2, 5 × 10^k steps)."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks, v = [round(start, 10)], start
    while v < hi - step * 1e-9:  # the last tick is at or above hi: nothing is clipped
        v += step
        ticks.append(round(v, 10))
    return ticks


def fmt_tick(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 10000:
        return f"{v / 1000:g}K"
    return f"{v:g}"


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[tuple[float, float]]
    #: Draw as steps (a cumulative count or a CDF) rather than straight segments.
    steps: bool = True


def line_chart(
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    series: Sequence[Series],
    *,
    width: int = 900,
    height: int = 520,
    subtitle: str = "",
) -> None:
    c = Canvas(width, height)
    left, right, top, bottom = 80, width - 20, 72, height - 60
    xs = [x for s in series for x, _ in s.points] or [0.0, 1.0]
    ys = [y for s in series for _, y in s.points] or [0.0, 1.0]
    xt = nice_ticks(min(0.0, *xs), max(xs))
    yt = nice_ticks(min(0.0, *ys), max(ys))
    x0, x1, y0, y1 = xt[0], xt[-1], yt[0], yt[-1]

    def px(x: float) -> int:
        return round(left + (x - x0) / ((x1 - x0) or 1) * (right - left))

    def py(y: float) -> int:
        return round(bottom - (y - y0) / ((y1 - y0) or 1) * (bottom - top))

    c.text(left, 12, title, scale=2)
    if subtitle:
        fits = (width - left - 10) // 6
        c.text(left, 34, subtitle if len(subtitle) <= fits else subtitle[: fits - 3] + "...", DARK)
    for t in xt:
        c.line(px(t), top, px(t), bottom, GREY)
        label = fmt_tick(t)
        c.text(px(t) - text_width(label) // 2, bottom + 8, label, DARK)
    for t in yt:
        c.line(left, py(t), right, py(t), GREY)
        label = fmt_tick(t)
        c.text(left - 8 - text_width(label), py(t) - 3, label, DARK)
    c.line(left, bottom, right, bottom, BLACK)
    c.line(left, top, left, bottom, BLACK)
    c.text((left + right - text_width(xlabel)) // 2, bottom + 26, xlabel)
    c.text(8, top - 14, ylabel)
    fallback = iter(FALLBACK * 4)
    legend_y = top + 6
    for s in series:
        color = PALETTE.get(s.label.split()[0]) or next(fallback)
        pts = sorted(s.points)
        for (ax, ay), (bx, by) in itertools.pairwise(pts):
            if s.steps:
                c.line(px(ax), py(ay), px(bx), py(ay), color, 2)
                c.line(px(bx), py(ay), px(bx), py(by), color, 2)
            else:
                c.line(px(ax), py(ay), px(bx), py(by), color, 2)
        if len(pts) == 1:
            c.rect(
                px(pts[0][0]) - 2, py(pts[0][1]) - 2, px(pts[0][0]) + 2, py(pts[0][1]) + 2, color
            )
        lx = right - 12 - text_width(s.label) - 26
        c.rect(lx, legend_y + 2, lx + 18, legend_y + 4, color)
        c.text(lx + 24, legend_y, s.label, color)
        legend_y += 14
    c.save(path)
