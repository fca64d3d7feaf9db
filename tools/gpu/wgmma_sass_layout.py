#!/usr/bin/env python3
"""Where ptxas put the attention kernel's GEMMs, waits, shuffles and exponentials, in order.

The consumer schedules of src/ops/cuda/sm90/flash_attention_wgmma.cu differ only in instruction
order, so whether the softmax runs beside the PV GEMM is read in the SASS, not the source: this
prints, for each kernel instantiation, run-length groups of HGMMA (register-A ones are PV, the
others S = QK^T), WARPGROUP.DEPBAR (the waits), SHFL and MUFU.EX2 with their line numbers. In
the 30th session's build the default schedule (WgmmaAttentionScheduleE1) showed its PV wait
(DEPBAR 0x0) before all 64 MUFU.EX2 of a tile, and kIntraOverlapPvBesideExp (E2) the 8 PV
HGMMAs interleaved with the unmasked tiles' exponentials.

nvdisasm is not in the CUDA image here; NVIDIA's PyPI wheel has it:

  pip download --no-deps nvidia-cuda-nvdisasm -d /tmp/nvd && cd /tmp/nvd && \\
    python3 -m zipfile -e nvidia_cuda_nvdisasm-*.whl x && chmod +x x/nvidia/cu*/bin/nvdisasm
  nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -cubin -o /tmp/fa.cubin \\
    src/ops/cuda/sm90/flash_attention_wgmma.cu
  /tmp/nvd/x/nvidia/cu*/bin/nvdisasm -c /tmp/fa.cubin > /tmp/fa.sass
  python3 tools/gpu/wgmma_sass_layout.py /tmp/fa.sass [--kernel E2ELi3E]
"""
import argparse
import re
import sys


def kind(instr):
    if instr.startswith("HGMMA"):
        # PV reads its A operand (P) from registers: "HGMMA... R24, R152, gdesc..."
        return "HGMMA pv" if re.search(r"HGMMA\S*\s+R\d+,\s*R\d+,", instr) else "HGMMA s"
    for name in ("WARPGROUP.DEPBAR", "WARPGROUP.ARRIVE", "SHFL", "MUFU.EX2", "VOTE"):
        if instr.startswith(name):
            return name
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sass", help="nvdisasm -c output")
    ap.add_argument("--kernel", default="", help="only kernels whose name contains this")
    a = ap.parse_args()
    kernels = []  # (name, [(line, kind, text)])
    for n, raw in enumerate(open(a.sass), 1):
        line = re.sub(r"/\*[0-9a-f]*\*/", "", raw).strip()
        m = re.match(r"^\.text\.(\S+):$", line)
        if m:
            kernels.append((m.group(1), []))
            continue
        if not kernels:
            continue
        instr = re.sub(r"^@!?U?P\w+\s+", "", line)
        k = kind(instr)
        if k:
            kernels[-1][1].append((n, k, instr.rstrip(" ;")))
    for name, events in kernels:
        if a.kernel not in name:
            continue
        sched = re.search(r"ScheduleE(\d)ELi(\d)E", name)
        print(f"== {name[:40]}... schedule E{sched.group(1)}, {sched.group(2)} stages"
              if sched else f"== {name}")
        group = None
        for n, k, text in events:
            key = k if k != "WARPGROUP.DEPBAR" else text  # each wait on its own line
            if group and group[1] == key:
                group[2] += 1
                group[3] = n
                continue
            if group:
                print(f"  {group[0]:>6}-{group[3]:<6} {group[2]:3d} x {group[1]}")
            group = [n, key, 1, n]
        if group:
            print(f"  {group[0]:>6}-{group[3]:<6} {group[2]:3d} x {group[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
