#!/usr/bin/env python3
"""Write random-weight checkpoints in Hugging Face format (config.json + safetensors).

Three families, each with the config keys and tensor names transformers uses, so that
`AutoModelForCausalLM.from_pretrained(out)` loads the result with no missing or unexpected weights:

  llama       LlamaForCausalLM      (model_type "llama": GQA, SwiGLU, llama3 RoPE scaling, untied head)
  qwen3_next  Qwen3NextForCausalLM  (model_type "qwen3_next": Gated DeltaNet + gated full attention
                                      every full_attention_interval layers, MoE with a shared expert)
  gemma3      Gemma3ForCausalLM     (model_type "gemma3_text": 5 sliding : 1 full layers, four
                                      zero-centred (1 + w) norms per layer, tied embeddings)

Presets: `tiny` (tests: every family < 1.5 MB in f32) and the real shapes `llama-3.1-8b`,
`gemma-3-12b`, `qwen3-next-80b-a3b`; --layers/--experts/--vocab/--set override them.

Weights are normal with std 1/sqrt(fan_in) for linears (activations stay O(1) through many layers);
see docs/synthetic_checkpoints.md for every init rule. Each tensor's values depend only on (seed,
tensor name, shape), so the bf16 file is the f32 file rounded, whatever the sharding. Only numpy is
needed; tensors are generated and written chunk by chunk, so an 8B bf16 checkpoint (16 GB) is written
with well under 1 GB of RAM. Above --max-shard-gb the weights are split into
model-0000i-of-0000n.safetensors shards with a model.safetensors.index.json.

--gguf PATH (gemma3 only) also writes the same weights as an f32 GGUF file the way llama.cpp's
converter does (norm weights with the +1 baked in, llama.cpp tensor names) plus a minimal SPM
vocabulary of placeholder tokens, so an engine can be checked safetensors-vs-GGUF.

Usage:
  .venv/bin/python tools/make_synthetic_checkpoint.py --family llama --preset tiny --out /tmp/llama-tiny
  .venv/bin/python tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 --out /tmp/l8b
  .venv/bin/python tools/make_synthetic_checkpoint.py --preset qwen3-next-80b-a3b --layers 8 \\
      --experts 64 --out /tmp/q3n
"""
import argparse
import json
import math
import os
import re
import sys
import zlib

import numpy as np

FAMILIES = ("llama", "qwen3_next", "gemma3")

# ----------------------------------------------------------------------------------------- configs


def llama_config(vocab, hidden, inter, layers, heads, kv_heads, max_pos=131072):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1 if vocab < 128000 else 128000,
        "eos_token_id": 2 if vocab < 128000 else 128001,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": max_pos,
        "mlp_bias": False,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": vocab,
    }


def qwen3_next_config(vocab, hidden, layers, heads, kv_heads, head_dim, lin_k_heads, lin_v_heads,
                      lin_k_dim, lin_v_dim, experts, top_k, moe_inter, shared_inter, inter,
                      max_pos=262144, interval=4):
    return {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643 if vocab > 151643 else 1,
        "eos_token_id": 151645 if vocab > 151645 else 2,
        "decoder_sparse_step": 1,
        "full_attention_interval": interval,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,  # only for dense layers (mlp_only_layers); unused here
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": lin_k_dim,
        "linear_num_key_heads": lin_k_heads,
        "linear_num_value_heads": lin_v_heads,
        "linear_value_head_dim": lin_v_dim,
        "max_position_embeddings": max_pos,
        "mlp_only_layers": [],
        "moe_intermediate_size": moe_inter,
        "norm_topk_prob": True,
        "num_attention_heads": heads,
        "num_experts": experts,
        "num_experts_per_tok": top_k,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads,
        "output_router_logits": False,
        "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 10000000,
        "router_aux_loss_coef": 0.001,
        "shared_expert_intermediate_size": shared_inter,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": vocab,
    }


