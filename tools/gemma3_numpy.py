#!/usr/bin/env python3
"""Plain fp32 numpy reference forward for Gemma 3 (text) loaded from a GGUF file.

Independent of llama.cpp and of the C++ engine: weights are read with gguf.GGUFReader and
dequantized to float32 with gguf.quants.dequantize; every activation is float32.

Math (see /work/shared/reference/model-facts.md section 1):
  x = embed[ids] * sqrt(hidden)
  per layer:  x += post_attn_norm(attn(attn_norm(x)))
              x += post_ffw_norm(down(gelu_tanh(gate(h)) * up(h))),  h = ffn_norm(x)
  logits = output_norm(x) @ embed.T          (tied head, no softcapping)
RMSNorm multiplies by the GGUF weight directly (the converter baked in the +1).
Attention: q_norm/k_norm per head, then NeoX RoPE (base 1e6 on full layers, 1e4 on sliding
layers), scale query_pre_attn_scalar^-0.5 (= head_dim^-0.5 here), GQA, causal; sliding layers
(every layer except (i+1) % 6 == 0) see key k from query q only when q - W < k <= q.

Usage as a library:
    m = Gemma3("model.gguf")
    cache = m.new_cache()
    logits = m.forward(ids, cache)            # logits of the last position, shape (vocab,)
    logits = m.forward([next_id], cache)      # incremental decode against the KV cache
Usage as a script:  python tools/gemma3_numpy.py model.gguf 2 651 6037 ...   (prints greedy tokens)
"""
import math
import sys
import time

import numpy as np
import gguf
from gguf.quants import dequantize


def rms_norm(x, w, eps):
    x = x.astype(np.float32, copy=False)
    ms = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
    return (x / np.sqrt(ms + np.float32(eps))) * w


def gelu_tanh(x):
    c = np.float32(math.sqrt(2.0 / math.pi))
    return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(c * (x + np.float32(0.044715) * x * x * x)))


def rope_neox(x, pos, base):
    """x: (..., n, d) float32; pos: (n,) absolute positions. Pairs element i with i + d/2."""
    d = x.shape[-1]
    half = d // 2
    inv = (np.float32(base) ** (-np.arange(0, half, dtype=np.float32) * np.float32(2.0 / d))).astype(np.float32)
    ang = pos.astype(np.float32)[:, None] * inv[None, :]          # (n, half)
    cos, sin = np.cos(ang), np.sin(ang)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(np.float32)


