"""The weights of ``vllm-run``'s tiny Qwen3-Next (``--weights``), set after vLLM's dummy load.

- ``zero`` (the default, every committed run): every parameter of the target and the drafter
  zeroed. The logits are all zero, greedy sampling picks token 0 whatever the prompt or the GDN
  state, every draft is accepted (decode rows carry k + 1, prefill rows 1). A wrong count
  changes no token: the consequence is not observable.
- ``dummy``: vLLM's dummy weights as loaded (uniform in [-1e-3, 1e-3], seed 1234). The residual
  stream is the token's embedding (the layers add about 1e-3 of it), so the target's next token
  is a fixed function of the last token with almost no dependence on the state, and the MTP
  drafter, whose random ``fc`` mixes the embedding with the target's hidden state, almost never
  predicts it: nearly every count is 1, another row's count is usually 1 too, and no wrong
  count is consumed.
- ``gdn-bit``: the variant for issue #26. Each token ``t`` has two successors, the pair
  ``{2m, 2m+1}`` with ``m = pi(t) // 2`` for a fixed random permutation ``pi``; which one the
  target emits is one bit read from the GDN layers' output, so it depends on the recurrent
  state (the prompt). The MTP drafter sees only the token and always proposes the even one,
  which the target emits about 70 % of the time: drafts are accepted often but not always, so
  counts 1 to k + 1 all occur (partial acceptance, issue #23) and a finished request's count is
  usually not 1. A request whose GDN restored its state from the wrong slot gets other bits
  from then on, and a different bit is a different token, after which the chains differ.

How ``gdn-bit`` is built (hidden size H, the first H/2 dimensions ``U``, the rest ``V``):

- the residual stream carries only the token embedding (in ``U``) and the GDN layers' output
  (in ``V``): every ``o_proj`` (full attention, target and drafter) and every MLP ``down_proj``
  is zero, and the GDN ``out_proj`` writes ``V`` only;
- ``embed_tokens`` row ``t`` is a random unit vector ``u_t`` in ``U`` (shared with the MTP
  drafter, as vLLM shares it: ``llm_base_proposer._maybe_share_embeddings``);
- ``lm_head`` (also shared) row ``2m`` is ``C (1 + EVEN_BIAS) (u_a + u_b) + w`` and row
  ``2m+1`` is ``C (u_a + u_b) - w``, where ``{a, b}`` are the two tokens ``pi`` sends to the
  pair and ``w`` one fixed random vector in ``V``. The pair's logits differ by
  ``C EVEN_BIAS + 2 <w, g>`` (``g``: the GDN output), the bit; every other token's ``U`` part
  is a sum of two random inner products (about 0.45 C at most over the vocabulary) and its
  ``V`` part is ``+-<w, g>`` like the pair's, so the winner of the pair beats every other token
  by about 0.3 C or more whatever ``g`` is;
- the GDN layers are made a long memory of the prompt: ``in_proj_qkvz`` N(0, 1/H) (q, k, v, z
  of unit scale, so the in-kernel L2 norm and the gated RMSNorm normalise signals, not eps),
  the causal conv the identity on its last tap, ``in_proj_ba`` zero (beta = 1/2),
  ``dt_bias`` zero and ``A_log`` such that the state decays by ``DECAY`` per token, the gated
  norm's weight one. The output ``o = S q`` then reads what the prompt's tokens wrote into the
  state; restored from a slot the prefill never wrote, it reads something else;
- the drafter: ``fc`` is ``[I | 0]`` (the embedding half only), its layer's ``o_proj`` and
  ``down_proj`` zero, so its hidden state is the normalised embedding of the token and its
  logits ``lm_head`` of it: the pair, even by ``EVEN_BIAS``.

``W_SCALE`` sets the spread of ``2 <w, g>`` to about ``C`` for a GDN output of the scale the
construction gives (three layers, each ``|g_V|`` about ``G_LAYER``); ``EVEN_BIAS`` = 0.5 C
against that spread makes the even token win about Phi(0.5) = 69 % of the time. The bit is a
difference of two logits of the same size, so bfloat16 rounding moves it by about 2^-9 of its
spread: a request can still differ from the async-off reference without a wrong count where a
bit sits that close to zero (the 0.24.0 arm, which consumes no wrong count, measures that
floor).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

VARIANTS = ("zero", "dummy", "gdn-bit")
SEED = 26  # issue #26
C = 1.0  # the U part's logit scale
EVEN_BIAS = 0.5  # in units of C: P(even) = Phi(EVEN_BIAS / (spread of the bit / C))
DECAY = 0.985  # GDN state decay per token: a memory of about 1 / (1 - DECAY) tokens
G_LAYER = 0.6  # |g_V| written by one GDN layer


def silu_rms() -> float:
    """sqrt(E[silu(z)^2]) for z ~ N(0, 1), by quadrature (about 0.60)."""
    n, lo, hi = 4000, -10.0, 10.0
    dz = (hi - lo) / n
    total = 0.0
    for i in range(n):
        z = lo + (i + 0.5) * dz
        s = z / (1.0 + math.exp(-z))
        total += s * s * math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) * dz
    return math.sqrt(total)


def check_variant(name: str) -> str:
    if name not in VARIANTS:
        raise ValueError(f"--weights {name!r}: expected one of {', '.join(VARIANTS)}")
    return name


def successors(vocab: int, seed: int = SEED) -> list[int]:
    """``pi``: token -> its even successor candidate's pair base ``2 * (pi(t) // 2)``."""
    import random

    perm = list(range(vocab))
    random.Random(seed).shuffle(perm)
    return [2 * (p // 2) for p in perm]


def gdn_bit_tensors(hidden: int, vocab: int, value_dim: int, layers: int = 3,
                    seed: int = SEED) -> dict[str, Any]:  # fmt: skip
    """The constructed tensors of ``gdn-bit`` (float32, CPU): ``embed`` [vocab, hidden],
    ``lm_head`` [vocab, hidden], ``w`` [hidden] (the bit's direction), ``in_proj`` (a
    generator's draw per call, see :func:`apply`) and the scalars. Pure: same seed, same
    tensors."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    u_dim = hidden // 2
    embed = torch.zeros(vocab, hidden)
    u = torch.randn(vocab, u_dim, generator=gen)
    embed[:, :u_dim] = u / u.norm(dim=1, keepdim=True)
    base = successors(vocab, seed)
    pair_sum = torch.zeros(vocab // 2, hidden)
    for t, b in enumerate(base):
        pair_sum[b // 2] += embed[t]
    w = torch.zeros(hidden)
    wv = torch.randn(hidden - u_dim, generator=gen)
    # spread of <w, g> for g isotropic in V with |g| = sqrt(layers) * G_LAYER: |w| |g| / sqrt(|V|)
    g_norm = math.sqrt(layers) * G_LAYER
    w_norm = C * math.sqrt(hidden - u_dim) / (2.0 * g_norm)
    w[u_dim:] = wv / wv.norm() * w_norm
    lm_head = torch.zeros(vocab, hidden)
    lm_head[0::2] = C * (1.0 + EVEN_BIAS) * pair_sum + w
    lm_head[1::2] = C * pair_sum - w
    # out_proj rows of V: |g_V| = sqrt(|V|) * s * sqrt(value_dim) * rms(gated norm output)
    out_std = G_LAYER / (math.sqrt(hidden - u_dim) * math.sqrt(value_dim) * silu_rms())
    return {"embed": embed, "lm_head": lm_head, "w": w, "successor_base": base,
            "out_proj_std": out_std, "generator": gen}  # fmt: skip


def _named(module: Any) -> Iterable[tuple[str, Any]]:
    return module.named_parameters(remove_duplicate=False)


def apply(target: Any, drafter: Any, name: str) -> dict[str, Any]:
    """Set the weights of the live target model and MTP drafter (``torch.nn.Module``s) to the
    variant ``name``; returns what was done (for summary.json). Refuses, before writing
    anything, a model whose parameters are not the ones the variant expects."""
    import torch

    check_variant(name)
    if name == "dummy":
        return {"variant": name}
    if name == "zero":  # as every committed run: zero logits -> argmax 0 -> drafts accepted
        with torch.no_grad():
            n_target = sum(p.zero_().numel() for p in target.parameters())
            n_drafter = sum(p.zero_().numel() for p in drafter.parameters())
        return {"variant": name, "zeroed_params": {"target": n_target, "drafter": n_drafter}}
    return _apply_gdn_bit(target, drafter)


def plan_gdn_bit(target_params: dict[str, Any], drafter_params: dict[str, Any]) -> list[str]:
    """Every parameter name ``gdn-bit`` sets, checked: a missing piece is an error naming it."""
    need_t = ["model.embed_tokens.weight", "lm_head.weight"]
    gdn = [n for n in target_params if ".linear_attn." in n]
    if not gdn:
        raise ValueError("gdn-bit: the target has no linear_attn (GDN) parameters")
    for suffix in ("in_proj_qkvz.weight", "in_proj_ba.weight", "conv1d.weight", "A_log",
                   "dt_bias", "norm.weight", "out_proj.weight"):  # fmt: skip
        if not any(n.endswith(".linear_attn." + suffix) for n in gdn):
            raise ValueError(f"gdn-bit: no linear_attn.{suffix} in the target")
    if "model.fc.weight" not in drafter_params:
        raise ValueError("gdn-bit: the drafter has no model.fc (not Qwen3-Next MTP)")
    missing = [n for n in need_t if n not in target_params]
    if missing:
        raise ValueError(f"gdn-bit: the target has no {', '.join(missing)}")
    return need_t + gdn + ["model.fc.weight"]


def _apply_gdn_bit(target: Any, drafter: Any) -> dict[str, Any]:
    import torch

    tp, dp = dict(_named(target)), dict(_named(drafter))
    plan_gdn_bit(tp, dp)
    embed_w, head_w = tp["model.embed_tokens.weight"], tp["lm_head.weight"]
    vocab, hidden = embed_w.shape
    u_dim = hidden // 2
    out_w = next(p for n, p in tp.items() if n.endswith(".linear_attn.out_proj.weight"))
    value_dim = out_w.shape[1]
    n_gdn = sum(n.endswith(".linear_attn.out_proj.weight") for n in tp)
    built = gdn_bit_tensors(hidden, vocab, value_dim, layers=n_gdn)
    gen = built["generator"]
    a_log = math.log(-math.log(DECAY) / math.log(2.0))  # -exp(A_log) * softplus(0) = log(DECAY)
    zeroed = 0
    with torch.no_grad():

        def put(p: Any, value: Any) -> None:
            p.copy_(value.to(dtype=p.dtype, device=p.device))

        for params in (tp, dp):
            for n, p in params.items():
                if n.endswith((".o_proj.weight", ".down_proj.weight")):
                    zeroed += p.zero_().numel()
        put(embed_w, built["embed"])
        put(head_w, built["lm_head"])
        for n, p in tp.items():
            if ".linear_attn." not in n:
                continue
            if n.endswith("in_proj_qkvz.weight"):
                put(p, torch.randn(p.shape, generator=gen) / math.sqrt(hidden))
            elif n.endswith(("in_proj_ba.weight", "dt_bias")):
                p.zero_()
            elif n.endswith("A_log"):
                p.fill_(a_log)
            elif n.endswith("conv1d.weight"):  # [conv_dim, 1, width]: the identity
                p.zero_()
                p[..., -1] = 1.0
            elif n.endswith(".linear_attn.norm.weight"):  # RMSNormGated: w * norm(o) * silu(z)
                p.fill_(1.0)
            elif n.endswith("out_proj.weight"):
                value = torch.zeros(p.shape)
                value[u_dim:] = torch.randn(p.shape[0] - u_dim, p.shape[1], generator=gen)
                put(p, value * built["out_proj_std"])
        fc = dp["model.fc.weight"]  # [hidden, 2 * hidden]: the embedding half, unchanged
        eye = torch.zeros(fc.shape)
        eye[:, :hidden] = torch.eye(hidden)
        put(fc, eye)
        # vLLM shares embed_tokens and lm_head with an MTP drafter; a copy gets the same values
        for key, src in (("model.embed_tokens.weight", embed_w), ("lm_head.weight", head_w)):
            if key in dp and dp[key].data_ptr() != src.data_ptr():
                dp[key].copy_(src)
    return {
        "variant": "gdn-bit", "seed": SEED, "c": C, "even_bias": EVEN_BIAS, "decay": DECAY,
        "g_layer": G_LAYER, "gdn_layers": n_gdn, "zeroed_output_params": zeroed,
        "shared_embed": dp.get("model.embed_tokens.weight", embed_w).data_ptr()
        == embed_w.data_ptr(),
        "shared_lm_head": dp.get("lm_head.weight", head_w).data_ptr() == head_w.data_ptr(),
    }  # fmt: skip
