"""What a collective backend may declare: the reductions it performs and the dtypes it casts.

Importing this module must not import torch: the generator imports it.
"""

from __future__ import annotations

from typing import Literal, get_args

ReduceOp = Literal["sum", "product", "min", "max", "mean"]
REDUCE_OPS: tuple[str, ...] = get_args(ReduceOp)

#: Tensor dtypes a backend may cast, by their name in ``torch``.
DType = Literal[
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
]
DTYPES: tuple[str, ...] = get_args(DType)
