"""lowcomm's GPT-2-block presets in plain PyTorch: the baseline `lowcomm bench
--device cuda` is held against on the same GPU (scripts/bench_gpu.sh), and
on the CPU the same comparison with `--device cpu`.

    python bench/torch/gpt_reference.py --preset gpt2 --device cuda --precision bf16 --batch 8
    python bench/torch/gpt_reference.py --preset nano --device cpu

The model is lowcomm's (src/model/gpt.rs): learned positions, pre-LN
blocks with biases, causal multi-head attention through
scaled_dot_product_attention, exact-erf GELU, a 4x MLP, final LayerNorm, a
head tied to the token embedding; N(0, 0.02) init. One step is what
`lowcomm bench` times: zero the gradients, forward, cross-entropy, backward,
AdamW (lr 1e-3, betas 0.9/0.95, eps 1e-8, weight decay 0.1), all on the
device in PyTorch's defaults (eager; AdamW's foreach path). bf16 is
torch.autocast (matmuls and attention in bf16, norms and the loss in f32,
f32 weights and optimizer).

Prints one RESULT line: median step time (after --warmup steps, each step
waited for on CUDA) and of its forward + backward alone, tokens/s, model FLOP/s (lowcomm's count:
6 x matmul parameters + 12 x layers x ctx x width per token) and, when the
peak is known (--peak-tflops, or the card's name in PEAKS), the model FLOPs
utilisation; the peak device memory (CUDA) or resident memory (CPU).
"""
import argparse
import math
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# vocab, width, layers, heads, ctx, lowcomm bench's batch (2048 tokens a step)
PRESETS = {
    "nano": (2048, 128, 2, 4, 64, 32),
    "micro": (4096, 256, 4, 4, 128, 16),
    "small": (4096, 512, 6, 8, 256, 8),
    "gpt2": (50257, 768, 12, 12, 1024, 2),
}

# Dense peak FLOP/s by card and precision, from the vendors' data sheets
# (f32: the CUDA cores, since neither side enables TF32).
PEAKS = {
    "H100": {"bf16": 989e12, "f32": 67e12},
    "H200": {"bf16": 989e12, "f32": 67e12},
    "A100": {"bf16": 312e12, "f32": 19.5e12},
}


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, ctx):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        residual_std = 0.02 / math.sqrt(2 * layers)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = residual_std if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:t]
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def flops_per_token(vocab, d, layers, ctx):
    """lowcomm's count (GptConfig::flops_per_token)."""
    return 6.0 * (layers * 12.0 * d * d + vocab * d) + 12.0 * layers * ctx * d


def peak_for(device, precision, given):
    if given:
        return given * 1e12, "given"
    if device.type != "cuda":
        return None, "unknown"
    name = torch.cuda.get_device_name(device)
    for key, peaks in PEAKS.items():
        if key in name:
            return peaks[precision], name
    return None, name


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="micro", choices=sorted(PRESETS))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--batch", type=int, help="sequences per step [default: the preset's 2048 tokens]")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, help="CPU threads [default: torch's]")
    ap.add_argument("--peak-tflops", type=float, help="the device's peak in this precision, for the utilisation")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    vocab, d, layers, heads, ctx, batch = PRESETS[a.preset]
    batch = a.batch or batch
    torch.manual_seed(0)
    model = GPT(vocab, d, layers, heads, ctx).to(device)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    data = torch.randint(0, vocab, (batch, ctx + 1), device=device)
    x, y = data[:, :-1].contiguous(), data[:, 1:].reshape(-1)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.precision == "bf16")
    times, fwd_bwd, losses = [], [], []
    for s in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast:
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, vocab), y)
        loss.backward()
        sync()  # lowcomm's forward + backward is timed to here too
        t1 = time.perf_counter()
        opt.step()
        losses.append(loss.item())  # a host value: waits for the step
        sync()
        dt = time.perf_counter() - t0
        if s >= a.warmup:
            times.append(dt)
            fwd_bwd.append(t1 - t0)
        print(f"step {s} loss {losses[-1]:.4f} time {dt:.4f}s", file=sys.stderr)
    med = statistics.median(times)
    tokens = batch * ctx
    flops = flops_per_token(vocab, d, layers, ctx) * tokens / med
    peak, card = peak_for(device, a.precision, a.peak_tflops)
    mfu = f"{flops / peak:.4f}" if peak else "nan"
    if device.type == "cuda":
        mem = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        mem = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"RESULT lib=torch-{torch.__version__} device={a.device} card={card.replace(' ', '_')} precision={a.precision} "
        f"preset={a.preset} batch={batch}x{ctx} params={params} median_step_s={med:.5f} fwd_bwd_s={statistics.median(fwd_bwd):.5f} tok_per_s={tokens / med:.0f} "
        f"tflops={flops / 1e12:.3f} mfu={mfu} peak_mem_mb={mem:.0f} loss_first={losses[0]:.4f} loss_last={losses[-1]:.4f}"
    )


if __name__ == "__main__":
    main()
