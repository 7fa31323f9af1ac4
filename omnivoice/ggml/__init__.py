"""The ggml binding layer: backends, weights, graphs, numpy in and out. Knows nothing of OmniVoice.

    from omnivoice.ggml import Runtime, WeightStore, Graph, lib
"""

from ._ffi import GGMLNotBuiltError, build_info, built_with_patch, callback_error, consts, ffi, lib, ops
from .backend import Device, Runtime, list_devices, parse_spec
from .graph import (Graph, Tensor, named, ne_of, new_context, new_tensor, read_tensor, set_name, shape_of,
                    write_tensor)
from .weights import WeightStore
from . import types

__all__ = ["GGMLNotBuiltError", "build_info", "built_with_patch", "callback_error", "consts", "ffi", "lib", "ops",
           "Device", "Runtime",
           "list_devices", "parse_spec", "Graph", "Tensor", "named", "ne_of", "new_context", "new_tensor",
           "read_tensor", "set_name", "shape_of", "write_tensor", "WeightStore", "types"]
