"""Model files -> checked configs and weight records on a runtime: one module per file (lm.py, codec.py).

Every hyper-parameter, tensor shape and tensor type is checked here, before ggml sees the file; the graph
builders in omnivoice.models read the records this fills (`layer.attn_norm`), never tensor names.
"""

from .tensors import ModelFileError

__all__ = ["ModelFileError"]