def gemma3_config(vocab, hidden, inter, layers, heads, kv_heads, head_dim, window,
                  max_pos=131072, rope_scaling=None):
    return {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_logit_softcapping": None,
        "bos_token_id": 2,
        "eos_token_id": 1,
        "final_logit_softcapping": None,
        "head_dim": head_dim,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "layer_types": gemma3_layer_types(layers),
        "max_position_embeddings": max_pos,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads,
        "pad_token_id": 0,
        # The attention scale is query_pre_attn_scalar^-0.5. llama.cpp (GGUF) uses head_dim^-0.5
        # for every size but 27B, so keep them equal for safetensors-vs-GGUF comparisons.
        "query_pre_attn_scalar": head_dim,
        "rms_norm_eps": 1e-06,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": rope_scaling,
        "rope_theta": 1000000.0,
        "sliding_window": window,
        "sliding_window_pattern": 6,
        "torch_dtype": "bfloat16",
        "use_bidirectional_attention": False,
        "use_cache": True,
        "vocab_size": vocab,
    }


def gemma3_layer_types(layers):
    # Five sliding layers, then one full (as llama.cpp hard-codes for gemma3 GGUF files).
    return ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)]


PRESETS = {
    # Tiny models for tests: a few layers, hidden 64, vocab 512; every file < 1.5 MB in f32.
    ("llama", "tiny"): lambda: llama_config(vocab=512, hidden=64, inter=192, layers=4, heads=4,
                                            kv_heads=2),
    ("qwen3_next", "tiny"): lambda: qwen3_next_config(
        vocab=512, hidden=64, layers=8, heads=4, kv_heads=2, head_dim=16, lin_k_heads=2,
        lin_v_heads=4, lin_k_dim=16, lin_v_dim=16, experts=4, top_k=2, moe_inter=16, shared_inter=32,
        inter=128, max_pos=4096),
    ("gemma3", "tiny"): lambda: gemma3_config(vocab=512, hidden=64, inter=128, layers=6, heads=4,
                                              kv_heads=2, head_dim=32, window=32, max_pos=4096),
    # Real shapes.
    ("llama", "llama-3.1-8b"): lambda: llama_config(vocab=128256, hidden=4096, inter=14336,
                                                    layers=32, heads=32, kv_heads=8),
    ("gemma3", "gemma-3-12b"): lambda: gemma3_config(
        vocab=262208, hidden=3840, inter=15360, layers=48, heads=16, kv_heads=8, head_dim=256,
        window=1024, rope_scaling={"rope_type": "linear", "factor": 8.0}),
    ("qwen3_next", "qwen3-next-80b-a3b"): lambda: qwen3_next_config(
        vocab=151936, hidden=2048, layers=48, heads=16, kv_heads=2, head_dim=256, lin_k_heads=16,
        lin_v_heads=32, lin_k_dim=128, lin_v_dim=128, experts=512, top_k=10, moe_inter=512,
        shared_inter=512, inter=5120),
}
PRESET_NAMES = sorted({p for _, p in PRESETS})


def make_config(family, preset, layers=None, experts=None, vocab=None, overrides=()):
    cfg = PRESETS[(family, preset)]()
    if layers is not None:
        cfg["num_hidden_layers"] = layers
        if family == "gemma3":
            cfg["layer_types"] = gemma3_layer_types(layers)
    if experts is not None:
        if family != "qwen3_next":
            raise SystemExit(f"--experts applies to qwen3_next only, not {family}")
        cfg["num_experts"] = experts
        cfg["num_experts_per_tok"] = min(cfg["num_experts_per_tok"], experts)
    if vocab is not None:
        cfg["vocab_size"] = vocab
        for k in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if isinstance(cfg.get(k), int) and cfg[k] >= vocab:
                cfg[k] = min(cfg[k], vocab - 1)
    for key, value in overrides:
        cfg[key] = value
    if family == "gemma3" and len(cfg["layer_types"]) != cfg["num_hidden_layers"]:
        cfg["layer_types"] = gemma3_layer_types(cfg["num_hidden_layers"])
    return cfg


# ----------------------------------------------------------------------------------------- tensors
# Each tensor: (name, shape, init) with init one of
#   ("linear", fan_in)   N(0, 1/fan_in)          ("normal", std)   N(0, std^2)
#   ("norm0",)           N(0, 0.1^2): stored zero-centred, the model uses 1 + w
#   ("norm1",)           1 + N(0, 0.1^2): a plain scale
#   ("normal_mean", mean, std)  N(mean, std^2)
#   ("a_log",)           log(U(1, 16))           ("uniform", lo, hi)


