#!/usr/bin/env python3
"""Write the seed corpus of the image decode fuzzer (tests/fuzz/corpus/decode/).

Small JPEGs (baseline, progressive, grayscale, CMYK, restart markers, 4:4:4 /
4:2:2 / 4:2:0, EXIF orientation, scan bombs of 60 and 70 scans) made with Pillow, and PNGs of every colour
type and bit depth, interlaced and not, palette with tRNS, and ancillary
chunks, made with the small encoder below (Pillow cannot write all of them).
WebPs (lossy, lossless, alpha, an animation) made with Pillow. Every file stays
under 4 KiB. Deterministic: the same bytes on every run.

    python3 tests/fuzz/make_seed_corpus.py [OUT_DIR]

Also importable: tests use `png_encode` to build hostile PNGs and
`jpeg_repeat_last_scan` to build scan bombs.
"""
import io
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image

# ---- a small PNG encoder --------------------------------------------------

# Adam7 passes: (x0, y0, dx, dy)
ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def chunk(ctype, data, crc=None):
    """One PNG chunk; crc overrides the computed CRC (to make bad files)."""
    body = ctype + data
    c = zlib.crc32(body) & 0xFFFFFFFF if crc is None else crc
    return struct.pack(">I", len(data)) + body + struct.pack(">I", c)


def _pack_rows(samples, depth):
    """samples: uint array (h, w*channels) -> list of packed row bytes."""
    rows = []
    for r in samples:
        if depth == 16:
            rows.append(r.astype(">u2").tobytes())
        elif depth == 8:
            rows.append(r.astype(np.uint8).tobytes())
        else:
            per = 8 // depth
            pad = (-len(r)) % per
            v = np.concatenate([r.astype(np.uint8), np.zeros(pad, np.uint8)]).reshape(-1, per)
            b = np.zeros(len(v), np.uint8)
            for k in range(per):
                b |= (v[:, k] << (8 - depth * (k + 1))).astype(np.uint8)
            rows.append(b.tobytes())
    return rows


