"""torch's dtypes and the engine's: one table for every torch front (the Horovod API,
torch.distributed, zero-copy memory, torchft)."""

import torch

from hvd_herring.engine_front import DTYPES

TORCH_DTYPES = {  # torch dtype -> the engine's dtype name
    torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16", torch.int32: "int32",
    torch.int64: "int64", torch.float16: "float16", torch.bfloat16: "bfloat16",
    torch.float32: "float32", torch.float64: "float64", torch.bool: "bool", torch.uint16: "uint16",
}
DTYPE_CODES = {t: DTYPES[n] for t, n in TORCH_DTYPES.items()}  # torch dtype -> the engine's dtype code
