#!/usr/bin/env python3
"""Plain fp32 numpy reference forward for Llama-family GGUF files (SmolLM2-135M-Instruct).

Independent of llama.cpp and of the C++ engine: weights are read with gguf.GGUFReader and
dequantized to float32 with gguf.quants.dequantize; every activation is float32.

Math (the Llama architecture as stored in GGUF):
  x = embed[ids]
  per layer:  x += wo(attn(rope(wq h), rope(wk h), wv h)),  h = attn_norm(x)
              x += down(silu(gate(h)) * up(h)),            h = ffn_norm(x)
  logits = output_norm(x) @ output.T   (output = token_embd when the file has no output.weight)
RMSNorm: x / sqrt(mean(x^2) + eps) * w. Attention: GQA, causal, scale head_dim^-0.5.
RoPE: adjacent pairs (2i, 2i + 1) rotated by pos * base^(-2i / d): llama.cpp's convert script
permutes the Q/K rows of Hugging Face checkpoints so that this form equals HF's rotate_half one.

Usage as a library:
    m = Llama("model.gguf")
    first, tokens, margins = m.greedy(ids, 32)
Usage as a script:  python tools/llama_numpy.py model.gguf 1 2 3 ...   (prints greedy tokens)
"""
import sys
import time

import gguf
import numpy as np
from gguf.quants import dequantize


def rms_norm(x, w, eps):
    ms = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
    return (x / np.sqrt(ms + np.float32(eps))) * w


def rope_adjacent(x, pos, base):
    """x: (H, n, d) float32; pos: (n,). Rotates the pairs (2i, 2i + 1)."""
    d = x.shape[-1]
    inv = np.float32(base) ** (-np.arange(0, d, 2, dtype=np.float32) / np.float32(d))
    ang = pos.astype(np.float32)[:, None] * inv[None, :]            # (n, d/2)
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


class Llama:
    def __init__(self, path, q_chunk=1024):
        r = gguf.GGUFReader(path)
        f = lambda k: r.fields[k].contents()  # noqa: E731
        arch = f("general.architecture")
        assert arch == "llama", arch
        self.n_layer = f("llama.block_count")
        self.n_head = f("llama.attention.head_count")
        self.n_kv = f("llama.attention.head_count_kv")
        self.hidden = f("llama.embedding_length")
        self.head_dim = self.hidden // self.n_head
        self.eps = f("llama.attention.layer_norm_rms_epsilon")
        self.base = f("llama.rope.freq_base")
        self.scale = np.float32(self.head_dim ** -0.5)
        self.q_chunk = q_chunk
        t = {ten.name: np.ascontiguousarray(
                 dequantize(ten.data, ten.tensor_type).astype(np.float32)) for ten in r.tensors}
        self.embd = t["token_embd.weight"]                            # (vocab, hidden)
        self.head = t.get("output.weight", self.embd)                 # (vocab, hidden)
        self.out_norm = t["output_norm.weight"]
        self.layers = []
        for i in range(self.n_layer):
            g = lambda n: t[f"blk.{i}.{n}.weight"]  # noqa: E731
            self.layers.append(dict(
                attn_norm=g("attn_norm"), wq=g("attn_q").T.copy(), wk=g("attn_k").T.copy(),
                wv=g("attn_v").T.copy(), wo=g("attn_output").T.copy(), ffn_norm=g("ffn_norm"),
                w_gate=g("ffn_gate").T.copy(), w_up=g("ffn_up").T.copy(),
                w_down=g("ffn_down").T.copy()))

    def new_cache(self):
        return dict(n=0, k=[None] * self.n_layer, v=[None] * self.n_layer)

    def _attention(self, q, k, v, q_pos0):
        """q: (H, n, D) at positions q_pos0..; k, v: (KV, T, D) at positions 0..T-1."""
        H, n, D = q.shape
        group = H // self.n_kv
        out = np.empty((H, n, D), dtype=np.float32)
        for c0 in range(0, n, self.q_chunk):
            c1 = min(n, c0 + self.q_chunk)
            qp = np.arange(q_pos0 + c0, q_pos0 + c1)
            hi = int(qp[-1]) + 1
            mask = np.arange(hi)[None, :] <= qp[:, None]
            for h in range(H):
                s = (q[h, c0:c1] @ k[h // group, :hi].T) * self.scale
                s = np.where(mask, s, np.float32(-np.inf))
                s -= s.max(axis=-1, keepdims=True)
                p = np.exp(s)
                p /= p.sum(axis=-1, keepdims=True)
                out[h, c0:c1] = p @ v[h // group, :hi]
        return out

    def forward(self, ids, cache):
        """Runs `ids` after the cache contents; returns the last position's logits (vocab,)."""
        ids = np.asarray(ids, dtype=np.int64)
        n, p0 = len(ids), cache["n"]
        pos = np.arange(p0, p0 + n)
        H, KV, D = self.n_head, self.n_kv, self.head_dim
        x = self.embd[ids]
        for i, L in enumerate(self.layers):
            h = rms_norm(x, L["attn_norm"], self.eps)
            q = rope_adjacent((h @ L["wq"]).reshape(n, H, D).transpose(1, 0, 2), pos, self.base)
            k = rope_adjacent((h @ L["wk"]).reshape(n, KV, D).transpose(1, 0, 2), pos, self.base)
            v = (h @ L["wv"]).reshape(n, KV, D).transpose(1, 0, 2)
            if cache["k"][i] is not None:
                k = np.concatenate([cache["k"][i], k], axis=1)
                v = np.concatenate([cache["v"][i], v], axis=1)
            cache["k"][i], cache["v"][i] = k, v
            a = self._attention(q, k, v, p0).transpose(1, 0, 2).reshape(n, H * D)
            x = x + a @ L["wo"]
            h = rms_norm(x, L["ffn_norm"], self.eps)
            g = h @ L["w_gate"]
            x = x + ((g / (np.float32(1) + np.exp(-g))) * (h @ L["w_up"])) @ L["w_down"]
        cache["n"] = p0 + n
        return (rms_norm(x[-1:], self.out_norm, self.eps) @ self.head.T)[0]

    def greedy(self, ids, n_new):
        """Prefill, then n_new greedy tokens: (first-token logits, tokens, top1 - top2 margins)."""
        cache = self.new_cache()
        logits = self.forward(ids, cache)
        first = logits.copy()
        out, margins = [], []
        for j in range(n_new):
            tok = int(np.argmax(logits))
            top2 = np.partition(logits, -2)[-2:]
            out.append(tok)
            margins.append(float(abs(top2[1] - top2[0])))
            if j + 1 < n_new:
                logits = self.forward([tok], cache)
        return first, out, margins


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: llama_numpy.py MODEL.gguf ID [ID ...]")
    t0 = time.time()
    m = Llama(sys.argv[1])
    print(f"loaded in {time.time() - t0:.1f}s", file=sys.stderr)
    t0 = time.time()
    first, toks, _ = m.greedy([int(a) for a in sys.argv[2:]], 16)
    print("top5:", [(int(i), float(first[i])) for i in np.argsort(-first)[:5]])
    print("greedy:", toks, f"({time.time() - t0:.1f}s)")
