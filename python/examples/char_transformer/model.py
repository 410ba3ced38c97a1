"""A 2-layer character-level transformer language model for asgdsim.

make() (model.module "model.py:make") returns the module; loss (model.loss
"model.py:loss") is the mean next-character cross-entropy over every position: outputs
(B, T, V) and targets (B, T) are flattened to (B*T, V) and (B*T,). The attention is
written out (no nn.TransformerEncoderLayer) so the same code runs on torch 1.13 and 2.x
without their fast paths differing between train and eval.
"""
import math
import sys

import torch
from torch import nn
import torch.nn.functional as F

# asgdsim loads this file by its path (model.module) and puts its folder on sys.path first,
# as `python3 model.py` would: the sibling char_data.py imports as a module.
from char_data import CONTEXT, VOCAB  # noqa: E402


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = self.drop(F.softmax(att.masked_fill(mask, float("-inf")), dim=-1))
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d, heads, dropout):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, dropout)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharTransformer(nn.Module):
    def __init__(self, vocab=VOCAB, context=CONTEXT, d=64, heads=4, layers=2, dropout=0.0):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        self.blocks = nn.Sequential(*[Block(d, heads, dropout) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):  # idx (B, T) long -> logits (B, T, V)
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def make():
    return CharTransformer()


def loss(outputs, targets):
    return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))
