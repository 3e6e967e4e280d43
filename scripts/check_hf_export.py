"""Check a `lowcomm export --hf` directory with Hugging Face transformers.

Loads DIR with `transformers.GPT2LMHeadModel.from_pretrained`, runs the
tokens stored in REF (written by `lowcomm export --reference REF`), and
compares the logits with lowcomm's. Also checks the exported tokenizer
encodes text to the same ids through `transformers.AutoTokenizer`.

    lowcomm export --ckpt runs/nano --hf out/hf-nano --reference out/hf-nano-ref.safetensors
    .venv-torch/bin/python scripts/check_hf_export.py out/hf-nano out/hf-nano-ref.safetensors

Needs: pip install torch transformers safetensors. Exits 1 if the max
absolute logit difference is 1e-4 or more.
"""
import json
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, GPT2LMHeadModel


def main():
    hf_dir, ref_path = sys.argv[1], sys.argv[2]
    ref = load_file(ref_path)
    tokens = ref["tokens"].round().long().unsqueeze(0)
    want = ref["logits"]
    model = GPT2LMHeadModel.from_pretrained(hf_dir).eval()
    with torch.no_grad():
        got = model(tokens).logits[0]
    diff = (got - want).abs().max().item()
    cfg = json.load(open(f"{hf_dir}/config.json"))
    tok = AutoTokenizer.from_pretrained(hf_dir)
    text = "It is a truth universally acknowledged"
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text, "tokenizer round trip failed"
    print(f"transformers loaded {hf_dir}: {sum(p.numel() for p in model.parameters())} params, "
          f"activation {cfg['activation_function']}, {tokens.shape[1]} tokens, "
          f"max |logit difference| = {diff:.3e}")
    if not diff < 1e-4:
        print("FAIL: logits differ by 1e-4 or more", file=sys.stderr)
        sys.exit(1)
    print("OK: same logits as lowcomm (< 1e-4)")


if __name__ == "__main__":
    main()
