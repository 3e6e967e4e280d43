"""Make tests/fixtures/hf-gpt2-tiny/: a tiny random GPT-2 built and saved by
Hugging Face transformers, and its logits for a fixed token sequence, for
the Rust test that `train --init-from-hf` loads it and computes the same
logits (src/import/tests.rs).

The model: GPT2LMHeadModel, vocab 64, n_embd 16, 2 layers, 2 heads,
n_positions 16, activation "gelu" (the exact erf GELU lowcomm computes;
GPT-2's default "gelu_new" is refused by the import), seed 0, float32.
Its parameters are drawn at a larger scale than GPT-2's initialisation
(std 0.3 for matrices and embeddings, non-trivial biases and LayerNorm
gains) so that every tensor, transposed or not, moves the logits.

    python3 -m venv .venv-hf && .venv-hf/bin/pip install torch transformers safetensors
    .venv-hf/bin/python scripts/make_hf_fixture.py

Writes config.json and model.safetensors (save_pretrained) and logits.json:
{"tokens": [...], "logits": [[... vocab values ...] per token]}.
"""
import json
import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "hf-gpt2-tiny")
TOKENS = [3, 17, 42, 0, 63, 8, 8, 25, 11, 50, 2, 33]


def main():
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=64, n_embd=16, n_layer=2, n_head=2, n_positions=16,
                     activation_function="gelu", bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
        logits = model(torch.tensor([TOKENS])).logits[0]
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(OUT, safe_serialization=True)
    with open(os.path.join(OUT, "logits.json"), "w") as f:
        json.dump({"tokens": TOKENS, "logits": logits.tolist()}, f)
    print(f"wrote {OUT}: {sum(p.numel() for p in model.parameters())} parameters, "
          f"logits of {len(TOKENS)} tokens (max |logit| {logits.abs().max().item():.3f})")


if __name__ == "__main__":
    main()
