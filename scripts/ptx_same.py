#!/usr/bin/env python3
"""Do two builds of CUDA sources hold the same kernels? Compares every .entry / .func of OLD.ptx with those of the
NEW PTX files (one or more: a file split into translation units), up to what differs between translation units
without changing code: virtual register and label numbers, local-depot and call-sequence numbers, the hash in the
names of internal (static) functions, blank lines, and where a __shared__ variable is declared (module scope or
demoted into its only kernel) and its name (a function-local one's carries the function's signature). Exit 0 when
every entry matches, 1 otherwise (the differing names printed).

Make the PTX with the build's nvcc flags plus `-ptx` (no -lineinfo), e.g. for the decode kernels:
  nvcc -DSTRATA_HAVE_CUDA=1 -D_FILE_OFFSET_BITS=64 -D_GNU_SOURCE -Iinclude -Isrc -O3 -DNDEBUG -arch=compute_90 \\
       --use_fast_math --expt-relaxed-constexpr -x cu -ptx src/cuda/decode.cu -o new.ptx

usage: scripts/ptx_same.py OLD.ptx NEW.ptx [NEW2.ptx ...]
"""
import re
import sys


FUNC = re.compile(r"^(?:\.visible |\.weak |\.extern )*\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([A-Za-z0-9_$]+)")


def entries(path):
    """name -> [body, ...] of every function in a PTX file."""
    out, cur, buf = {}, None, []
    with open(path) as f:
        for line in f:
            m = FUNC.match(line)
            if m:
                cur, buf = m.group(1), [line]
                continue
            if cur is not None:
                buf.append(line)
                if line.startswith("}"):
                    out.setdefault(cur, []).append("".join(buf))
                    cur = None
    return out


def norm(s):
    s = re.sub(r"\d+_INTERNAL_[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]+", "N_INTERNAL_X", s)
    s = re.sub(r"\$L__\w+", "LABEL", s)
    s = re.sub(r"_ZZ\w+", "LOCAL_STATIC", s)  # a function-local __shared__: its name carries the function's signature
    s = re.sub(r"%(rd|r|f|fd|p|rs|h|hh)\d+", r"%\1", s)
    s = re.sub(r"\.reg \.\w+ \s*%\w+<\d+>;", ".reg", s)
    s = re.sub(r"__local_depot\d+", "DEPOT", s)
    s = re.sub(r"callseq \d+", "callseq", s)
    return "\n".join(l for l in s.split("\n")
                     if l.strip() and "demoted variable" not in l and not l.strip().startswith(".shared .align"))


def main():
    if len(sys.argv) < 3:
        print(__doc__.strip().split("\n")[-1], file=sys.stderr)
        return 2
    old = {norm(k): {norm(b) for b in v} for k, v in entries(sys.argv[1]).items()}
    new = {}
    for p in sys.argv[2:]:
        for k, v in entries(p).items():
            new.setdefault(norm(k), set()).update(norm(b) for b in v)
    missing = sorted(k for k in old if k not in new)
    extra = sorted(k for k in new if k not in old)
    differ = sorted(k for k in old if k in new and old[k] != new[k])
    print(f"{len(old)} functions in {sys.argv[1]}, {len(new)} in the new PTX: {len(missing)} missing, "
          f"{len(extra)} extra, {len(differ)} different")
    for what, names in (("missing", missing), ("extra", extra), ("different", differ)):
        for n in names:
            print(f"  {what}: {n}")
    return 0 if not (missing or extra or differ) else 1


if __name__ == "__main__":
    sys.exit(main())
