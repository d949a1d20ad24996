#!/usr/bin/env python3
"""Writes the TorchScript modules of suites/models.yaml (and the tests' fixtures) into a folder.

    python3 scripts/make-models.py OUT_DIR [NAME ...]

Each model is written as ordinary PyTorch code is, at the real model's sizes, with fixed
seeds, then scripted (or traced, as its users would) and saved as OUT_DIR/NAME.pt. The build
runs this (target ka_models); nothing binary is committed. Needs python3-torch (Debian).
"""
import math
import os
import sys
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn


# ---- GPT-2 small: one transformer block (hidden 768, 12 heads, MLP 3072, context 1024) ----

class Gpt2Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, context: int):
        super().__init__()
        self.hidden = hidden
        self.heads = heads
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)
        causal = torch.tril(torch.ones(context, context, dtype=torch.bool))
        self.register_buffer("bias", causal.view(1, 1, context, context))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.hidden, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T].logical_not(), -1e4)
        att = F.softmax(att, dim=-1)
        y = torch.matmul(att, v)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Gpt2Mlp(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.c_fc = nn.Linear(hidden, 4 * hidden)
        self.c_proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Gpt2Block(nn.Module):
    def __init__(self, hidden: int = 768, heads: int = 12, context: int = 1024):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = Gpt2Attention(hidden, heads, context)
        self.ln_2 = nn.LayerNorm(hidden)
        self.mlp = Gpt2Mlp(hidden)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


# ---- LLaMA-style block at TinyLlama-1.1B's sizes: RMSNorm, rotary embedding, grouped-query
# attention (32 heads, 4 key/value heads, head size 64), SiLU-gated MLP (5632) ----

class RmsNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden) + 0.1 * torch.randn(hidden))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    half = x.size(-1) // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, hidden: int = 2048, heads: int = 32, kv_heads: int = 4,
                 intermediate: int = 5632, context: int = 2048, theta: float = 10000.0):
        super().__init__()
        self.heads = heads
        self.kv_heads = kv_heads
        self.head_dim = hidden // heads
        self.input_layernorm = RmsNorm(hidden)
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.post_attention_layernorm = RmsNorm(hidden)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        freqs = torch.outer(torch.arange(context).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos())
        self.register_buffer("sin_cached", emb.sin())
        self.register_buffer("mask_cached", torch.full((context, context), -1e4).triu(1))

    def attention(self, x):
        B, T, _ = x.size()
        q = self.q_proj(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        cos = self.cos_cached[:T]
        sin = self.sin_cached[:T]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        repeat = self.heads // self.kv_heads
        k = k.repeat_interleave(repeat, dim=1)
        v = v.repeat_interleave(repeat, dim=1)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        scores = scores + self.mask_cached[:T, :T]
        probs = F.softmax(scores, dim=-1)
        y = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, self.heads * self.head_dim)
        return self.o_proj(y)

    def forward(self, x):
        x = x + self.attention(self.input_layernorm(x))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


# ---- ResNet-18/34's first basic block: 64 channels at 56 x 56 ----

class BasicBlock(nn.Module):
    def __init__(self, channels: int = 64):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        for bn in (self.bn1, self.bn2):
            bn.running_mean.normal_(0.0, 0.1)
            bn.running_var.uniform_(0.5, 1.5)
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.normal_(0.0, 0.1)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + x)


def bert_layer():
    """BERT-base's encoder layer as PyTorch ships it, traced as its users trace it (eval, so
    dropout is off; with grad enabled, so the trace records the layer's ops, not the
    inference fast path's single kernel)."""
    layer = nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.1, activation="gelu",
                                       batch_first=True).eval()
    with torch.enable_grad():
        return torch.jit.trace(layer, torch.randn(1, 128, 768), check_trace=False)


# ---- BERT-base's encoder layer as Hugging Face writes it (BertLayer: self-attention over
# q/k/v linears split into heads by view and permute, scores divided by sqrt(head size), the
# additive extended mask, dropout, then dense + dropout + LayerNorm with the residual, and the
# GELU MLP), traced as its users trace it (transformers' torchscript=True) ----

class HfBertSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.head_size = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.1)

    def split_heads(self, x):
        x = x.view(x.size()[:-1] + (self.heads, self.head_size))
        return x.permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        q = self.split_heads(self.query(hidden_states))
        k = self.split_heads(self.key(hidden_states))
        v = self.split_heads(self.value(hidden_states))
        scores = torch.matmul(q, k.transpose(-1, -2))
        scores = scores / math.sqrt(self.head_size)
        scores = scores + attention_mask
        probs = self.dropout(F.softmax(scores, dim=-1))
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return context.view(context.size()[:-2] + (self.heads * self.head_size,))


class HfBertLayer(nn.Module):
    def __init__(self, hidden: int = 768, heads: int = 12, intermediate: int = 3072):
        super().__init__()
        self.attention = HfBertSelfAttention(hidden, heads)
        self.attention_dense = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output_dense = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, hidden_states, attention_mask):
        a = self.dropout(self.attention_dense(self.attention(hidden_states, attention_mask)))
        a = self.attention_norm(a + hidden_states)
        h = self.dropout(self.output_dense(F.gelu(self.intermediate(a))))
        return self.output_norm(h + a)


def hf_bert_layer():
    layer = HfBertLayer().eval()
    return torch.jit.trace(layer, (torch.randn(1, 128, 768), torch.zeros(1, 1, 1, 128)))


# ---- GPT-2 small's block as Hugging Face writes it (transformers' GPT2Block: Conv1D layers,
# an addmm with a [in, out] weight; heads split by view and permute; the causal mask applied
# by torch.where with finfo(float).min, sliced from a bool buffer by sizes; the attention
# probabilities cast back with .type(v.dtype); GELU written out as gelu_new), traced as its
# users trace it (torchscript=True) ----

