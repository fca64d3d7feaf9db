# cuDNN's fused attention through PyTorch (the anchor's backend), same shapes and timing as probe.
import sys, time, torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
for n in [int(x) for x in sys.argv[1:]] or [8192, 32768, 131072]:
    q = torch.rand(1, 32, n, 128, device='cuda', dtype=torch.bfloat16) * 2 - 1
    k = torch.rand(1, 8, n, 128, device='cuda', dtype=torch.bfloat16) * 2 - 1
    v = torch.rand(1, 8, n, 128, device='cuda', dtype=torch.bfloat16) * 2 - 1
    kk, vv = k.repeat_interleave(4, 1), v.repeat_interleave(4, 1)
    flops = 4 * 128 * 32 * n * (n + 1) / 2
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        run = lambda: F.scaled_dot_product_attention(q, kk, vv, is_causal=True)
        run(); torch.cuda.synchronize(); time.sleep(0.3)
        def t(r):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(r): run()
            b.record(); b.synchronize(); return a.elapsed_time(b) / r
        one = t(1); sus = t(20)
    print(f"cudnn N {n:6d}: one run after idle {one:8.3f} ms {flops/one/1e9:6.1f} TFLOP/s; "
          f"20 back-to-back {sus:8.3f} ms {flops/sus/1e9:6.1f} TFLOP/s", flush=True)