class Gemma3:
    def __init__(self, path, q_chunk=1024):
        r = gguf.GGUFReader(path)
        f = lambda k: r.fields[k].contents()  # noqa: E731
        arch = f("general.architecture")
        assert arch == "gemma3", arch
        self.n_layer = f(f"{arch}.block_count")
        self.hidden = f(f"{arch}.embedding_length")
        self.n_head = f(f"{arch}.attention.head_count")
        self.n_kv = f(f"{arch}.attention.head_count_kv")
        self.head_dim = f(f"{arch}.attention.key_length")
        self.eps = f(f"{arch}.attention.layer_norm_rms_epsilon")
        self.window = f(f"{arch}.attention.sliding_window")
        self.rope_full = f(f"{arch}.rope.freq_base")
        self.rope_local = 10000.0
        self.scale = np.float32(self.head_dim ** -0.5)   # query_pre_attn_scalar = 256 for 270m
        self.q_chunk = q_chunk
        t = {}
        for ten in r.tensors:
            # numpy shape of the dequantized tensor is (out, in) for matrices, i.e. reversed GGUF dims
            t[ten.name] = np.ascontiguousarray(dequantize(ten.data, ten.tensor_type).astype(np.float32))
        self.embd = t["token_embd.weight"]                  # (vocab, hidden)
        self.vocab = self.embd.shape[0]
        self.out_norm = t["output_norm.weight"]
        assert "output.weight" not in t, "untied lm head not handled"
        self.layers = []
        for i in range(self.n_layer):
            g = lambda n: t[f"blk.{i}.{n}.weight"]  # noqa: E731
            self.layers.append(dict(
                attn_norm=g("attn_norm"), wq=g("attn_q").T.copy(), wk=g("attn_k").T.copy(),
                wv=g("attn_v").T.copy(), wo=g("attn_output").T.copy(),
                q_norm=g("attn_q_norm"), k_norm=g("attn_k_norm"), post_attn_norm=g("post_attention_norm"),
                ffn_norm=g("ffn_norm"), w_gate=g("ffn_gate").T.copy(), w_up=g("ffn_up").T.copy(),
                w_down=g("ffn_down").T.copy(), post_ffw_norm=g("post_ffw_norm"),
                sliding=(i + 1) % 6 != 0))

    def new_cache(self):
        return dict(n=0, k=[None] * self.n_layer, v=[None] * self.n_layer)

    def _append_kv(self, cache, i, k, v, p0):
        """Store k, v at positions p0.. in layer i's cache (grown by doubling); return all keys/values."""
        n = k.shape[1]
        buf_k, buf_v = cache["k"][i], cache["v"][i]
        if buf_k is None or buf_k.shape[1] < p0 + n:
            cap = max(p0 + n, 2 * (0 if buf_k is None else buf_k.shape[1]))
            new_k = np.zeros((self.n_kv, cap, self.head_dim), dtype=np.float32)
            new_v = np.zeros_like(new_k)
            if buf_k is not None:
                new_k[:, :p0], new_v[:, :p0] = buf_k[:, :p0], buf_v[:, :p0]
            cache["k"][i], cache["v"][i] = buf_k, buf_v = new_k, new_v
        buf_k[:, p0:p0 + n], buf_v[:, p0:p0 + n] = k, v
        return buf_k[:, :p0 + n], buf_v[:, :p0 + n]

    def _attention(self, q, k, v, q_pos0, sliding):
        """q: (H, n, D) for absolute positions q_pos0..q_pos0+n-1; k, v: (KV, T, D) for positions 0..T-1."""
        H, n, D = q.shape
        group = H // self.n_kv
        out = np.empty((H, n, D), dtype=np.float32)
        for c0 in range(0, n, self.q_chunk):
            c1 = min(n, c0 + self.q_chunk)
            qp = np.arange(q_pos0 + c0, q_pos0 + c1)                    # query positions
            lo = max(0, int(qp[0]) - self.window + 1) if sliding else 0  # first key anyone here may see
            hi = int(qp[-1]) + 1
            kp = np.arange(lo, hi)
            mask = kp[None, :] <= qp[:, None]
            if sliding:
                mask &= kp[None, :] > qp[:, None] - self.window
            for h in range(H):
                kh, vh = k[h // group, lo:hi], v[h // group, lo:hi]
                s = (q[h, c0:c1] @ kh.T) * self.scale                   # (c, keys)
                s = np.where(mask, s, np.float32(-np.inf))
                s -= s.max(axis=-1, keepdims=True)
                p = np.exp(s)
                p /= p.sum(axis=-1, keepdims=True)
                out[h, c0:c1] = p @ vh
        return out

    def forward(self, ids, cache, all_logits=False):
        """Run tokens `ids` after the cache contents; returns logits of the last position (or all)."""
        ids = np.asarray(ids, dtype=np.int64)
        n, p0 = len(ids), cache["n"]
        pos = np.arange(p0, p0 + n)
        H, KV, D = self.n_head, self.n_kv, self.head_dim
        x = self.embd[ids] * np.float32(math.sqrt(self.hidden))
        for i, L in enumerate(self.layers):
            h = rms_norm(x, L["attn_norm"], self.eps)
            q = (h @ L["wq"]).reshape(n, H, D).transpose(1, 0, 2)
            k = (h @ L["wk"]).reshape(n, KV, D).transpose(1, 0, 2)
            v = (h @ L["wv"]).reshape(n, KV, D).transpose(1, 0, 2)
            q = rms_norm(q, L["q_norm"], self.eps)
            k = rms_norm(k, L["k_norm"], self.eps)
            base = self.rope_local if L["sliding"] else self.rope_full
            q, k = rope_neox(q, pos, base), rope_neox(k, pos, base)
            k, v = self._append_kv(cache, i, k, v, p0)                  # (KV, p0 + n, D) views
            a = self._attention(q, k, v, p0, L["sliding"])             # (H, n, D)
            a = a.transpose(1, 0, 2).reshape(n, H * D) @ L["wo"]
            x = x + rms_norm(a, L["post_attn_norm"], self.eps)
            h = rms_norm(x, L["ffn_norm"], self.eps)
            m = (gelu_tanh(h @ L["w_gate"]) * (h @ L["w_up"])) @ L["w_down"]
            x = x + rms_norm(m, L["post_ffw_norm"], self.eps)
        cache["n"] = p0 + n
        x = x if all_logits else x[-1:]
        logits = rms_norm(x, self.out_norm, self.eps) @ self.embd.T
        return logits if all_logits else logits[0]

    def greedy(self, ids, n_new, cache=None):
        """Prefill `ids`, then greedily decode n_new tokens.
        Returns (first-token logits, tokens, per-step top1 - top2 logit margins)."""
        cache = cache if cache is not None else self.new_cache()
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
        sys.exit("usage: gemma3_numpy.py MODEL.gguf ID [ID ...]")
    t0 = time.time()
    m = Gemma3(sys.argv[1])
    print(f"loaded in {time.time() - t0:.1f}s", file=sys.stderr)
    t0 = time.time()
    first, toks, _ = m.greedy([int(a) for a in sys.argv[2:]], 16)
    top = np.argsort(-first)[:10]
    print("top10:", [(int(i), float(first[i])) for i in top])
    print("greedy:", toks, f"({time.time() - t0:.1f}s)")
