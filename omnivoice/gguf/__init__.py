"""The GGUF file format, one home: reading (``reader``), writing (``writer``), metadata keys (``keys``) and
the names of tensors and files (``names``). Pure Python and numpy; it imports nothing else of the package.

    from omnivoice.gguf import open_model, keys as K
    f = open_model("omnivoice-base-F32.gguf", K.ARCH_LM)     # metadata + memory-mapped tensors
"""

from . import keys, names
from .names import CODEC_FILENAME, lm_filename
from .reader import GGUFFile, GGUFFormatError, TensorInfo, open_model, read_gguf, read_gguf_metadata

__all__ = ["keys", "names", "CODEC_FILENAME", "lm_filename", "GGUFFile", "GGUFFormatError", "TensorInfo",
           "open_model", "read_gguf", "read_gguf_metadata"]