def llama_tensors(c):
    H, V, I = c["hidden_size"], c["vocab_size"], c["intermediate_size"]
    D = c.get("head_dim") or H // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * D, c["num_key_value_heads"] * D
    yield "model.embed_tokens.weight", (V, H), ("normal", 1.0)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (H,), ("norm1",)
        yield p + "self_attn.q_proj.weight", (q, H), ("linear", H)
        yield p + "self_attn.k_proj.weight", (kv, H), ("linear", H)
        yield p + "self_attn.v_proj.weight", (kv, H), ("linear", H)
        yield p + "self_attn.o_proj.weight", (H, q), ("linear", q)
        yield p + "post_attention_layernorm.weight", (H,), ("norm1",)
        yield p + "mlp.gate_proj.weight", (I, H), ("linear", H)
        yield p + "mlp.up_proj.weight", (I, H), ("linear", H)
        yield p + "mlp.down_proj.weight", (H, I), ("linear", I)
    yield "model.norm.weight", (H,), ("norm1",)
    yield "lm_head.weight", (V, H), ("linear", H)


def qwen3_next_layer_is_full(c, i):
    if c.get("layer_types"):
        return c["layer_types"][i] == "full_attention"
    return (i + 1) % c.get("full_attention_interval", 4) == 0


def qwen3_next_tensors(c):
    H, V = c["hidden_size"], c["vocab_size"]
    D, nh, nkv = c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    nk, nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    dk, dv, K = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"]
    key_dim, value_dim = nk * dk, nv * dv
    E, Im, Is = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    yield "model.embed_tokens.weight", (V, H), ("normal", 1.0)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (H,), ("norm0",)
        if qwen3_next_layer_is_full(c, i):
            # q_proj rows: per head [query (D), gate (D)].
            yield p + "self_attn.q_proj.weight", (nh * D * 2, H), ("linear", H)
            yield p + "self_attn.k_proj.weight", (nkv * D, H), ("linear", H)
            yield p + "self_attn.v_proj.weight", (nkv * D, H), ("linear", H)
            yield p + "self_attn.o_proj.weight", (H, nh * D), ("linear", nh * D)
            yield p + "self_attn.q_norm.weight", (D,), ("norm0",)
            yield p + "self_attn.k_norm.weight", (D,), ("norm0",)
        else:
            # in_proj_qkvz rows: per key head [q (dk), k (dk), v (r dv), z (r dv)], r = nv / nk;
            # in_proj_ba rows: per key head [b (r), a (r)].
            yield p + "linear_attn.in_proj_qkvz.weight", (2 * key_dim + 2 * value_dim, H), ("linear", H)
            yield p + "linear_attn.in_proj_ba.weight", (2 * nv, H), ("linear", H)
            yield p + "linear_attn.conv1d.weight", (2 * key_dim + value_dim, 1, K), ("linear", K)
            yield p + "linear_attn.dt_bias", (nv,), ("uniform", -3.0, 0.0)
            yield p + "linear_attn.A_log", (nv,), ("a_log",)
            yield p + "linear_attn.norm.weight", (dv,), ("norm1",)  # plain weight, not 1 + w
            yield p + "linear_attn.out_proj.weight", (H, value_dim), ("linear", value_dim)
        yield p + "post_attention_layernorm.weight", (H,), ("norm0",)
        yield p + "mlp.gate.weight", (E, H), ("linear", H)
        for e in range(E):
            q = f"{p}mlp.experts.{e}."
            yield q + "gate_proj.weight", (Im, H), ("linear", H)
            yield q + "up_proj.weight", (Im, H), ("linear", H)
            yield q + "down_proj.weight", (H, Im), ("linear", Im)
        yield p + "mlp.shared_expert.gate_proj.weight", (Is, H), ("linear", H)
        yield p + "mlp.shared_expert.up_proj.weight", (Is, H), ("linear", H)
        yield p + "mlp.shared_expert.down_proj.weight", (H, Is), ("linear", Is)
        yield p + "mlp.shared_expert_gate.weight", (1, H), ("linear", H)
    yield "model.norm.weight", (H,), ("norm0",)
    yield "lm_head.weight", (V, H), ("linear", H)


