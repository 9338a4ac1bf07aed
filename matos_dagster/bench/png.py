"""A horizontal bar chart as a PNG, in pure Python (zlib + struct), with a 5x7 bitmap font.

The project's environment has no plotting library (no matplotlib, no Pillow), and the bench
must not add one; a bar chart needs little more than rectangles and labels.
"""

from __future__ import annotations

import struct
import zlib

_FONT_ROWS = {
    "0": "01110 10001 10011 10101 11001 10001 01110", "1": "00100 01100 00100 00100 00100 00100 01110",
    "2": "01110 10001 00001 00010 00100 01000 11111", "3": "11111 00010 00100 00010 00001 10001 01110",
    "4": "00010 00110 01010 10010 11111 00010 00010", "5": "11111 10000 11110 00001 00001 10001 01110",
    "6": "00110 01000 10000 11110 10001 10001 01110", "7": "11111 00001 00010 00100 01000 01000 01000",
    "8": "01110 10001 10001 01110 10001 10001 01110", "9": "01110 10001 10001 01111 00001 00010 01100",
    "A": "01110 10001 10001 11111 10001 10001 10001", "B": "11110 10001 10001 11110 10001 10001 11110",
    "C": "01110 10001 10000 10000 10000 10001 01110", "D": "11100 10010 10001 10001 10001 10010 11100",
    "E": "11111 10000 10000 11110 10000 10000 11111", "F": "11111 10000 10000 11110 10000 10000 10000",
    "G": "01110 10001 10000 10111 10001 10001 01111", "H": "10001 10001 10001 11111 10001 10001 10001",
    "I": "01110 00100 00100 00100 00100 00100 01110", "J": "00111 00010 00010 00010 00010 10010 01100",
    "K": "10001 10010 10100 11000 10100 10010 10001", "L": "10000 10000 10000 10000 10000 10000 11111",
    "M": "10001 11011 10101 10101 10001 10001 10001", "N": "10001 10001 11001 10101 10011 10001 10001",
    "O": "01110 10001 10001 10001 10001 10001 01110", "P": "11110 10001 10001 11110 10000 10000 10000",
    "Q": "01110 10001 10001 10001 10101 10010 01101", "R": "11110 10001 10001 11110 10100 10010 10001",
    "S": "01111 10000 10000 01110 00001 00001 11110", "T": "11111 00100 00100 00100 00100 00100 00100",
    "U": "10001 10001 10001 10001 10001 10001 01110", "V": "10001 10001 10001 10001 10001 01010 00100",
    "W": "10001 10001 10001 10101 10101 10101 01010", "X": "10001 10001 01010 00100 01010 10001 10001",
    "Y": "10001 10001 10001 01010 00100 00100 00100", "Z": "11111 00001 00010 00100 01000 10000 11111",
    " ": "00000 00000 00000 00000 00000 00000 00000", ".": "00000 00000 00000 00000 00000 01100 01100",
    ",": "00000 00000 00000 00000 01100 00100 01000", ":": "00000 01100 01100 00000 01100 01100 00000",
    "/": "00000 00001 00010 00100 01000 10000 00000", "(": "00010 00100 01000 01000 01000 00100 00010",
    ")": "01000 00100 00010 00010 00010 00100 01000", "-": "00000 00000 00000 11111 00000 00000 00000",
    "%": "11000 11001 00010 00100 01000 10011 00011", "+": "00000 00100 00100 11111 00100 00100 00000",
    "=": "00000 00000 11111 00000 11111 00000 00000", "<": "00010 00100 01000 10000 01000 00100 00010",
    ">": "01000 00100 00010 00001 00010 00100 01000", "_": "00000 00000 00000 00000 00000 00000 11111",
    "'": "00100 00100 01000 00000 00000 00000 00000", "?": "01110 10001 00001 00010 00100 00000 00100",
}
_FONT = {c: [int(r, 2) for r in rows.split()] for c, rows in _FONT_ROWS.items()}

WHITE, BLACK, GREY, LIGHT = (255, 255, 255), (30, 30, 30), (120, 120, 120), (225, 225, 225)


class Canvas:
    def __init__(self, width: int, height: int, bg=WHITE):
        self.w, self.h = width, height
        self.px = [bytearray(bytes(bg) * width) for _ in range(height)]

    def rect(self, x0: int, y0: int, x1: int, y1: int, color) -> None:
        x0, x1 = max(0, min(x0, x1)), min(self.w, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(self.h, max(y0, y1))
        if x1 <= x0:
            return
        row = bytes(color) * (x1 - x0)
        for y in range(y0, y1):
            self.px[y][3 * x0:3 * x1] = row

    def text(self, x: int, y: int, s: str, color=BLACK, scale: int = 2) -> int:
        """Draw `s` with its top left at (x, y); returns the x after it."""
        for ch in s.upper().replace("×", "X").replace("≥", ">="):
            rows = _FONT.get(ch, _FONT["?"])
            for r, bits in enumerate(rows):
                for c in range(5):
                    if bits & (1 << (4 - c)):
                        self.rect(x + c * scale, y + r * scale, x + (c + 1) * scale, y + (r + 1) * scale, color)
            x += 6 * scale
        return x

    @staticmethod
    def text_width(s: str, scale: int = 2) -> int:
        return len(s.replace("≥", ">=")) * 6 * scale

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(row) for row in self.px)

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def bar_chart(title: str, groups: list[tuple[str, str, list[tuple[str, float, float, float, tuple]]]],
              width: int = 1100) -> bytes:
    """groups: (heading, unit, bars); a bar is (label, median, low, high, color). One scale per group."""
    scale = 2
    label_w = max(Canvas.text_width(b[0]) for _, _, bars in groups for b in bars) + 20
    value_w = 190
    bar_h, gap = 22, 8
    height = 50 + sum(40 + len(bars) * (bar_h + gap) + 20 for _, _, bars in groups)
    c = Canvas(width, height)
    c.text(16, 14, title, scale=scale)
    y = 50
    plot_x0, plot_x1 = 16 + label_w, width - value_w
    for heading, unit, bars in groups:
        c.text(16, y + 8, heading, GREY)
        y += 34
        top = max([b[3] for b in bars] + [b[1] for b in bars] + [1e-9])
        for label, median, low, high, color in bars:
            c.text(16, y + (bar_h - 14) // 2, label)
            c.rect(plot_x0, y, plot_x1, y + bar_h, LIGHT)
            x_med = plot_x0 + int((plot_x1 - plot_x0) * median / top)
            c.rect(plot_x0, y, x_med, y + bar_h, color)
            if high > low:  # the spread of the repeats: min to max
                xl = plot_x0 + int((plot_x1 - plot_x0) * low / top)
                xh = plot_x0 + int((plot_x1 - plot_x0) * high / top)
                mid = y + bar_h // 2
                c.rect(xl, mid - 1, xh + 1, mid + 1, BLACK)
                c.rect(xl, y + 4, xl + 2, y + bar_h - 4, BLACK)
                c.rect(xh - 1, y + 4, xh + 1, y + bar_h - 4, BLACK)
            c.text(plot_x1 + 10, y + (bar_h - 14) // 2, f"{_short(median)} {unit}")
            y += bar_h + gap
        y += 20
    return c.png()


def _short(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:.2f}M"
    if v >= 1e4:
        return f"{v / 1e3:.0f}K"
    if v >= 1e3:
        return f"{v / 1e3:.1f}K"
    return f"{v:.1f}"
