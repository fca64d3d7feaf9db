#!/usr/bin/env python3
"""Where a served step's GPU time departs from its price: a least-squares fit of each forward's
GPU time (a UNIPREFILL_CUDA_STEP_TRACE trace with `units`) over what the scheduler prices and
what it does not: linear rows in budget units (a segment's share per row), attention pairs in
whole 128-row query tiles, decode keys (1K), segment ends, layers that only the step's decodes
run (a segment-wise chunk covers its segment's layers; the others stream their weights for the
decodes alone: SchedulerConfig::weight_floor_rows), chunks of fewer than 128 rows that do not
end their segment (SchedulerConfig::min_extra_chunk_rows), and a constant per forward. Prints the
coefficients for all forwards, dense ones and segment-wise ones, and the slowest forwards holding
decodes with their units. The model's shape is the Llama-3.1-8B preset served by
scripts/gpu_serve_mixed.sh (32 layers, 32 heads of 128, drop layers 7, 11, ..., 27; linear FLOPs
per row 13.96 G); forwards under 64 rows (decode-only steps) are left out.

    .venv/bin/python tools/serve_step_fit.py trace_chunked.jsonl
"""
import json
import sys

import numpy as np

# Per segment of the 8B preset (drop layers 7, 11, 15, 19, 23, 27): linear FLOPs share, and
# full-attention layers.
SHARE = [0.2248] + [0.125] * 5 + [0.150]
ATTENTION_LAYERS = [8] + [4] * 5 + [4]
PAIR = 4 * 32 * 128 / 13.96e9  # one layer's attention FLOPs per (row, key) over linear per row
TILE = 128


def features(units):
    linear = pairs = decode_keys = ends = pieces = 0.0
    decodes = False
    covered = set()  # segments some prefill chunk runs (-1: all)
    for segment, rows, cached, end in units:
        if segment == -1 and rows == 1:  # a decode
            linear += 1
            decode_keys += cached / 1e3
            decodes = True
            continue
        covered.update(range(len(SHARE)) if segment == -1 else [segment])
        tiled = -(-rows // TILE) * TILE
        layers = 32 if segment == -1 else ATTENTION_LAYERS[segment]
        linear += rows * (1.0 if segment == -1 else SHARE[segment])
        pairs += layers * PAIR * tiled * (cached + tiled / 2)
        ends += end
        pieces += rows < TILE and not end
    decode_only_layers = 0.0
    if decodes:
        decode_only_layers = float(sum(n for s, n in enumerate(ATTENTION_LAYERS) if s not in covered))
    return [linear, pairs, decode_keys, ends, decode_only_layers, pieces]


def fit(x, y):
    a = np.c_[x, np.ones(len(y))]
    coef = np.linalg.lstsq(a, y, rcond=None)[0]
    return coef, float(np.sqrt(np.mean((a @ coef - y) ** 2)))


def main(path):
    forwards = [json.loads(line) for line in open(path)]
    forwards = [f for f in forwards if 'gpu_ms' in f and f.get('units') and f['rows'] >= 64]
    x = np.array([features(f['units']) for f in forwards])
    y = np.array([f['gpu_ms'] for f in forwards])
    segmentwise = np.array([any(u[0] >= 0 for u in f['units']) for f in forwards])
    names = ('ms per linear row-unit, per attention unit, per 1K decode keys, per segment end, '
             'per decode-only layer, per sub-tile piece, const')
    print(names)
    for label, mask in (('all', np.ones(len(y), bool)), ('dense', ~segmentwise),
                        ('segment-wise', segmentwise)):
        if mask.sum() > 5:
            coef, rms = fit(x[mask], y[mask])
            print(f'{label:13s} {mask.sum():5d} forwards: {np.round(coef, 4)}  residual rms {rms:.2f} ms')
    slow = sorted((i for i in range(len(y)) if x[i, 2] > 0), key=lambda i: -y[i])[:12]
    for i in slow:
        units = forwards[i]['units']
        print(f"{y[i]:6.1f} ms  chunks {[u for u in units if u[1] > 1]}  "
              f"decodes {sum(1 for u in units if u[1] == 1)}")


if __name__ == '__main__':
    main(sys.argv[1])
