#!/usr/bin/env python3
"""Predicted prefill speedup of UniPrefill from the segment structure, beside the measured one.

Reads a `uniprefill bench-prefill --json` result and the checkpoint's config.json, and counts FLOPs
per layer for the dense prefill and for the kept-token counts the run recorded:
  - linear layers (projections, FFN / MoE active experts): 2 * params * rows;
  - causal attention: 4 * Hq * D * (query, key) pairs visible;
  - Gated DeltaNet recurrence: ~6 * Hv * Dk * Dv per token (3 FMAs per state element);
with the engine's own schedule at a drop layer (q/k/v over every alive row; attention queries,
o_proj and the FFN over kept rows only). Prints a table and writes the prediction into the JSON.

  python3 bench/predict_speedup.py RESULT.json CHECKPOINT_DIR [RESULT2.json ...]
"""
import json
import sys


def layer_kinds(c):
    t = c["model_type"]
    L = c["num_hidden_layers"]
    if t == "qwen3_next":
        k = c.get("full_attention_interval", 4)
        return ["full" if (i + 1) % k == 0 else "linear" for i in range(L)]
    if t.startswith("gemma3"):
        return ["full" if x == "full_attention" else "sliding" for x in c["layer_types"]]
    return ["full"] * L


def costs(c):
    """Per-layer functions: (qkv params, post params = o + ffn, attention flops per pair, recurrence flops per token)."""
    H = c["hidden_size"]
    t = c["model_type"]
    hq, hkv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    d = c.get("head_dim", H // hq)
    out = []
    for kind in layer_kinds(c):
        if t == "qwen3_next":
            ffn = 3 * H * c["moe_intermediate_size"] * c["num_experts_per_tok"] + \
                3 * H * c["shared_expert_intermediate_size"] + H * c["num_experts"]
            if kind == "linear":
                nk, nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
                dk, dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
                qkv = H * (2 * nk * dk + 2 * nv * dv + 2 * nv)
                out.append((qkv, nv * dv * H + ffn, 0.0, 6.0 * nv * dk * dv))
            else:
                out.append((H * (2 * hq * d + 2 * hkv * d), hq * d * H + ffn, 4.0 * hq * d, 0.0))
        else:
            F = c["intermediate_size"]
            out.append((H * (hq * d + 2 * hkv * d), hq * d * H + 3 * H * F, 4.0 * hq * d, 0.0))
    return out


def flops(c, n, kept_by_layer):
    """FLOPs of one prefill of n tokens; kept_by_layer: {drop layer: kept rows}."""
    total = 0.0
    alive = n
    window = c.get("sliding_window", 0)
    for i, (qkv, post, attn, rec) in enumerate(costs(c)):
        kind = layer_kinds(c)[i]
        after = kept_by_layer.get(i, alive)
        total += 2 * qkv * alive + 2 * post * after + rec * alive
        if kind == "full":
            # kept queries see on average half the alive keys (exact for alive == after).
            total += attn * after * (alive + 1) / 2
        elif kind == "sliding":
            total += attn * after * min(window, (alive + 1) / 2)
        alive = after
    return total


def main():
    result_paths = [a for a in sys.argv[1:] if a.endswith(".json")]
    ckpt = [a for a in sys.argv[1:] if not a.endswith(".json")][0]
    c = json.load(open(f"{ckpt}/config.json"))
    c = c.get("text_config", c)
    print(f"{'file':40} {'tokens':>7} {'predicted':>10} {'measured':>9}  kept")
    for path in result_paths:
        r = json.load(open(path))
        for run in r["runs"]:
            n = run["tokens"]
            kept = {k["layer"]: k["kept"] for k in run["kept"]}
            pred = flops(c, n, {}) / flops(c, n, kept)
            run["predicted_speedup_flops"] = pred
            ks = " ".join(f"L{k['layer']} {k['kept']}/{k['alive']}" for k in run["kept"])
            print(f"{path[-40:]:40} {n:7d} {pred:9.2f}x {run['speedup']:8.2f}x  {ks}")
        json.dump(r, open(path, "w"), indent=2)


if __name__ == "__main__":
    main()
