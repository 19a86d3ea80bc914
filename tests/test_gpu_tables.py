"""The GPU tables chapter 4 draws: the stored measurement, its machine, and the FLOP count its rates use."""

import math
import re

import pytest

import mha_lessons as M


def test_the_gpu_table_names_an_h100_its_versions_and_a_date():
    rows, machine, own = M.notebook.gpu_attention_table()
    assert "H100" in machine and re.search(r"\b20\d\d-\d\d-\d\d\b", machine)
    if not own:  # the shared anchor, until benchmarks/bench_gpu.py has stored the course's own table
        assert "PyTorch 2.11.0" in machine and "2026-11-26" in machine
    assert {"math", "flash", "cudnn", "efficient"} <= {r["backend"] for r in rows}
    assert {r["d_k"] for r in rows} == {64, 128} and {r["causal"] for r in rows} == {True, False}


def test_every_rate_in_the_table_is_the_packages_flop_count_over_the_time():
    # the measurement counts 4 B h n^2 d_k per forward pass, halved when causal: attention_core_traffic's count
    rows, _, _ = M.notebook.gpu_attention_table()
    timed = [r for r in rows if r["ms"] is not None]
    assert len(timed) > 80
    for r in timed:
        flops = M.complexity.attention_core_traffic(r["n"], r["d_k"], batch=r["B"], num_heads=r["h"], fused=True,
                                                    causal=r["causal"])["flops"]
        assert math.isclose(flops / (r["ms"] * 1e-3) / 1e12, r["tflops"], rel_tol=0.01, abs_tol=0.06), r


def test_a_failed_case_has_no_numbers():
    rows, _, _ = M.notebook.gpu_attention_table()
    failed = [r for r in rows if r["ms"] is None]
    assert failed and all(r["tflops"] is None and r["peak_mib"] is None for r in failed)
    assert {r["backend"] for r in failed} == {"math"}          # only the unfused path runs out of memory
    assert all("OutOfMemoryError" in r["error"] for r in failed)          # and the table says so
    assert all(r["error"] == "" for r in rows if r["ms"] is not None)


@pytest.mark.parametrize("text, expected", [
    ("Machine: one H100; measured 2026-11-26.\n\n# Title", "one H100; measured 2026-11-26."),
    ("# Summary\n\n- date: 2026-11-27 09:15 UTC\n- python: 3.12.3\n- gpu: NVIDIA H100 80GB HBM3, 81,559 MiB\n"
     "- driver: 580.159.04, 1980 MHz\n- cuda: 13.0\n- torch: 2.11.0+cu130\n- triton: 3.6.0\n",
     "gpu NVIDIA H100 80GB HBM3, 81,559 MiB; driver 580.159.04, 1980 MHz; cuda 13.0; torch 2.11.0+cu130; "
     "triton 3.6.0; measured 2026-11-27"),
    ("no machine here", "machine not recorded"),
])
def test_the_machine_line_of_a_summary_keeps_the_date_but_no_time_of_day(text, expected):
    assert M.notebook.machine_from_summary(text) == expected


def test_measured_ceilings_are_absent_or_complete():
    ceilings = M.notebook.gpu_ceilings()
    if ceilings is not None:  # written by benchmarks/bench_gpu_ceilings.py on a GPU
        assert {"device", "date", "bf16_matmul", "copy", "sm_count", "driver", "cuda", "torch"} <= set(ceilings)
        assert 0 < float(ceilings["bf16_matmul"]) < 5000 and 0 < float(ceilings["copy"]) < 20000
