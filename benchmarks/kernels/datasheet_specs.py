"""Datasheet figures of the GPUs :mod:`benchmarks.kernels.datasheet` generates profiles for:
dense peaks per dtype, HBM bandwidth and size, SM count, names, and the source of each."""

from __future__ import annotations

from typing import Any

MLE = "stas00/ml-engineering@744d01e compute/accelerator/README.md"
_TFLOPS_TABLE = f"{MLE} 'TFLOPS comparison table' (dense)"
#: the source of a Blackwell NVFP4 peak: the dense FP4 tensor-core rate (NVFP4 is E2M1 with
#: an E4M3 scale per 16 elements, run by the FP4 tensor cores as MXFP8 by the FP8 ones)
_NVFP4 = ("{fp4} = the fp4 column of " + _TFLOPS_TABLE + " row {row}: NVFP4 (E2M1 values, an "
          "E4M3 scale per 16) runs at the FP4 tensor-core rate")

#: datasheet figures (dense, per GPU). ``sources`` names where each came from.
SPECS: dict[str, dict[str, Any]] = {
    "a100": dict(
        peak_tflops={"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, hbm_GBps=2039.0,
        hbm_GiB=80, sm_count=108, l2_GBps=7219.0,
        aliases=["A100-SXM4-80GB", "A100-SXM-80GB", "A100 80GB", "A100", "A100-PG509-210"],
        patterns=["a100"], source="NVIDIA A100 datasheet (reference/devices.csv), SXM4 80GB",
        sources={"peak_tflops, hbm": "../shared/reference/devices.csv (NVIDIA A100 datasheet)",
                 "sm_count, l2_GBps": "NVIDIA A100 architecture whitepaper (108 SMs; L2 5120 B/clk "
                                      "x 1410 MHz)"}),
    "a100-40gb": dict(
        peak_tflops={"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}, hbm_GBps=1555.0,
        hbm_GiB=40, sm_count=108, l2_GBps=7219.0,
        aliases=["A100-SXM4-40GB", "A100-PCIE-40GB", "A100-PG509-200"],
        patterns=["a100.*40g", "a100-pg509-200"],
        source="NVIDIA A100 datasheet, 40GB variant: 1,555 GB/s (the A100-PG509-200 boards of "
               "the public traces report 39.4 GiB)",
        sources={"peak_tflops, hbm": "NVIDIA A100 datasheet (40GB variant)",
                 "sm_count, l2_GBps": "NVIDIA A100 architecture whitepaper"}),
    "h100": dict(
        peak_tflops={"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1979.0},
        hbm_GBps=3350.0, hbm_GiB=80, sm_count=132,
        aliases=["H100-SXM5-80GB", "H100 80GB HBM3", "H100"], patterns=["h100"],
        source="NVIDIA H100 SXM5 datasheet (reference/devices.csv)",
        sources={"peak_tflops, hbm": "../shared/reference/devices.csv (NVIDIA H100 datasheet)",
                 "sm_count": f"{MLE} 'Caches' third table (132 SMs)"}),
    "h200": dict(
        peak_tflops={"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1979.0},
        hbm_GBps=4800.0, hbm_GiB=141, sm_count=132, aliases=["H200-SXM-141GB", "H200"],
        patterns=["h200"], source="NVIDIA H200 SXM datasheet (reference/devices.csv)",
        sources={"peak_tflops, hbm": "../shared/reference/devices.csv (NVIDIA H200 datasheet)",
                 "sm_count": f"{MLE} 'Caches' third table (132 SMs)"}),
    "b200": dict(
        peak_tflops={"fp32": 75.0, "tf32": 1100.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0,
                     "mxfp8": 4500.0, "nvfp4": 9000.0},
        hbm_GBps=7700.0, hbm_GiB=180, sm_count=148, aliases=["B200-HGX", "B200", "B200-SXM"],
        patterns=["b200"],
        source="NVIDIA B200 (HGX, 1000 W) datasheet (reference/devices.csv); early spec 192 GB / 8 TB/s",
        sources={"peak_tflops, hbm": "../shared/reference/devices.csv (NVIDIA B200 HGX datasheet; "
                                     "ml-engineering lists fp32 80 / tf32 1125 / 8 TB/s)",
                 "mxfp8": "NVIDIA Blackwell: MX (block-scaled) FP8 runs at the FP8 tensor-core "
                          "rate; datasheet FP8/FP6 4.5 PFLOPS dense (DGX B200 datasheet, "
                          f"{_TFLOPS_TABLE} note 20)",
                 "nvfp4": _NVFP4.format(row="B200 SXM", fp4=9000),
                 "sm_count": "https://chipsandcheese.com/p/nvidias-b200-keeping-the-cuda-juggernaut "
                             "(2 dies x 74 SMs enabled = 148)"}),
    "gb200": dict(
        peak_tflops={"fp32": 80.0, "tf32": 1250.0, "bf16": 2500.0, "fp16": 2500.0, "fp8": 5000.0,
                     "mxfp8": 5000.0, "nvfp4": 10000.0},
        hbm_GBps=8000.0, hbm_GiB=186, sm_count=148, aliases=["GB200", "GB200-NVL72", "NVIDIA GB200"],
        patterns=["gb200"],
        source="NVIDIA GB200 NVL72 specifications, per Blackwell GPU (1200 W): "
               f"{_TFLOPS_TABLE} row 'NVIDIA GB200 SXM' (note 23)",
        sources={"peak_tflops": f"{_TFLOPS_TABLE} row GB200 (2500 bf16 / 5000 fp8 per GPU; the "
                                "Verda blog's 2250 / 4500 is the B200 figure)",
                 "mxfp8": "= fp8 (Blackwell MX formats run at the FP8 tensor-core rate)",
                 "nvfp4": _NVFP4.format(row="GB200 SXM", fp4=10000),
                 "hbm": f"{MLE} memory table: 186 GB, 8.0 TB/s (NVIDIA MIG table value)",
                 "sm_count": "not published for GB200; B200's 148 assumed (same Blackwell die pair)"}),
    "gb300": dict(
        peak_tflops={"fp32": 80.0, "tf32": 1250.0, "bf16": 2500.0, "fp16": 2500.0, "fp8": 5000.0,
                     "mxfp8": 5000.0, "nvfp4": 15000.0},
        hbm_GBps=8000.0, hbm_GiB=288, sm_count=148, aliases=["GB300", "GB300-NVL72", "NVIDIA GB300"],
        patterns=["gb300"],
        source="NVIDIA GB300 NVL72 specifications, per Blackwell Ultra GPU (1400 W): "
               f"{_TFLOPS_TABLE} row 'NVIDIA GB300 SXM' (note 24)",
        sources={"peak_tflops": f"{_TFLOPS_TABLE} row GB300",
                 "mxfp8": "= fp8 (Blackwell MX formats run at the FP8 tensor-core rate)",
                 "nvfp4": _NVFP4.format(row="GB300 SXM", fp4=15000),
                 "hbm": "288 GB HBM3e (NVIDIA GB300 NVL72 page as repeated in the research notes; "
                        "Verda lists 279 GB usable); 8.0 TB/s = rack 576 TB/s / 72 "
                        "(https://verda.com/blog/gb300-nvl72-architecture)",
                 "sm_count": "160 SMs on the full die, shipped SKU not confirmed (B300 SKUs seen "
                             "with 148 and 152): GB200's 148 assumed"}),
    "b300": dict(
        peak_tflops={"fp32": 80.0, "tf32": 1125.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0,
                     "mxfp8": 4500.0, "nvfp4": 12600.0},
        hbm_GBps=8000.0, hbm_GiB=288, sm_count=148,
        aliases=["B300", "B300-SXM", "B300-SXM6-AC", "NVIDIA B300"], patterns=["b300"],
        source="NVIDIA B300 SXM (HGX / DGX B300, Blackwell Ultra, 1000 W): "
               f"{_TFLOPS_TABLE} row 'NVIDIA B300 SXM' (note 21: DGX B300 datasheet)",
        sources={"peak_tflops": f"{_TFLOPS_TABLE} row B300 SXM (2250 bf16 / 4500 fp8 dense)",
                 "mxfp8": "= fp8 (Blackwell MX formats run at the FP8 tensor-core rate)",
                 "nvfp4": _NVFP4.format(row="B300 SXM", fp4=12600),
                 "hbm": f"{MLE} memory table row B300 SXM: 288 GB HBM3e, 8.00 TB/s",
                 "sm_count": "not confirmed for the shipped SKU (B300 SKUs seen with 148 and 152): "
                             "B200's 148 assumed, as for gb300"}),
    "mi300x": dict(
        peak_tflops={"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9},
        hbm_GBps=5300.0, hbm_GiB=192, sm_count=304,
        aliases=["MI300X", "AMD Instinct MI300X", "MI300X-NPS1-SPX-192GB-750W"],
        patterns=[r"mi300x"],
        source="AMD Instinct MI300X specifications (750 W): 1307.4 bf16 / 2614.9 fp8 dense, "
               "5.3 TB/s, 192 GB, 304 CUs",
        sources={"bf16, fp16, fp8, hbm": "https://raw.githubusercontent.com/alpharomercoma/"
                                         "MI300X-vs-H200/6077fdc/METHODOLOGY.md spec table",
                 "fp32, tf32": f"{_TFLOPS_TABLE} row 'AMD MI300X' (163.4 / 653.7, note 17: AMD "
                               "MI300X specifications)",
                 "sm_count": "https://chipsandcheese.com/p/testing-amds-giant-mi300x (8 XCDs x "
                             "38 CUs = 304)"}),
    "mi355x": dict(
        peak_tflops={"fp32": 157.3, "bf16": 2500.0, "fp16": 2500.0, "fp8": 5000.0},
        hbm_GBps=8000.0, hbm_GiB=288, sm_count=256,
        aliases=["MI355X", "AMD Instinct MI355X"],
        patterns=[r"mi355x"],
        source="AMD Instinct MI355X specifications (1400 W): 2500 bf16 / 5000 fp8 dense, "
               "8.0 TB/s, 288 GB, 256 CUs",
        sources={"peak_tflops": f"{_TFLOPS_TABLE} row 'AMD MI355X' (157.3 fp32, 2500 fp16 / bf16, "
                                "5000 fp8 dense; note 22: AMD Instinct MI355X specifications; "
                                "AMD rounds bf16 to 2.5 PFLOPS, the clock formula gives 2516.6)",
                 "hbm": f"{MLE} memory table row AMD MI355X: 288 GB HBM3e, 8.00 TB/s",
                 "sm_count": f"{MLE} matrix-core table row MI355X: 1024 Matrix Cores, 4 per CU = "
                             "256 CUs"}),
}

#: MI325X: MI300X's compute (note 18 of the TFLOPS table: "the same compute as MI300X, but has
#: more memory and more power"), its own memory
SPECS["mi325x"] = {
    **SPECS["mi300x"], "hbm_GBps": 6000.0, "hbm_GiB": 256,
    "aliases": ["MI325X", "AMD Instinct MI325X"], "patterns": [r"mi325x"],
    "source": "AMD Instinct MI325X specifications (1000 W): MI300X's compute (1307.4 bf16 / "
              "2614.9 fp8 dense, 304 CUs), 6.0 TB/s, 256 GB",
    "sources": {"peak_tflops, sm_count": f"{_TFLOPS_TABLE} row 'AMD MI325X' and note 18; "
                                         "MI300X's figures",
                "hbm": f"{MLE} memory table row AMD MI325X: 256 GB HBM3e, 6.00 TB/s"},
}

#: where a device has no kernel data of its own: what its number is taken from
DERIVED: dict[str, dict[str, str]] = {
    "a100-40gb": {"gemm": "a100", "attention": "a100", "memory_fraction": "a100"},
    "h200": {"gemm_default": "h100 (MAMF table note: 'H200 is the same')", "attention": "h100"},
    "gb200": {"attention": "b200", "memory_fraction": "b200"},
    "gb300": {"gemm": "gb200", "attention": "gb200", "memory_fraction": "B300 (FluidX3D)"},
    "b300": {"attention": "gb300 (the same Blackwell Ultra die)"},
    "mi300x": {"gemm_fp8": "mi300x bf16", "attention": "h100 x GEMM ratio"},
    "mi325x": {"gemm_fp8": "mi325x bf16", "attention": "h100 x GEMM ratio",
               "memory_fraction": "mi300x"},
    "mi355x": {"attention": "h100 x GEMM ratio", "memory_fraction": "mi300x"},
}

#: MAMF rows (data/gemm.csv ``device``) a device's GEMM plateau is solved from, per dtype
MAMF_ROWS: dict[str, dict[str, str]] = {
    "a100": {"default": "A100-SXM"}, "a100-40gb": {"default": "A100-SXM"},
    "h100": {"default": "H100-SXM", "fp8": "H100-SXM"}, "h200": {"default": "H100-SXM", "fp8": "H200-SXM"},
    "b200": {"default": "B200-SXM", "fp8": "B200-SXM"}, "gb200": {"default": "GB200", "fp8": "GB200"},
    "gb300": {"default": "GB200", "fp8": "GB200"}, "b300": {"default": "B300-SXM", "fp8": "B300-SXM"},
    "mi300x": {"default": "MI300X"}, "mi325x": {"default": "MI325X"}, "mi355x": {"default": "MI355X"},
}
#: devices whose own MAMF row the shared GEMM model reproduces only with a plateau above 1:
#: B300's best BF16 shape has k = 1024, where the fitted k overhead (320) would need 1.06 of
#: peak. Their plateau is the named profile's (its own MAMF row) times the two devices' MAMF
#: rates over their peaks (derived); the ceiling stays the device's own MAMF
PLATEAU_FROM: dict[str, dict[str, str]] = {"b300": {"default": "b200"}}
#: FluidX3D device (data/membw.csv) whose achieved fraction of its datasheet bandwidth is used
MEMORY_ROWS = {"a100": "A100-SXM4-80GB", "a100-40gb": "A100-SXM4-80GB", "h100": "H100-SXM5-80GB",
               "h200": "H200-SXM5-141GB", "b200": "B200-SXM6-180GB", "gb200": "B200-SXM6-180GB",
               "gb300": "B300-SXM6-AC", "b300": "B300-SXM6-AC", "mi300x": "MI300X",
               "mi325x": "MI300X", "mi355x": "MI300X"}