def gemma3_tensors(c):
    H, V, I, D = c["hidden_size"], c["vocab_size"], c["intermediate_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * D, c["num_key_value_heads"] * D
    # The embedding is also the (tied) output head. With an O(1) embedding the final hidden state
    # stays close to the current token's own embedding and a random model greedily repeats that
    # token forever. So the embedding is small (input rms 0.1 after the sqrt(H) scale, each layer
    # adds O(1)) and the final norm carries the output scale (1 + w ~ 10): logits are O(1).
    yield "model.embed_tokens.weight", (V, H), ("normal", 0.1 / math.sqrt(H))
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (H,), ("norm0",)
        yield p + "self_attn.q_proj.weight", (q, H), ("linear", H)
        yield p + "self_attn.k_proj.weight", (kv, H), ("linear", H)
        yield p + "self_attn.v_proj.weight", (kv, H), ("linear", H)
        yield p + "self_attn.o_proj.weight", (H, q), ("linear", q)
        yield p + "self_attn.q_norm.weight", (D,), ("norm0",)
        yield p + "self_attn.k_norm.weight", (D,), ("norm0",)
        yield p + "post_attention_layernorm.weight", (H,), ("norm0",)
        yield p + "pre_feedforward_layernorm.weight", (H,), ("norm0",)
        yield p + "mlp.gate_proj.weight", (I, H), ("linear", H)
        yield p + "mlp.up_proj.weight", (I, H), ("linear", H)
        yield p + "mlp.down_proj.weight", (H, I), ("linear", I)
        yield p + "post_feedforward_layernorm.weight", (H,), ("norm0",)
    yield "model.norm.weight", (H,), ("normal_mean", 9.0, NORM_STD)


TENSORS = {"llama": llama_tensors, "qwen3_next": qwen3_next_tensors, "gemma3": gemma3_tensors}
NORM_STD = 0.1
CHUNK_ELEMS = 1 << 24  # 16M elements (64 MB of f32) per generated chunk


def tensor_chunks(seed, name, shape, init):
    """Yields the tensor's float32 values in row chunks. The values depend only on (seed, name,
    shape, init); chunking is by whole rows of a fixed size, so it never changes them."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    n = int(np.prod(shape))
    row = int(np.prod(shape[1:])) if len(shape) > 1 else n
    rows_per_chunk = max(1, CHUNK_ELEMS // max(row, 1))
    rows = n // row if row else 0
    kind = init[0]
    for r0 in range(0, rows, rows_per_chunk):
        m = min(rows_per_chunk, rows - r0) * row
        if kind == "linear":
            x = rng.standard_normal(m, dtype=np.float32) * np.float32(1.0 / math.sqrt(init[1]))
        elif kind == "normal":
            x = rng.standard_normal(m, dtype=np.float32) * np.float32(init[1])
        elif kind == "norm0":
            x = rng.standard_normal(m, dtype=np.float32) * np.float32(NORM_STD)
        elif kind == "norm1":
            x = np.float32(1.0) + rng.standard_normal(m, dtype=np.float32) * np.float32(NORM_STD)
        elif kind == "normal_mean":
            x = np.float32(init[1]) + rng.standard_normal(m, dtype=np.float32) * np.float32(init[2])
        elif kind == "a_log":
            x = np.log(rng.uniform(1.0, 16.0, m)).astype(np.float32)
        elif kind == "uniform":
            x = rng.uniform(init[1], init[2], m).astype(np.float32)
        else:
            raise ValueError(f"unknown init {init}")
        yield x


def f32_to_bf16_bits(x):
    """Round-to-nearest-even float32 -> bfloat16 bit patterns (uint16); inputs are finite."""
    u = x.view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def bf16_bits_to_f32(b):
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


# ----------------------------------------------------------------------------------------- writing

ST_DTYPE = {"f32": ("F32", 4), "bf16": ("BF16", 2)}


def safetensors_header(specs, dtype):
    name, size = ST_DTYPE[dtype]
    header = {"__metadata__": {"format": "pt"}}
    off = 0
    for tname, shape, _ in specs:
        n = int(np.prod(shape)) * size
        header[tname] = {"dtype": name, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the reference writer pads the header to 8 bytes
    return len(text).to_bytes(8, "little") + text, off


def write_safetensors(path, specs, dtype, seed, progress):
    head, _ = safetensors_header(specs, dtype)
    with open(path, "wb") as f:
        f.write(head)
        for name, shape, init in specs:
            for x in tensor_chunks(seed, name, shape, init):
                data = x if dtype == "f32" else f32_to_bf16_bits(x)
                f.write(memoryview(np.ascontiguousarray(data)).cast("B"))
                progress.update(data.nbytes)


def plan_shards(specs, dtype, max_shard_bytes):
    size = ST_DTYPE[dtype][1]
    shards, cur, cur_bytes = [], [], 0
    for s in specs:
        n = int(np.prod(s[1])) * size
        if cur and cur_bytes + n > max_shard_bytes:
            shards.append(cur)
            cur, cur_bytes = [], 0
        cur.append(s)
        cur_bytes += n
    if cur:
        shards.append(cur)
    return shards


def write_checkpoint(out, family, cfg, dtype="f32", seed=0, max_shard_bytes=4 << 30, quiet=False):
    from tqdm import tqdm

    os.makedirs(out, exist_ok=True)
    cfg = dict(cfg)
    cfg["torch_dtype"] = "float32" if dtype == "f32" else "bfloat16"
    specs = list(TENSORS[family](cfg))
    total = sum(int(np.prod(s[1])) for s in specs) * ST_DTYPE[dtype][1]
    for stale in os.listdir(out):  # a re-run with other sharding must not leave old shards behind
        if re.fullmatch(r"model(-\d{5}-of-\d{5})?\.safetensors|model\.safetensors\.index\.json", stale):
            os.remove(os.path.join(out, stale))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    shards = plan_shards(specs, dtype, max_shard_bytes)
    with tqdm(total=total, unit="B", unit_scale=True, desc=f"{family} -> {out}", disable=quiet,
              file=sys.stderr) as bar:
        if len(shards) == 1:
            write_safetensors(os.path.join(out, "model.safetensors"), specs, dtype, seed, bar)
        else:
            weight_map = {}
            for k, shard in enumerate(shards):
                fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
                write_safetensors(os.path.join(out, fname), shard, dtype, seed, bar)
                weight_map.update({s[0]: fname for s in shard})
            with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
                json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
                f.write("\n")
    n_params = sum(int(np.prod(s[1])) for s in specs)
    return {"tensors": len(specs), "parameters": n_params, "bytes": total, "shards": len(shards)}


# ----------------------------------------------------------------------------------------- reading

def read_checkpoint(path):
    """name -> float32 numpy array (memory-mapped for f32) of a checkpoint this tool wrote (or any
    F32/BF16 safetensors checkpoint)."""
    index = os.path.join(path, "model.safetensors.index.json")
    files = (sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index)
             else ["model.safetensors"])
    out = {}
    for fname in files:
        fpath = os.path.join(path, fname)
        with open(fpath, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        mm = np.memmap(fpath, dtype=np.uint8, mode="r")
        base = 8 + n
        for name, t in header.items():
            if name == "__metadata__":
                continue
            b, e = t["data_offsets"]
            raw = mm[base + b: base + e]
            if t["dtype"] == "F32":
                arr = raw.view(np.float32)
            elif t["dtype"] == "BF16":
                arr = bf16_bits_to_f32(raw.view(np.uint16))
            else:
                raise ValueError(f"{fpath}: tensor {name} has dtype {t['dtype']}")
            out[name] = arr.reshape(t["shape"])
    return out


# ----------------------------------------------------------------------------------------- GGUF

GEMMA3_GGUF_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "post_feedforward_layernorm": "post_ffw_norm",
}


def gemma3_gguf_name(hf_name):
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    parts = hf_name.split(".")  # model.layers.N.<module...>.weight
    if parts[:2] != ["model", "layers"] or parts[-1] != "weight":
        raise ValueError(f"unexpected gemma3 tensor {hf_name}")
    return f"blk.{parts[2]}.{GEMMA3_GGUF_NAMES['.'.join(parts[3:-1])]}.weight"


def write_gemma3_gguf(checkpoint_dir, out_path, name="synthetic-gemma3"):
    """Writes the gemma3 checkpoint as an f32 GGUF file the way llama.cpp's converter does: +1 baked
    into every norm weight, llama.cpp tensor names, no output tensor (tied), and a placeholder SPM
    vocabulary (ids 0..3 = <pad> <eos> <bos> <unk>, the rest <tok_N>)."""
    import gguf

    cfg = json.load(open(os.path.join(checkpoint_dir, "config.json")))
    if cfg.get("model_type") != "gemma3_text":
        raise SystemExit(f"--gguf writes gemma3 only; {checkpoint_dir} is {cfg.get('model_type')}")
    if cfg["layer_types"] != gemma3_layer_types(cfg["num_hidden_layers"]):
        raise SystemExit("llama.cpp hard-codes the 5:1 gemma3 layer pattern; this config differs")
    if cfg["query_pre_attn_scalar"] != cfg["head_dim"]:
        raise SystemExit("llama.cpp scales gemma3 attention by head_dim^-0.5; this config's "
                         "query_pre_attn_scalar differs")
    tensors = read_checkpoint(checkpoint_dir)
    V = cfg["vocab_size"]
    w = gguf.GGUFWriter(out_path, "gemma3")
    w.add_name(name)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_sliding_window(cfg["sliding_window"])
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type", rs.get("type")) == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rs["factor"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    tokens = [specials[i] if i < 4 else f"<tok_{i}>" for i in range(V)]
    types = [gguf.TokenType.CONTROL] * 3 + [gguf.TokenType.UNKNOWN] + [gguf.TokenType.NORMAL] * (V - 4)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * V)
    w.add_token_types(types[:V])
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    order = [n for n, _, _ in gemma3_tensors(cfg)]
    for hf in order:
        t = tensors[hf]
        w.add_tensor_info(gemma3_gguf_name(hf), t.shape, np.dtype(np.float32), t.size * 4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for hf in order:
        t = np.ascontiguousarray(tensors[hf], dtype=np.float32)
        if hf.endswith("norm.weight"):
            t = t + np.float32(1.0)  # what convert_hf_to_gguf.py does for Gemma 3
        w.write_tensor_data(t)
    w.close()


# ----------------------------------------------------------------------------------------- CLI

def parse_override(text):
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--set expects KEY=JSON_VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value  # a bare string


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=FAMILIES,
                    help="model family (implied by a real-shape preset)")
    ap.add_argument("--preset", default="tiny", choices=PRESET_NAMES,
                    help="tiny (tests) or a real model's shapes (default: tiny)")
    ap.add_argument("--layers", type=int, help="override num_hidden_layers")
    ap.add_argument("--experts", type=int, help="override num_experts (qwen3_next)")
    ap.add_argument("--vocab", type=int, help="override vocab_size")
    ap.add_argument("--set", dest="overrides", action="append", default=[], type=parse_override,
                    metavar="KEY=VALUE", help="override any config.json key (JSON value); "
                    "tensor shapes follow the config")
    ap.add_argument("--dtype", choices=sorted(ST_DTYPE), default="bf16",
                    help="stored dtype (default: bf16)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-shard-gb", type=float, default=4.0,
                    help="split into shards above this size (default: 4)")
    ap.add_argument("--gguf", metavar="PATH", help="gemma3 only: also write the weights as f32 GGUF")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    a = ap.parse_args(argv)

    families = [f for f, p in PRESETS if p == a.preset]
    family = a.family or (families[0] if len(families) == 1 else None)
    if family is None:
        ap.error(f"--preset {a.preset} needs --family ({', '.join(FAMILIES)})")
    if (family, a.preset) not in PRESETS:
        ap.error(f"preset {a.preset} is not a {family} model (it is {', '.join(families)})")
    for name, value in (("--layers", a.layers), ("--experts", a.experts), ("--vocab", a.vocab)):
        if value is not None and value < 1:
            ap.error(f"{name} must be >= 1, got {value}")
    if a.gguf and family != "gemma3":
        ap.error("--gguf is for gemma3 only")
    if a.experts is not None and family != "qwen3_next":
        ap.error(f"--experts applies to qwen3_next only, not {family}")
    cfg = make_config(family, a.preset, a.layers, a.experts, a.vocab, a.overrides)
    stats = write_checkpoint(a.out, family, cfg, a.dtype, a.seed, int(a.max_shard_gb * (1 << 30)),
                             a.quiet)
    print(f"{family} {a.preset}: {stats['parameters']:,} parameters, {stats['tensors']} tensors, "
          f"{stats['bytes'] / 1e6:.1f} MB {a.dtype} in {stats['shards']} file(s) -> {a.out}")
    if a.gguf:
        write_gemma3_gguf(a.out, a.gguf)
        print(f"gguf -> {a.gguf} ({os.path.getsize(a.gguf) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
