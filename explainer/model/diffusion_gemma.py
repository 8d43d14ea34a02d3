"""Tiny DiffusionGemma-style backbone, sliceable into pipeline-parallel (PP) stages.

Mirrors vLLM ``model_executor/models/diffusion_gemma.py`` (one Gemma backbone, two modes) and the
facts of HF ``modeling_diffusion_gemma.py``:

* **One weight set, two modes**, chosen per call by ``causal``:
  - encoder mode (``causal=True``): prompt prefill and committing a finished canvas; causal over
    prefix + new tokens; its K/V is kept.
  - decoder mode (``causal=False``): denoising a canvas; every canvas token sees the whole committed
    prefix and the whole canvas (bidirectional). The forward still writes the canvas K/V (as vLLM
    does); the caller truncates it away again (vLLM's ``num_computed_tokens`` rollback).
* RoPE positions continue after the prefix: canvas positions are ``prefix_len .. prefix_len + L - 1``.
* Gemma blocks: RMSNorm sandwich (input / post-attention / pre-FFN / post-FFN norms), q/k RMSNorm
  with learned scale, weightless v norm, attention scaling 1.0 (as Gemma 4), gated GELU-tanh MLP.
  The residual stream is carried next to the hidden states like vLLM's Gemma (fused add + norm), so
  a PP stage boundary hands over ``IntermediateTensors{"hidden_states", "residual"}``.
* Embedding × sqrt(hidden); tied LM head; final-logit softcap 30 in fp32.
* Self-conditioning (first stage, decoder mode only):
  ``out = post_norm(inputs_embeds + down(gelu_tanh(gate(pre_norm(s))) * up(pre_norm(s))))`` with
  ``s = softmax(processed logits) @ E × sqrt(hidden)`` (fp32, ``soft_embedding``, last stage) and
  ``s = 0`` on a canvas's first step. As in HF, the encoder pass (prefill, commit) applies **no**
  self-conditioning: callers embed with ``embed_input_ids`` only. (vLLM applies the SC block with a
  zero soft embedding on commit steps; this toy follows HF and documents it here.)

A stage owns layers ``[start_layer, end_layer)``; the others are ``PPMissingLayer`` placeholders so
parameter names stay global (vLLM's ``make_layers``). The first stage owns the embedding and the SC
block; the last stage owns the final norm and its own copy of the embedding matrix for the tied head
and ``soft_embedding`` (as vLLM's last rank does).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from importlib import resources

import torch
import torch.nn.functional as F
from torch import nn

from explainer.errors import UsageError

CHECKPOINT_NAME = "spell_numbers"   # explainer/checkpoints/spell_numbers.{pt,json}


@dataclass
class TinyConfig:
    vocab_size: int = 40
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    head_dim: int = 16
    canvas_length: int = 8
    final_logit_softcapping: float = 30.0
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    pad_token_id: int = 0
    eos_token_id: int = 1

    def to_dict(self) -> dict:
        return asdict(self)


class IntermediateTensors:
    """vLLM's name: the named tensors a non-last PP stage hands to the next one."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors = dict(tensors)

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.tensors[key]

    def __setitem__(self, key: str, value: torch.Tensor) -> None:
        self.tensors[key] = value

    def __len__(self) -> int:
        return len(self.tensors)

    def keys(self):
        return self.tensors.keys()

    def items(self):
        return self.tensors.items()

    def __eq__(self, other) -> bool:
        return (isinstance(other, IntermediateTensors) and self.tensors.keys() == other.tensors.keys()
                and all(torch.equal(v, other.tensors[k]) for k, v in self.tensors.items()))

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}: {tuple(v.shape)} {v.dtype}" for k, v in self.tensors.items())
        return f"IntermediateTensors({shapes})"


