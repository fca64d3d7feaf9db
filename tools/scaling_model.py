#!/usr/bin/env python3
"""Predicted tensor-parallel step times and communication volumes (docs/scaling.md, issue 21 item 5).

    python3 tools/scaling_model.py            # prints every table of docs/scaling.md

A model on paper, not a measurement: compute is our measured single-H200 time (docs/
gpu_performance.md) divided by the rank count (ideal sharding), communication is Megatron-style
tensor parallelism's all-reduces timed by a bandwidth/latency model of NCCL's ring:
    t(S bytes, N ranks) = latency + S * 2 (N - 1) / N / bus_bandwidth.
Links: NVLink 4 within an H200 node (~900 GB/s per GPU both ways; NCCL all-reduce bus bandwidth
~400 GB/s for large messages, ~15 us for small ones) and InfiniBand NDR across nodes (400 Gb/s per
GPU = 50 GB/s, ~25 us).
"""

LINKS = {"NVLink (one node)": (400e9, 15e-6), "InfiniBand NDR (across nodes)": (50e9, 25e-6)}

# name: hidden, layers, (q heads, kv heads, head dim), ffn, vocab, bf16 parameters
LLAMA8B = dict(hidden=4096, layers=32, heads=(32, 8, 128), ffn=14336, vocab=128256, params=8.03e9)
QWEN80B = dict(hidden=2048, layers=48, heads=(16, 2, 256), vocab=151936, params=80e9,
               experts=512, top_k=10, moe_ffn=512)

# Measured on one H200 (docs/gpu_performance.md): seconds.
PREFILL_1GPU = {("8B", "dense", 32768): 1.222, ("8B", "dense", 131072): 11.383,
                ("8B", "keep 0.5", 131072): 3.422}
DECODE_1GPU = {("8B", 32, 1024): 7.21e-3, ("8B", 4, 32768): 10.28e-3}


def rows_per_layer(t, setting):
    """Rows each of the 32 layers carries: all T when dense; with fixed ratio 0.5 at the 8B
    default drop layers 7, 11, ..., 27 (as `bench gpu-prefill --keep-ratios 0.5` runs it) the
    layers after each drop carry half of the layers before."""
    if setting != "keep 0.5":
        return [t] * 32
    rows, cur = [], t
    for layer in range(32):
        rows.append(cur)
        if layer in (7, 11, 15, 19, 23, 27):
            cur //= 2
    return rows


def allreduce_s(nbytes, n, link):
    if n == 1:
        return 0.0
    bw, lat = LINKS[link]
    return lat + nbytes * 2 * (n - 1) / n / bw


def prefill_table():
    print("Prefill, Llama-3.1-8B shape, batch 1 (2 all-reduces of [T, 4096] bf16 per layer; after")
    print("a drop layer T is the kept count)")
    print(f"{'link':32} {'setting':18} {'TP':>3} {'compute s':>10} {'comm s':>8} {'step s':>8} "
          f"{'speedup':>8}")
    for link in LINKS:
        for (model, setting, t), base in PREFILL_1GPU.items():
            label = f"{setting} {t // 1024}K"
            for n in (1, 2, 4, 8):
                rows = rows_per_layer(t, setting)
                comm = sum(2 * allreduce_s(r * 4096 * 2, n, link) for r in rows)
                comp = base / n
                print(f"{link:32} {label:18} {n:>3} {comp:>10.3f} {comm:>8.3f} "
                      f"{comp + comm:>8.3f} {base / (comp + comm):>7.2f}x")
    print()


def decode_table():
    print("Decode step, Llama-3.1-8B shape (2 all-reduces of [B, 4096] bf16 per layer: latency-bound)")
    print(f"{'link':32} {'batch x context':16} {'TP':>3} {'compute ms':>11} {'comm ms':>8} "
          f"{'step ms':>8}")
    for link in LINKS:
        for (model, b, ctx), base in DECODE_1GPU.items():
            for n in (1, 2, 4, 8):
                comm = 64 * allreduce_s(b * 4096 * 2, n, link)
                comp = base / n
                print(f"{link:32} {f'{b} x {ctx // 1024}K':16} {n:>3} {comp * 1e3:>11.2f} "
                      f"{comm * 1e3:>8.2f} {(comp + comm) * 1e3:>8.2f}")
    print()


def drop_table():
    print("UniPrefill's own traffic per drop layer under TP: the block scores, all-reduced in f32")
    print("(each rank scores its heads; every rank then runs the same deterministic selection)")
    for t in (32768, 131072):
        blocks = t // 64
        nb = blocks * 4
        print(f"  {t // 1024}K prompt: {blocks} blocks = {nb / 1024:.0f} KiB per drop layer: "
              f"{allreduce_s(nb, 8, 'NVLink (one node)') * 1e6:.0f} us on NVLink at TP 8 "
              f"(the activations' all-reduces of that layer: "
              f"{2 * allreduce_s(t * 8192, 8, 'NVLink (one node)') * 1e3:.1f} ms)")
    print()


def memory_table():
    print("Weights per rank (bf16)")
    for name, m in (("Llama-3.1-8B", LLAMA8B), ("Qwen3-Next-80B-A3B", QWEN80B)):
        for n in (1, 2, 4, 8):
            print(f"  {name:20} TP {n}: {m['params'] * 2 / n / 2**30:6.1f} GiB")
    print()


def kv_table():
    print("KV to ship for prefill/decode disaggregation, Llama-3.1-8B shape (bf16 K and V,")
    print("8 KV heads x 128: 4 KiB per token per layer), dense vs UniPrefill keep 0.5 at the")
    print("default drop layers (each layer's cache holds the rows that layer ran on)")
    for t in (32768, 131072):
        dense = 32 * t * 4096
        up = sum(rows_per_layer(t, "keep 0.5")) * 4096
        for link, (bw, _) in LINKS.items():
            print(f"  {t // 1024}K, {link:30}: dense {dense / 2**30:5.2f} GiB "
                  f"{dense / bw * 1e3:7.1f} ms, UniPrefill {up / 2**30:5.2f} GiB "
                  f"{up / bw * 1e3:7.1f} ms ({up / dense:.2f}x)")
    print()


def moe_table():
    print("Qwen3-Next-80B-A3B, MoE layer at 32K tokens: expert parallel (tokens travel to their")
    print("experts, top-10: all-to-all of [T, 10, 2048] bf16 there and back) vs each expert sharded")
    print("by its FFN dimension (one all-reduce of [T, 2048] bf16)")
    t, h, k = 32768, 2048, 10
    for n in (2, 4, 8):
        a2a = 2 * t * k * h * 2 * (n - 1) / n / LINKS["NVLink (one node)"][0]
        ar = allreduce_s(t * h * 2, n, "NVLink (one node)")
        print(f"  TP {n}: expert parallel {a2a * 1e3:6.1f} ms per layer, sharded experts "
              f"{ar * 1e3:5.2f} ms per layer")
    print()


if __name__ == "__main__":
    memory_table()
    prefill_table()
    decode_table()
    drop_table()
    kv_table()
    moe_table()
