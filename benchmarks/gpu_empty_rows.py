"""What torch's attention backends give a query that may attend to no key, on a GPU (chapter 6).

Chapter 6 checks on the CPU that ``F.scaled_dot_product_attention`` gives such a row zero weights, hence a zero
output (PyTorch 2.5 and later), and that ``nn.MultiheadAttention``'s ``need_weights=True`` path gives NaN. This
script asks the same of each backend on a CUDA GPU: for bfloat16 and float16, a batch whose second sequence's
third query may attend to no key (a boolean ``attn_mask`` of shape (B, 1, n, m), True = may attend), under
``sdpa_kernel`` restricted to one backend, it records whether the backend ran, the largest |output| of the empty
row, whether every output and every input gradient is finite, and the largest |gradient| of the empty row's query.
A backend that refuses a boolean mask is recorded as refused. Writes ``gpu_empty_rows.csv`` into ``--out`` and
``mha_lessons/results/``. ``--smoke`` runs it on the CPU (float32, the CPU's backends) to check the script.

Usage: PYTHONPATH=. python benchmarks/gpu_empty_rows.py --out DIR | --smoke
"""

import argparse
import csv
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import RESULTS  # noqa: E402

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
COLUMNS = ["device", "torch", "backend", "dtype", "ran", "empty_row_max_abs_output", "outputs_finite",
           "gradients_finite", "empty_row_max_abs_dq", "error"]
B, H, N, M, D = 2, 4, 8, 8, 64
EMPTY = (1, 2)  # sequence 1, query 2: may attend to no key


def one_case(device, backend, dtype):
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(B, H, N if i == 0 else M, D, generator=g).to(device, dtype).requires_grad_(True)
               for i in range(3))
    mask = torch.ones(B, 1, N, M, dtype=torch.bool)            # (B, 1, n, m): the same for every head
    mask[EMPTY[0], 0, EMPTY[1], :] = False
    mask = mask.to(device)
    row = dict(device=torch.cuda.get_device_name() if device == "cuda" else "cpu", torch=torch.__version__,
               backend=backend, dtype=str(dtype).replace("torch.", ""), ran=False, error="")
    try:
        with sdpa_kernel(BACKENDS[backend]):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, h, n, d)
            out.backward(torch.ones_like(out))
    except RuntimeError as e:
        row["error"] = str(e).splitlines()[0][:120]
        return row
    row.update(ran=True, empty_row_max_abs_output=float(out.detach()[EMPTY[0], :, EMPTY[1]].abs().max()),
               outputs_finite=bool(torch.isfinite(out.detach()).all()),
               gradients_finite=all(bool(torch.isfinite(t.grad).all()) for t in (q, k, v)),
               empty_row_max_abs_dq=float(q.grad[EMPTY[0], :, EMPTY[1]].abs().max()))
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if not args.smoke and not torch.cuda.is_available():
        print("no CUDA GPU: use --smoke to check the script on the CPU")
        return 2
    device = "cpu" if args.smoke else "cuda"
    dtypes = (torch.float32,) if args.smoke else (torch.bfloat16, torch.float16)
    rows = [one_case(device, b, dt) for dt in dtypes for b in BACKENDS]
    out = args.out or (Path(tempfile.mkdtemp(prefix="gpu_empty_rows_")) if args.smoke else RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    for folder in {out, *(() if args.smoke or out == RESULTS else (RESULTS,))}:
        with open(folder / "gpu_empty_rows.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    for row in rows:
        print(" ".join(f"{k}={row.get(k, '')}" for k in COLUMNS[2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