class KVCache:
    """Per stage, per request (or batch of equal-length rows): K/V of the local layers.

    ``keys[i]`` / ``values[i]``: [B, heads, T, head_dim] for the i-th layer this stage owns.
    """

    def __init__(self, num_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    @property
    def length(self) -> int:
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    def append(self, i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append this call's K/V [B, heads, T_new, hd] to local layer i; return all K/V [B, heads, T, hd]."""
        if self.keys[i] is not None:
            k = torch.cat([self.keys[i], k], dim=2)
            v = torch.cat([self.values[i], v], dim=2)
        self.keys[i], self.values[i] = k, v
        return k, v

    def truncate(self, n: int) -> None:
        """Keep the first n positions (roll back rejected / denoise tokens)."""
        if not 0 <= n <= self.length:
            raise UsageError(f"cannot truncate a KV cache of length {self.length} to {n}; accepted: 0..{self.length}")
        for i in range(len(self.keys)):
            if self.keys[i] is not None:
                self.keys[i] = self.keys[i][:, :, :n]
                self.values[i] = self.values[i][:, :, :n]
        if n == 0:
            self.keys = [None] * len(self.keys)
            self.values = [None] * len(self.values)


def get_pp_indices(num_hidden_layers: int, pp_rank: int, pp_size: int) -> tuple[int, int]:
    """vLLM's even split; leftover layers go to the stages just before the last one."""
    if not 1 <= pp_size <= num_hidden_layers:
        raise UsageError(f"pp size {pp_size} is not usable with {num_hidden_layers} layers; accepted: 1..{num_hidden_layers}")
    if not 0 <= pp_rank < pp_size:
        raise UsageError(f"pp rank {pp_rank} is out of range; accepted: 0..{pp_size - 1}")
    per = num_hidden_layers // pp_size
    partitions = [per] * pp_size
    for i in range(2, num_hidden_layers % pp_size + 2):
        partitions[-i] += 1
    start = sum(partitions[:pp_rank])
    return start, start + partitions[pp_rank]


class RMSNorm(nn.Module):
    """Gemma RMSNorm in fp32; ``with_scale=False`` is the weightless variant. ``forward(x, residual)``
    is vLLM's fused add + norm: returns ``(norm(x + residual), x + residual)``."""

    def __init__(self, dim: int, eps: float, with_scale: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if with_scale else None

    def forward(self, x, residual=None):
        if residual is not None:
            x = x + residual
            residual = x
        out = x.float() * torch.pow(x.float().pow(2).mean(-1, keepdim=True) + self.eps, -0.5)
        if self.weight is not None:
            out = out * self.weight.float()
        out = out.type_as(x)
        return out if residual is None else (out, residual)


class GatedMLP(nn.Module):
    """down(gelu_tanh(gate(x)) * up(x)) — Gemma's MLP, also the SC block's body."""

    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate-half RoPE. x [B, heads, T, hd], positions [B, T] (int64)."""
    hd = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))   # [hd/2]
    freqs = positions.float()[..., None] * inv_freq                                 # [B, T, hd/2]
    emb = torch.cat([freqs, freqs], dim=-1)[:, None]                                # [B, 1, T, hd]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * emb.cos() + torch.cat([-x2, x1], dim=-1) * emb.sin()


class Attention(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.cfg = cfg
        h, nh, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
        self.q_proj = nn.Linear(h, nh * hd, bias=False)
        self.k_proj = nn.Linear(h, nh * hd, bias=False)
        self.v_proj = nn.Linear(h, nh * hd, bias=False)
        self.o_proj = nn.Linear(nh * hd, h, bias=False)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.v_norm = RMSNorm(hd, cfg.rms_norm_eps, with_scale=False)

    def forward(self, x, positions, mask, kv_cache: KVCache | None, local_idx: int):
        # x [B, T, H] -> q/k/v [B, heads, T, hd]
        B, T, _ = x.shape
        nh, hd = self.cfg.num_attention_heads, self.cfg.head_dim
        q = self.q_norm(self.q_proj(x).view(B, T, nh, hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, nh, hd)).transpose(1, 2)
        v = self.v_norm(self.v_proj(x).view(B, T, nh, hd)).transpose(1, 2)
        q, k = rope(q, positions, self.cfg.rope_theta), rope(k, positions, self.cfg.rope_theta)
        if kv_cache is not None:
            k, v = kv_cache.append(local_idx, k, v)                     # [B, heads, P + T, hd]
        # mask [B or 1, 1, T, P + T] bool, True = may attend; scaling 1.0 (q/k are RMS-normed)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)   # [B, heads, T, hd]
        return self.o_proj(out.transpose(1, 2).reshape(B, T, nh * hd))


class DecoderLayer(nn.Module):
    """Gemma sandwich-norm block in vLLM's (hidden_states, residual) form."""

    def __init__(self, cfg: TinyConfig):
        super().__init__()
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.input_layernorm = RMSNorm(h, eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.pre_feedforward_layernorm = RMSNorm(h, eps)
        self.mlp = GatedMLP(h, cfg.intermediate_size)
        self.post_feedforward_layernorm = RMSNorm(h, eps)

    def forward(self, hidden_states, residual, positions, mask, kv_cache, local_idx):
        if residual is None:
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        hidden_states = self.self_attn(hidden_states, positions, mask, kv_cache, local_idx)
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states, residual = self.pre_feedforward_layernorm(hidden_states, residual)
        hidden_states = self.post_feedforward_layernorm(self.mlp(hidden_states))
        return hidden_states, residual


class PPMissingLayer(nn.Identity):
    """Placeholder for a layer another PP stage owns (vLLM's name)."""


class SelfConditioning(nn.Module):
    """post_norm(inputs_embeds + gated_mlp(pre_norm(s))); pre_norm learned, post_norm weightless."""

    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.pre_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size)
        self.post_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, with_scale=False)

    def forward(self, inputs_embeds, soft_embeds):
        return self.post_norm(inputs_embeds + self.mlp(self.pre_norm(soft_embeds)))


def attention_mask(prefix_len: int, num_new: int, causal: bool) -> torch.Tensor:
    """[1, 1, T, P + T] bool. Causal: new token i sees keys 0..P+i. Bidirectional: sees all P + T."""
    if not causal:
        return torch.ones(1, 1, num_new, prefix_len + num_new, dtype=torch.bool)
    q = torch.arange(num_new)[:, None] + prefix_len
    return (torch.arange(prefix_len + num_new)[None, :] <= q)[None, None]


class DiffusionGemmaModel(nn.Module):
    """One PP stage: layers [start_layer, end_layer). ``DiffusionGemmaModel(cfg)`` is the whole model."""

    def __init__(self, config: TinyConfig, start_layer: int = 0, end_layer: int | None = None):
        super().__init__()
        n = config.num_hidden_layers
        end_layer = n if end_layer is None else end_layer
        if not 0 <= start_layer < end_layer <= n:
            raise UsageError(f"layer range [{start_layer}, {end_layer}) is not a non-empty slice of 0..{n}")
        self.config, self.start_layer, self.end_layer = config, start_layer, end_layer
        self.is_first_rank, self.is_last_rank = start_layer == 0, end_layer == n
        self.normalizer = config.hidden_size ** 0.5
        if self.is_first_rank or self.is_last_rank:
            # first stage: input embedding; last stage: its own copy for the tied head + soft_embedding
            self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        if self.is_first_rank:
            self.self_conditioning = SelfConditioning(config)
        self.layers = nn.ModuleList(
            DecoderLayer(config) if start_layer <= i < end_layer else PPMissingLayer() for i in range(n))
        if self.is_last_rank:
            self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    @property
    def num_local_layers(self) -> int:
        return self.end_layer - self.start_layer

    def new_kv_cache(self) -> KVCache:
        return KVCache(self.num_local_layers)

    # ---- first stage -------------------------------------------------------------------------
    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """[B, T] int64 -> [B, T, H], × sqrt(H)."""
        V = self.config.vocab_size
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= V):
            bad = sorted({int(t) for t in input_ids.flatten() if not 0 <= int(t) < V})
            raise UsageError(f"token ids {bad} are outside the vocabulary; accepted: 0..{V - 1}")
        return self.embed_tokens(input_ids) * self.normalizer

    def apply_self_conditioning(self, inputs_embeds, self_conditioning_embeds=None):
        """[B, L, H] canvas embeddings + [B, L, H] soft embeddings (None = zeros, a canvas's first step)."""
        if self_conditioning_embeds is None:
            self_conditioning_embeds = torch.zeros_like(inputs_embeds)
        return self.self_conditioning(inputs_embeds, self_conditioning_embeds)

    # ---- last stage --------------------------------------------------------------------------
    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """[B, T, H] final-normed hidden -> fp32 soft-capped logits [B, T, V] (tied head)."""
        logits = F.linear(hidden_states.float(), self.embed_tokens.weight.float())
        cap = self.config.final_logit_softcapping
        return torch.tanh(logits / cap) * cap

    def soft_embedding(self, processed_logits: torch.Tensor) -> torch.Tensor:
        """[B, L, V] processed logits -> probs @ E × sqrt(H), fp32 [B, L, H]."""
        probs = processed_logits.float().softmax(dim=-1)
        return (probs @ self.embed_tokens.weight.float()) * self.normalizer

    # ---- every stage -------------------------------------------------------------------------
    def make_empty_intermediate_tensors(self, batch_size: int, dtype=torch.float32, device="cpu",
                                        num_tokens: int | None = None) -> IntermediateTensors:
        """Zero buffers a non-first stage receives into: [batch_size, T, H] ("hidden_states", "residual").
        ``num_tokens`` defaults to the canvas length (a denoise / commit step). vLLM's signature is
        ``(batch_size, dtype, device)`` with one flat token dimension (it passes max_num_batched_tokens as
        batch_size); the toy keeps a batch dimension, so the token count is this extra keyword."""
        T = self.config.canvas_length if num_tokens is None else num_tokens
        shape = (batch_size, T, self.config.hidden_size)
        return IntermediateTensors({"hidden_states": torch.zeros(shape, dtype=dtype, device=device),
                                    "residual": torch.zeros(shape, dtype=dtype, device=device)})

    def forward(self, input_ids=None, positions=None, kv_cache: KVCache | None = None, causal: bool = True,
                intermediate_tensors: IntermediateTensors | None = None, inputs_embeds=None,
                attn_mask: torch.Tensor | None = None):
        """Run this stage's layers over T new tokens.

        input_ids [B, T] or inputs_embeds [B, T, H] on the first stage; intermediate_tensors elsewhere.
        positions [B, T] or [T] (default: kv_cache.length + arange(T)). kv_cache: this stage's cache; the
        call's K/V is appended (caller truncates to roll back). attn_mask: training only, an explicit
        [B, 1, T, T] bool mask used with no cache (block-diffusion layout); it overrides ``causal``.
        Returns IntermediateTensors (non-last stage) or final-normed hidden states [B, T, H] (last).
        """
        if self.is_first_rank:
            hidden_states = self.embed_input_ids(input_ids) if inputs_embeds is None else inputs_embeds
            residual = None
        else:
            if intermediate_tensors is None:
                raise UsageError(f"stage [{self.start_layer}, {self.end_layer}) is not first: pass intermediate_tensors")
            hidden_states, residual = intermediate_tensors["hidden_states"], intermediate_tensors["residual"]
        B, T, _ = hidden_states.shape
        prefix = 0 if kv_cache is None else kv_cache.length
        if positions is None:
            positions = torch.arange(prefix, prefix + T)
        if positions.dim() == 1:
            positions = positions[None].expand(B, T)
        mask = attention_mask(prefix, T, causal) if attn_mask is None else attn_mask
        for local_idx, i in enumerate(range(self.start_layer, self.end_layer)):
            hidden_states, residual = self.layers[i](hidden_states, residual, positions, mask, kv_cache, local_idx)
        if not self.is_last_rank:
            return IntermediateTensors({"hidden_states": hidden_states, "residual": residual})
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states


class CachedLM:
    """Seam 1 adapter: whole model + one KVCache, implementing the sampler's ``DiffusionLM``.

    One object per generation. encode: causal pass, K/V kept. decode: bidirectional pass over the
    canvas reading the cached prefix; its K/V is truncated away again (nothing stored).
    """

    def __init__(self, model: DiffusionGemmaModel):
        if not (model.is_first_rank and model.is_last_rank):
            raise UsageError("CachedLM needs the whole model (start_layer=0, end_layer=num_hidden_layers)")
        self.model = model
        self.vocab_size = model.config.vocab_size
        self.kv_cache = model.new_kv_cache()

    @torch.no_grad()
    def encode(self, input_ids: torch.Tensor) -> None:
        self.model(input_ids=input_ids, kv_cache=self.kv_cache, causal=True)          # no SC (as HF)

    @torch.no_grad()
    def decode(self, canvas: torch.Tensor, self_conditioning_logits: torch.Tensor | None) -> torch.Tensor:
        m, prefix = self.model, self.kv_cache.length
        embeds = m.embed_input_ids(canvas)                                              # [B, L, H]
        sc = None if self_conditioning_logits is None else m.soft_embedding(self_conditioning_logits)
        embeds = m.apply_self_conditioning(embeds, sc)
        hidden = m(inputs_embeds=embeds, kv_cache=self.kv_cache, causal=False)        # [B, L, H]
        self.kv_cache.truncate(prefix)
        return m.compute_logits(hidden)                                                 # fp32 [B, L, V]


def metadata() -> dict:
    """The shipped checkpoint's metadata JSON (config, task, sizes, accuracy, generation config)."""
    path = resources.files("explainer") / "checkpoints" / f"{CHECKPOINT_NAME}.json"
    return json.loads(path.read_text())


def load_state_dict() -> dict[str, torch.Tensor]:
    path = resources.files("explainer") / "checkpoints" / f"{CHECKPOINT_NAME}.pt"
    with resources.as_file(path) as p:
        return torch.load(p, map_location="cpu", weights_only=True)


def load_pretrained(start_layer: int = 0, end_layer: int | None = None) -> DiffusionGemmaModel:
    """The shipped checkpoint (package data, no network) as one PP stage, in eval mode."""
    config = TinyConfig(**metadata()["config"])
    model = DiffusionGemmaModel(config, start_layer, end_layer)
    state = load_state_dict()
    wanted = model.state_dict().keys()
    model.load_state_dict({k: v for k, v in state.items() if k in wanted}, strict=True)
    return model.eval()


def num_parameters(model: nn.Module) -> int:
    """Number of parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())


def init_weights(model: DiffusionGemmaModel, std: float = 0.02) -> None:
    """Normal(0, std) linear weights, embedding std 1/sqrt(H) (× sqrt(H) at input keeps unit scale)."""
    for name, p in model.named_parameters():
        if name.endswith("norm.weight") or name.endswith("_norm.weight"):
            nn.init.ones_(p)
        elif name == "embed_tokens.weight":
            nn.init.normal_(p, std=1.0 / math.sqrt(model.config.hidden_size))
        else:
            nn.init.normal_(p, std=std)