class HfConv1D(nn.Module):
    def __init__(self, out_features: int, in_features: int):
        super().__init__()
        self.out_features = out_features
        self.weight = nn.Parameter(torch.randn(in_features, out_features) * 0.02)
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.out_features,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class HfGpt2Attention(nn.Module):
    def __init__(self, hidden: int = 768, heads: int = 12, context: int = 1024):
        super().__init__()
        self.hidden = hidden
        self.heads = heads
        self.head_dim = hidden // heads
        causal = torch.tril(torch.ones((context, context), dtype=torch.bool))
        self.register_buffer("bias", causal.view(1, 1, context, context))
        self.c_attn = HfConv1D(3 * hidden, hidden)
        self.c_proj = HfConv1D(hidden, hidden)

    def split_heads(self, x):
        return x.view(x.size()[:-1] + (self.heads, self.head_dim)).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = self.c_attn(x).split(self.hidden, dim=2)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype, device=w.device)
        q_len, k_len = q.size(-2), k.size(-2)
        causal = self.bias[:, :, k_len - q_len:k_len, :k_len].to(torch.bool)
        lowest = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype).to(w.device)
        w = torch.where(causal, w, lowest)
        w = F.softmax(w, dim=-1).type(v.dtype)
        y = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous()
        return self.c_proj(y.view(y.size()[:-2] + (self.hidden,)))


class HfGpt2Mlp(nn.Module):
    def __init__(self, hidden: int = 768):
        super().__init__()
        self.c_fc = HfConv1D(4 * hidden, hidden)
        self.c_proj = HfConv1D(hidden, 4 * hidden)

    def forward(self, x):
        h = self.c_fc(x)
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return self.c_proj(h)


class HfGpt2Block(nn.Module):
    def __init__(self, hidden: int = 768):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = HfGpt2Attention(hidden)
        self.ln_2 = nn.LayerNorm(hidden)
        self.mlp = HfGpt2Mlp(hidden)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def hf_gpt2_block():
    return torch.jit.trace(HfGpt2Block().eval(), torch.randn(1, 128, 768), check_trace=False)


# ---- A test fixture, not in suites/models.yaml: a small token classifier called as a Hugging
# Face model is (token ids and an integer attention mask in, a dict of outputs back, here
# with the sequence length beside it), straight-line code, scripted so the dict stays in
# the graph ----

class TokenClassifier(nn.Module):
    def __init__(self, vocabulary: int = 1000, hidden: int = 64, labels: int = 5):
        super().__init__()
        self.embed = nn.Embedding(vocabulary, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, 4 * hidden)
        self.down = nn.Linear(4 * hidden, hidden)
        self.head = nn.Linear(hidden, labels)

    def forward(self, input_ids, attention_mask):
        x = self.norm(self.embed(input_ids))
        x = x + self.down(F.gelu(self.up(x)))
        keep = attention_mask.unsqueeze(-1).to(x.dtype)
        pooled = (x * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return {"logits": self.head(x), "pooled": pooled}, input_ids.size(1)


class OptionalArgs(nn.Module):
    """Test fixture: forward's arguments as Hugging Face models take them besides tensors: an
    optional mask, a repeat count, a scale and a flag, each with a default."""

    def __init__(self, hidden: int = 32):
        super().__init__()
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x, mask: Optional[torch.Tensor] = None, repeat: int = 2,
                scale: float = 1.0, residual: bool = True):
        y = x
        for _ in range(repeat):
            y = torch.tanh(self.proj(y))
        if mask is not None:
            y = y + mask
        if residual:
            y = y + x
        return y * scale


class ContainerInputs(nn.Module):
    """Test fixture: forward takes a Tuple (a recurrent cell's (h, c) state) and a List of
    tensors besides a tensor, and returns a tensor and a tuple."""

    def __init__(self, hidden: int = 32):
        super().__init__()
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x, state: Tuple[torch.Tensor, torch.Tensor], extra: List[torch.Tensor]):
        h, c = state
        y = torch.tanh(self.proj(x) + h) * torch.sigmoid(c)
        y = y + torch.stack(extra, 0).sum(0)
        return y, (h + y, c * 0.5)


MODELS = {
    "gpt2_block": lambda: torch.jit.script(Gpt2Block().eval()),
    "bert_layer": bert_layer,
    "llama_block": lambda: torch.jit.script(LlamaBlock().eval()),
    "resnet_block": lambda: torch.jit.script(BasicBlock().eval()),
    "hf_bert_layer": hf_bert_layer,
    "hf_gpt2_block": hf_gpt2_block,  # last: the models before it keep their seeds
    "token_classifier": lambda: torch.jit.script(TokenClassifier().eval()),  # test fixture
    "optional_args": lambda: torch.jit.script(OptionalArgs().eval()),  # test fixture
    "container_inputs": lambda: torch.jit.script(ContainerInputs().eval()),  # test fixture
}


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        print("models:", ", ".join(MODELS))
        return 0 if len(argv) >= 2 else 2
    out_dir = argv[1]
    names = argv[2:] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"make-models.py: unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}",
              file=sys.stderr)
        return 2
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    for seed, name in enumerate(names):
        torch.manual_seed(1000 + seed)
        module = MODELS[name]()
        path = os.path.join(out_dir, name + ".pt")
        partial = path + ".partial"
        torch.jit.save(module, partial)
        os.replace(partial, path)  # a half-written file never has the final name
        size = os.path.getsize(path) / 2**20
        print(f"make-models.py: {path} ({size:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
