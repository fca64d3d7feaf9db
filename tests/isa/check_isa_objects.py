#!/usr/bin/env python3
"""The build invariant of the runtime ISA dispatch (core/cpu_isa.h, docs/kernels.md).

AVX-512 instructions (zmm or mask registers, EVEX-only xmm16..31) and AMX tile instructions (tmm
registers, tile configuration) may appear only in the objects of *_avx512*.cc and *_amx.cc files,
and those objects may define no weak (inline, template) symbol: the linker
keeps one copy of such a symbol for every caller, so a copy compiled with AVX-512 flags could run
on the AVX2 path and stop an AVX2-only CPU with an illegal instruction.
Usage: check_isa_objects.py OBJECT_DIR [OBJECT_DIR ...]
"""
import pathlib
import re
import subprocess
import sys

EVEX = re.compile(r"%zmm|%k[1-7]\b|%[xy]mm(1[6-9]|2[0-9]|3[01])\b|%tmm|\b(ldtilecfg|tilerelease)\b")


def evex_lines(obj):
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(obj)], check=True,
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if EVEX.search(line)]


def weak_symbols(obj):
    out = subprocess.run(["nm", "-C", "--defined-only", str(obj)], check=True,
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if re.match(r"\S+ [WVu] ", line)]


def main():
    objects = [o for d in sys.argv[1:] for o in pathlib.Path(d).rglob("*.o")]
    isa_objects = [o for o in objects if "_avx512" in o.name or "_amx." in o.name]
    errors = []
    for obj in objects:
        if obj in isa_objects:
            errors += [f"{obj}: weak symbol {s}" for s in weak_symbols(obj)]
        else:
            errors += [f"{obj}: AVX-512 instruction `{l.strip()}`" for l in evex_lines(obj)[:3]]
    if not isa_objects or not any(evex_lines(o) for o in isa_objects):
        errors.append("no *_avx512* object with AVX-512 code found: nothing was checked")
    for e in errors:
        print(e)
    print(f"{len(objects)} objects, {len(isa_objects)} AVX-512 ones: "
          f"{'FAIL' if errors else 'ok'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
