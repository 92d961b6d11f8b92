"""A BERT-base-sized Transformer encoder layer (hidden 768, 12 heads, feed-forward 3072) for
`metatune tune --model examples/models/encoder_layer.py:bert_base_layer --input-shape 1,128,768`."""

from torch import nn


def bert_base_layer() -> nn.Module:
    """One post-norm encoder layer with GELU, batch first: input (batch, sequence, 768)."""
    return nn.TransformerEncoderLayer(d_model=768, nhead=12, dim_feedforward=3072, dropout=0.0,
                                      activation="gelu", batch_first=True)
