"""Small graph helpers shared by the models: each takes the graph context first and returns a ggml tensor.

Layout conventions (ggml order, ne0 first):
  transformer activations  [C, T]       (channels contiguous)
  convolution activations  [T, C]       (time contiguous, as ggml's im2col and col2im_1d expect: HuBERT,
                                         the semantic encoder) or channels-last [C, T] (*_cl: the DAC)
"""

from .basic import (add_bias, concat, concat_columns, embedding, gelu, group_norm, layer_norm, linear, rms_norm, row_max,
                    swiglu, transpose)
from .attention import attention, rope_neox
from .conv import (conv1d, conv1d_cl, conv_transpose1d, conv_transpose1d_cl, conv_transpose_weight_cl, conv_weight_cl,
                   snake)

__all__ = ["add_bias", "concat", "concat_columns", "embedding", "gelu", "group_norm", "layer_norm", "linear", "rms_norm",
           "row_max", "swiglu",
           "transpose", "attention", "rope_neox", "conv1d", "conv1d_cl", "conv_transpose1d", "conv_transpose1d_cl",
           "conv_transpose_weight_cl", "conv_weight_cl", "snake"]