def png_raw_stream(samples, depth, interlace):
    """Filtered (type 0 / type 1 alternating), uncompressed IDAT payload.

    samples: array (h, w, c) of sample values at `depth` bits."""
    h, w, c = samples.shape
    out = bytearray()
    passes = ADAM7 if interlace else [(0, 0, 1, 1)]
    for (x0, y0, dx, dy) in passes:
        sub = samples[y0::dy, x0::dx]
        if sub.shape[0] == 0 or sub.shape[1] == 0:
            continue
        flat = sub.reshape(sub.shape[0], -1)
        bpp = max(1, c * depth // 8)
        for i, row in enumerate(_pack_rows(flat, depth)):
            if i % 2 and depth >= 8:  # Sub filter on odd rows: exercises defiltering
                a = np.frombuffer(row, np.uint8).astype(np.int16)
                f = a.copy()
                f[bpp:] = (a[bpp:] - a[:-bpp]) % 256
                out += b"\x01" + f.astype(np.uint8).tobytes()
            else:
                out += b"\x00" + row
    return bytes(out)


def png_encode(samples, color_type, depth, interlace=0, palette=None, trns=None, extra=(),
               idat_split=0, level=9, ihdr_override=None, raw=None):
    """Encode a PNG. samples (h, w, c) uint; palette: list of (r, g, b);
    trns: bytes of the tRNS chunk; extra: chunks (bytes) placed before IDAT;
    idat_split: split the zlib stream into IDAT chunks of this many bytes;
    ihdr_override: (w, h) declared instead of the real size; raw: the
    uncompressed stream to use instead of the one made from samples."""
    h, w, _ = samples.shape
    dw, dh = ihdr_override or (w, h)
    ihdr = struct.pack(">IIBBBBB", dw, dh, depth, color_type, 0, 0, interlace)
    stream = zlib.compress(raw if raw is not None else png_raw_stream(samples, depth, interlace), level)
    out = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
    for e in extra:
        out += e
    if palette is not None:
        out += chunk(b"PLTE", b"".join(bytes(p) for p in palette))
    if trns is not None:
        out += chunk(b"tRNS", trns)
    if idat_split:
        for i in range(0, len(stream), idat_split):
            out += chunk(b"IDAT", stream[i:i + idat_split])
    else:
        out += chunk(b"IDAT", stream)
    return out + chunk(b"IEND", b"")


def texture(h, w, c, maxval, seed):
    """Smooth gradient + noise, values in [0, maxval]."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    chans = []
    for k in range(c):
        g = (x * (k + 1) / w + y * (c - k) / h) / (c + 1)
        g = g + 0.15 * np.sin(x / (2 + k) + y / 3.0) + rng.normal(0, 0.05, (h, w))
        chans.append(np.clip(g, 0, 1) * maxval)
    return np.rint(np.stack(chans, -1)).astype(np.uint32)


# ---- the corpus -----------------------------------------------------------

def png_seeds():
    seeds = {}
    w, h = 19, 13  # odd sizes: partial Adam7 passes, partial bytes for < 8 bits
    for ct, depths in [(0, [1, 2, 4, 8, 16]), (2, [8, 16]), (3, [1, 2, 4, 8]), (4, [8, 16]), (6, [8, 16])]:
        for d in depths:
            c = CHANNELS[ct]
            maxval = (1 << d) - 1
            pal = None
            if ct == 3:
                n = min(1 << d, 16)
                s = texture(h, w, 1, n - 1, seed=d)
                pal = [((i * 53) % 256, (i * 97) % 256, (i * 31) % 256) for i in range(n)]
            else:
                s = texture(h, w, c, maxval, seed=ct * 31 + d)
            for il in (0, 1):
                name = f"png_ct{ct}_d{d}{'_il' if il else ''}.png"
                seeds[name] = png_encode(s, ct, d, il, palette=pal)
            if ct == 3:
                trns = bytes((i * 40) % 256 for i in range(len(pal) - 1))
                seeds[f"png_ct3_d{d}_trns.png"] = png_encode(s, ct, d, 0, palette=pal, trns=trns)
    s = texture(h, w, 1, 255, 7)
    seeds["png_ct0_d8_trns.png"] = png_encode(s, 0, 8, 0, trns=struct.pack(">H", 17))
    s = texture(h, w, 3, 255, 8)
    seeds["png_ct2_d8_trns.png"] = png_encode(s, 2, 8, 0, trns=struct.pack(">HHH", 1, 2, 3))
    text = chunk(b"tEXt", b"Comment\x00seed corpus")
    ztxt = chunk(b"zTXt", b"Title\x00\x00" + zlib.compress(b"compressed text " * 8))
    iccp = chunk(b"iCCP", b"fake\x00\x00" + zlib.compress(b"\x00" * 512))
    gama = chunk(b"gAMA", struct.pack(">I", 45455))
    seeds["png_chunks.png"] = png_encode(s, 2, 8, 0, extra=[text, ztxt, iccp, gama])
    seeds["png_multi_idat.png"] = png_encode(s, 2, 8, 0, idat_split=64)
    y, x = np.mgrid[0:32, 0:40]  # smooth: compresses well
    s = np.stack([x * 4, y * 5, (x + y) * 2], -1).astype(np.uint32) % 256
    seeds["png_40x32_rgb.png"] = png_encode(s, 2, 8, 0, level=9)
    seeds["png_1x1.png"] = png_encode(texture(1, 1, 3, 255, 10), 2, 8, 1)
    return seeds


def jpeg_markers(data):
    """(offset, marker) of each marker of a JPEG as a decoder meets them:
    segments skipped by their length, entropy-coded data by its escapes."""
    out, pos = [], 2
    while pos + 1 < len(data):
        m = data[pos + 1]
        if data[pos] != 0xFF or m in (0x00, 0xFF) or 0xD0 <= m <= 0xD7:
            pos += 1
            continue
        out.append((pos, m))
        if m == 0xD9:
            break
        pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    return out


def jpeg_repeat_last_scan(data, repeats):
    """A scan bomb: the JPEG with its last scan (SOS to EOI) repeated
    `repeats` more times. The header stays legal; each extra scan of a
    progressive file costs the decoder a pass over the whole image."""
    marks = jpeg_markers(data)
    sos = [p for p, m in marks if m == 0xDA]
    eoi = [p for p, m in marks if m == 0xD9][-1]
    last = data[sos[-1]:eoi]
    return data[:eoi] + last * repeats + data[eoi:]


def jpeg_seeds():
    seeds = {}
    rgb = texture(24, 32, 3, 255, 11).astype(np.uint8)
    im = Image.fromarray(rgb, "RGB")

    def save(img, **kw):
        b = io.BytesIO()
        img.save(b, "JPEG", **kw)
        return b.getvalue()

    seeds["jpg_420.jpg"] = save(im, quality=75, subsampling=2)
    seeds["jpg_422.jpg"] = save(im, quality=75, subsampling=1)
    seeds["jpg_444.jpg"] = save(im, quality=75, subsampling=0)
    seeds["jpg_progressive.jpg"] = save(im, quality=75, progressive=True)
    seeds["jpg_optimize.jpg"] = save(im, quality=60, optimize=True)
    seeds["jpg_restart.jpg"] = save(im, quality=75, restart_marker_blocks=2)
    seeds["jpg_restart_rows.jpg"] = save(im, quality=75, restart_marker_rows=1)
    seeds["jpg_gray.jpg"] = save(im.convert("L"), quality=75)
    seeds["jpg_gray_progressive.jpg"] = save(im.convert("L"), quality=75, progressive=True)
    seeds["jpg_cmyk.jpg"] = save(im.convert("CMYK"), quality=75)
    seeds["jpg_odd_17x13.jpg"] = save(im.crop((0, 0, 17, 13)), quality=80)
    seeds["jpg_1x1.jpg"] = save(im.crop((0, 0, 1, 1)), quality=80)
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 CW
    seeds["jpg_exif_orient6.jpg"] = save(im, quality=70, exif=exif.tobytes())
    big = Image.fromarray(texture(96, 128, 3, 255, 12).astype(np.uint8), "RGB")
    seeds["jpg_128x96_q30.jpg"] = save(big, quality=30)
    # scan bombs, small: 70 scans (over the default max_scans of 64: refused
    # from the markers) and 60 (under it: libjpeg reads the repeats)
    tiny = save(im.crop((0, 0, 8, 8)), quality=50, progressive=True)
    base = sum(1 for _, m in jpeg_markers(tiny) if m == 0xDA)
    seeds["jpg_scan_bomb_70.jpg"] = jpeg_repeat_last_scan(tiny, 70 - base)
    seeds["jpg_scans_60.jpg"] = jpeg_repeat_last_scan(tiny, 60 - base)
    return seeds


def webp_seeds():
    """Lossy, lossy with alpha, lossless (with and without alpha), odd sizes,
    and an animation (refused by the decoder: still a seed for its probe)."""
    seeds = {}
    rgb = Image.fromarray(texture(24, 32, 3, 255, 13).astype(np.uint8), "RGB")
    rgba = Image.fromarray(texture(24, 32, 4, 255, 14).astype(np.uint8), "RGBA")

    def save(img, **kw):
        b = io.BytesIO()
        img.save(b, "WEBP", **kw)
        return b.getvalue()

    seeds["webp_lossy.webp"] = save(rgb, quality=70)
    seeds["webp_lossy_alpha.webp"] = save(rgba, quality=70)
    seeds["webp_lossless.webp"] = save(rgb, lossless=True)
    seeds["webp_lossless_alpha.webp"] = save(rgba, lossless=True)
    seeds["webp_odd_17x13.webp"] = save(rgb.crop((0, 0, 17, 13)), quality=80)
    seeds["webp_1x1.webp"] = save(rgb.crop((0, 0, 1, 1)), lossless=True)
    frames = [rgb, rgb.transpose(Image.FLIP_LEFT_RIGHT)]
    b = io.BytesIO()
    frames[0].save(b, "WEBP", save_all=True, append_images=frames[1:], duration=40, quality=50)
    seeds["webp_animated.webp"] = b.getvalue()
    return seeds


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus", "decode")
    os.makedirs(out, exist_ok=True)
    seeds = {}
    seeds.update(png_seeds())
    seeds.update(jpeg_seeds())
    seeds.update(webp_seeds())
    for name, data in sorted(seeds.items()):
        assert len(data) < 4096, (name, len(data))
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"{len(seeds)} seeds in {out}")


if __name__ == "__main__":
    main()
