"""Make the Hugging Face fixtures under tests/fixtures/: tiny random models
built and saved by transformers, and their logits for a fixed token
sequence, for the Rust tests that `train --init-from-hf` loads them and
computes the same logits (src/import/tests.rs).

    python3 -m venv .venv-hf && .venv-hf/bin/pip install torch transformers safetensors
    .venv-hf/bin/python scripts/make_hf_fixture.py [gpt2|llama|all]

hf-gpt2-tiny: GPT2LMHeadModel, vocab 64, n_embd 16, 2 layers, 2 heads,
n_positions 16, activation "gelu" (the exact erf GELU lowcomm computes;
GPT-2's default "gelu_new" is refused by the import), seed 0.

hf-llama-tiny: LlamaForCausalLM, vocab 64, hidden 16, intermediate 40,
2 layers, 4 heads on 2 key/value heads (grouped-query attention), an
untied head, max_position_embeddings 16, RMSNorm eps 1e-5, rope theta
10000, seed 0.

Both in float32, with parameters drawn at a larger scale than the
families' initialisation (std 0.3 for matrices and embeddings, norm gains
around 1, non-trivial biases) so that every tensor, transposed, permuted
or not, moves the logits. Each directory gets config.json and
model.safetensors (save_pretrained) and logits.json:
{"tokens": [...], "logits": [[... vocab values ...] per token]}.
"""
import json
import os
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
TOKENS = [3, 17, 42, 0, 63, 8, 8, 25, 11, 50, 2, 33]


def gpt2():
    cfg = GPT2Config(vocab_size=64, n_embd=16, n_layer=2, n_head=2, n_positions=16,
                     activation_function="gelu", bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg)


def llama():
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=40, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                      attention_bias=False, mlp_bias=False, hidden_act="silu", bos_token_id=0, eos_token_id=0)
    return LlamaForCausalLM(cfg)


def is_norm_gain(name):
    return name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight", "layernorm.weight", "norm.weight"))


def make(name, build):
    torch.manual_seed(0)
    model = build().eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if is_norm_gain(pname):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.3 * torch.randn_like(p))
        logits = model(torch.tensor([TOKENS])).logits[0]
    out = os.path.join(FIXTURES, name)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    with open(os.path.join(out, "logits.json"), "w") as f:
        json.dump({"tokens": TOKENS, "logits": logits.tolist()}, f)
    print(f"wrote {out}: {sum(p.numel() for p in model.parameters())} parameters, "
          f"logits of {len(TOKENS)} tokens (max |logit| {logits.abs().max().item():.3f})")


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    families = {"gpt2": ("hf-gpt2-tiny", gpt2), "llama": ("hf-llama-tiny", llama)}
    if which not in families and which != "all":
        sys.exit(f"unknown family '{which}': one of gpt2, llama, all")
    for key, (name, build) in families.items():
        if which in (key, "all"):
            make(name, build)


if __name__ == "__main__":
    main()
