"""Prove that a built op library carries CUDA kernels: load it and check that every
op of the my_ops namespace has a CUDA kernel registered with the dispatcher. Works
on a machine without a GPU. Exit 0 when all do, 1 otherwise."""

from __future__ import annotations

import sys

import torch


def main(library: str) -> int:
    torch.ops.load_library(library)
    ops = sorted(name for name in torch._C._dispatch_get_all_op_names() if name.startswith("my_ops::"))
    if not ops:
        print(f"FAILED: {library} registers no my_ops ops")
        return 1
    missing = []
    for op in ops:
        keys = [line.split(":", 1)[0] for line in torch._C._dispatch_dump(op).splitlines()]
        status = "CUDA kernel registered" if "CUDA" in keys else "NO CUDA kernel"
        print(f"{op}: {status} (keys: {', '.join(k for k in keys if k in ('CPU', 'CUDA', 'Meta'))})")
        if "CUDA" not in keys:
            missing.append(op)
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, GPU available: {torch.cuda.is_available()}")
    if missing:
        print(f"FAILED: no CUDA kernel for {', '.join(missing)}")
        return 1
    print("PASSED: every my_ops op has a CUDA kernel")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: check_cuda_dispatch.py path/to/libidentity_conv_ops.so", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
