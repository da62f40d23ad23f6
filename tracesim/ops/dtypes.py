"""Dtype names: what Kineto and execution traces call a tensor type, and its element size."""

from __future__ import annotations

from typing import Any

#: Kineto "Input type" strings (and ExecutionTrace ``Tensor(<t>)``) -> tracesim dtype names
TYPE_NAMES = {
    "float": "fp32",
    "double": "fp64",
    "c10::half": "fp16",
    "half": "fp16",
    "c10::bfloat16": "bf16",
    "bfloat16": "bf16",
    "c10::float8_e4m3fn": "fp8",
    "c10::float8_e5m2": "fp8",
    "c10::float8_e4m3fnuz": "fp8",
    "c10::float8_e5m2fnuz": "fp8",
    "long": "int64",
    "int64_t": "int64",
    "long int": "int64",
    "int": "int32",
    "short": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "uint8_t": "uint8",
    "bool": "bool",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
}

#: bytes per element of each dtype name
DTYPE_BYTES = {
    "fp64": 8,
    "fp32": 4,
    "tf32": 4,
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
}

#: bytes per element a quantized tensor moves over the wire (data and scales): FP8 with a
#: per-tensor scale (current or delayed scaling) one; MXFP8 one plus a one-byte E8M0 scale
#: per block of 32 (OCP Microscaling Formats v1.0); NVFP4 half a byte (E2M1) plus a one-byte
#: E4M3 scale per block of 16 (Transformer Engine's NVFP4BlockScaling)
WIRE_BYTES = {"fp8": 1.0, "mxfp8": 1.0 + 1.0 / 32, "nvfp4": 0.5 + 1.0 / 16}

#: the dtype reported when no tensor input names one
DEFAULT_DTYPE = "fp32"

FLOAT_DTYPES = ("fp32", "bf16", "fp16", "fp8", "fp64", "tf32")


#: ScalarType enum codes (c10) seen in Concrete Inputs of aten::to / _to_copy
SCALAR_TYPE_CODES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "fp16",
                     6: "fp32", 7: "fp64", 11: "bool", 15: "bf16", 23: "fp8", 24: "fp8",
                     25: "fp8", 26: "fp8"}


def dtype_name(type_str: Any) -> str | None:
    """Map a Kineto ``Input type`` entry to a dtype name; None for non-tensors."""
    if not isinstance(type_str, str):
        return None
    t = type_str.strip().lower()
    if t.startswith("tensor(") and t.endswith(")"):
        t = t[7:-1]
    return TYPE_NAMES.get(t)
