#!/usr/bin/env python3
"""Converts a (tiny) Hugging Face Llama checkpoint into a GGUF file the way llama.cpp's
convert_hf_to_gguf.py does for the parts the engine reads: llama.* metadata, q/k weight rows
permuted for adjacent-pair RoPE, llama3 rope scaling as rope_freqs.weight (per-frequency divisors),
f32 tensors, and a placeholder gpt2-style vocabulary. Used to check that the engine's GGUF Llama
path (adjacent pairs on permuted weights) equals its safetensors path and transformers.

  .venv/bin/python tools/make_llama_gguf.py tests/goldens/hf_tiny/llama tests/goldens/hf_tiny/llama/model.gguf
"""
import json
import math
import struct
import sys

import numpy as np
import gguf


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        if info["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            arr = u.view(np.float32)
        elif info["dtype"] == "F32":
            arr = np.frombuffer(raw, dtype=np.float32)
        elif info["dtype"] == "F16":
            arr = np.frombuffer(raw, dtype=np.float16).astype(np.float32)
        else:
            raise SystemExit(f"unsupported dtype {info['dtype']}")
        out[name] = arr.reshape(info["shape"]).copy()
    return out


def permute(w, n_head):
    # llama.cpp: rows of each head reordered from (i, i + d/2) halves to interleaved pairs.
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def llama3_rope_factors(cfg, head_dim):
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) != "llama3":
        return None
    base = cfg.get("rope_theta", 10000.0)
    factor, lo, hi = rs["factor"], rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
    orig = rs.get("original_max_position_embeddings", 8192)
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    low_wavelen, high_wavelen = orig / lo, orig / hi
    factors = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            factors.append(1)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (orig / wavelen - lo) / (hi - lo)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def main(src, dst):
    cfg = json.load(open(f"{src}/config.json"))
    t = read_safetensors(f"{src}/model.safetensors")
    H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    nh, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim", H // nh)
    w = gguf.GGUFWriter(dst, "llama")
    w.add_name("tiny-llama-test")
    w.add_context_length(cfg.get("max_position_embeddings", 8192))
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    w.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-5))
    V = cfg["vocab_size"]
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"<t{i}>" for i in range(V)])
    w.add_token_types([1] * V)
    w.add_token_merges([])
    w.add_bos_token_id(cfg.get("bos_token_id", 1))
    w.add_eos_token_id(cfg.get("eos_token_id", 2))
    factors = llama3_rope_factors(cfg, hd)
    if factors is not None:
        w.add_tensor("rope_freqs.weight", factors)
    w.add_tensor("token_embd.weight", t["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", t["model.norm.weight"])
    if "lm_head.weight" in t:
        w.add_tensor("output.weight", t["lm_head.weight"])
    for i in range(L):
        p = f"model.layers.{i}."
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", t[p + "input_layernorm.weight"])
        w.add_tensor(b + "ffn_norm.weight", t[p + "post_attention_layernorm.weight"])
        w.add_tensor(b + "attn_q.weight", permute(t[p + "self_attn.q_proj.weight"], nh))
        w.add_tensor(b + "attn_k.weight", permute(t[p + "self_attn.k_proj.weight"], nkv))
        w.add_tensor(b + "attn_v.weight", t[p + "self_attn.v_proj.weight"])
        w.add_tensor(b + "attn_output.weight", t[p + "self_attn.o_proj.weight"])
        w.add_tensor(b + "ffn_gate.weight", t[p + "mlp.gate_proj.weight"])
        w.add_tensor(b + "ffn_up.weight", t[p + "mlp.up_proj.weight"])
        w.add_tensor(b + "ffn_down.weight", t[p + "mlp.down_proj.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {dst}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
