//! `import::hf` against a model transformers built (the golden fixture made
//! by scripts/make_hf_fixture.py) and against our own export.

use super::hf::{load, HfModel};
use crate::checkpoint::{read_f32_tensors, write_f32_tensors};
use crate::model::{Gpt, GptConfig, ParamLayout};
use std::path::{Path, PathBuf};

/// (name, shape, data), as `checkpoint::read_f32_tensors` gives them.
type NamedTensor = (String, Vec<usize>, Vec<f32>);
/// A change to a directory's tensors.
type Edit = Box<dyn FnOnce(&mut Vec<NamedTensor>)>;

fn fixture() -> PathBuf {
    fixture_named("hf-gpt2-tiny")
}

fn fixture_named(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The largest |logit difference| between lowcomm's model loaded from the
/// fixture `name` and the logits transformers wrote beside it; checks the
/// loaded shape is `want`.
fn worst_logit_difference(name: &str, want: &GptConfig) -> f64 {
    let dir = fixture_named(name);
    let HfModel { config, params, tokenizer_json } = load(&dir).unwrap();
    assert_eq!(&config, want);
    assert!(tokenizer_json.is_none());
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("logits.json")).unwrap()).unwrap();
    let tokens: Vec<u32> = expected["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as u32).collect();
    let mut model = Gpt::from_params(config.clone(), params, 0).unwrap();
    let got = model.logits(&tokens, 1, tokens.len()).to_vec();
    let rows = expected["logits"].as_array().unwrap();
    assert_eq!(rows.len() * config.vocab_size, got.len());
    let mut worst = 0.0f64;
    for (i, row) in rows.iter().enumerate() {
        for (j, w) in row.as_array().unwrap().iter().enumerate() {
            worst = worst.max((w.as_f64().unwrap() - f64::from(got[i * config.vocab_size + j])).abs());
        }
    }
    eprintln!("{name}: max |logit difference| against transformers: {worst:e}");
    worst
}

#[test]
fn the_transformers_gpt2_fixture_gives_transformers_logits() {
    let worst = worst_logit_difference("hf-gpt2-tiny", &GptConfig::gpt2(64, 16, 2, 2, 16));
    assert!(worst < 1e-5, "max |logit difference| {worst:e}");
}

/// A LlamaForCausalLM saved by transformers 5 (rope settings under
/// `rope_parameters`, grouped-query attention, untied head): our RMSNorm,
/// rotary halves, SwiGLU and key/value head sharing give its logits.
#[test]
fn the_transformers_llama_fixture_gives_transformers_logits() {
    let want = GptConfig {
        ffn_hidden: Some(40),
        n_kv_head: Some(2),
        tie_head: false,
        ..GptConfig::llama_of(GptConfig::gpt2(64, 16, 2, 4, 16))
    };
    let worst = worst_logit_difference("hf-llama-tiny", &want);
    assert!(worst < 1e-5, "max |logit difference| {worst:e}");
}

#[test]
fn import_inverts_export_bit_for_bit() {
    let cfg = GptConfig::gpt2(8, 4, 2, 2, 3);
    let model = Gpt::new(cfg.clone(), 7).unwrap();
    let layout = ParamLayout::new(&cfg);
    let tensors: Vec<NamedTensor> =
        layout.tensors.iter().map(|t| crate::export::hf::to_gpt2(t, &model.params[t.range.clone()])).collect();
    let dir = tempfile::tempdir().unwrap();
    write_dir(dir.path(), &cfg, &tensors);
    assert_eq!(bits(&load(dir.path()).unwrap().params), bits(&model.params));
}

/// `dir` as a Hugging Face directory of `tensors` and the config of `cfg`.
fn write_dir(dir: &Path, cfg: &GptConfig, tensors: &[NamedTensor]) {
    let views: Vec<(&str, Vec<usize>, &[f32])> =
        tensors.iter().map(|(n, s, d)| (n.as_str(), s.clone(), d.as_slice())).collect();
    write_f32_tensors(&dir.join("model.safetensors"), &views).unwrap();
    let config = serde_json::json!({"model_type": "gpt2", "vocab_size": cfg.vocab_size, "n_embd": cfg.n_embd,
        "n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_positions": cfg.ctx, "activation_function": "gelu"});
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
}

/// The fixture's tensors changed by `edit`, loaded (error as one line).
fn load_edited(edit: impl FnOnce(&mut Vec<NamedTensor>)) -> Result<Vec<f32>, String> {
    let mut tensors = read_f32_tensors(&fixture().join("model.safetensors")).unwrap();
    edit(&mut tensors);
    let dir = tempfile::tempdir().unwrap();
    let cfg = load(&fixture()).unwrap().config;
    write_dir(dir.path(), &cfg, &tensors);
    load(dir.path()).map(|m| m.params).map_err(|e| format!("{e:#}"))
}

#[test]
fn names_load_with_or_without_the_prefix_and_mask_buffers_are_skipped() {
    let want = bits(&load(&fixture()).unwrap().params);
    let bare = load_edited(|ts| {
        for t in ts.iter_mut() {
            t.0 = t.0.trim_start_matches("transformer.").to_string();
        }
        ts.push(("h.0.attn.bias".into(), vec![1, 1, 2, 2], vec![1.0, 0.0, 1.0, 1.0]));
    });
    assert_eq!(bits(&bare.unwrap()), want);
    // A tied head stored anyway is the token embedding.
    let tied = load_edited(|ts| {
        let wte = ts.iter().find(|t| t.0 == "transformer.wte.weight").unwrap().clone();
        ts.push(("lm_head.weight".into(), wte.1, wte.2));
    });
    assert_eq!(bits(&tied.unwrap()), want);
}

#[test]
fn a_missing_extra_misshapen_or_untied_tensor_is_named() {
    let cases: [(Edit, &str); 4] = [
        (
            Box::new(|ts: &mut Vec<NamedTensor>| ts.retain(|t| t.0 != "transformer.ln_f.bias")),
            "missing tensor `transformer.ln_f.bias`",
        ),
        (
            Box::new(|ts: &mut Vec<NamedTensor>| {
                ts.push(("transformer.h.0.mlp.gate.weight".into(), vec![1], vec![0.0]))
            }),
            "`transformer.h.0.mlp.gate.weight`",
        ),
        (
            Box::new(|ts: &mut Vec<NamedTensor>| {
                let t = ts.iter_mut().find(|t| t.0 == "transformer.h.1.attn.c_attn.weight").unwrap();
                t.1 = vec![t.1[1], t.1[0]]; // stored as Linear, not Conv1D
            }),
            "`transformer.h.1.attn.c_attn.weight` has shape [48, 16], config.json's model needs [16, 48]",
        ),
        (
            Box::new(|ts: &mut Vec<NamedTensor>| ts.push(("lm_head.weight".into(), vec![64, 16], vec![0.5; 1024]))),
            "untied LM head",
        ),
    ];
    for (edit, want) in cases {
        let e = load_edited(edit).unwrap_err();
        assert!(e.contains(want) && e.contains("--init-from-hf") && !e.contains('\n'), "{want}: {e}");
    }
}

/// A llama model written as `export --hf` writes it reads back to the same
/// bits, tied and untied, with grouped-query attention; a missing tensor
/// is refused naming it.
#[test]
fn llama_import_inverts_export_bit_for_bit() {
    let small = GptConfig { ffn_hidden: Some(12), ..GptConfig::llama_of(GptConfig::gpt2(8, 8, 2, 4, 5)) };
    for cfg in [small.clone(), GptConfig { tie_head: false, n_kv_head: Some(1), ..small }] {
        let model = Gpt::new(cfg.clone(), 7).unwrap();
        let dir = tempfile::tempdir().unwrap();
        crate::export::llama::write_model(&cfg, &model.params, 0, dir.path()).unwrap();
        let back = load(dir.path()).unwrap();
        assert_eq!(back.config, cfg);
        assert_eq!(bits(&back.params), bits(&model.params));
        // Without its last tensor the directory is refused, naming it.
        let mut ts = read_f32_tensors(&dir.path().join("model.safetensors")).unwrap();
        let last = ts.iter().position(|t| t.0 == "model.layers.1.mlp.down_proj.weight").unwrap();
        ts.remove(last);
        let views: Vec<(&str, Vec<usize>, &[f32])> =
            ts.iter().map(|(n, s, d)| (n.as_str(), s.clone(), d.as_slice())).collect();
        write_f32_tensors(&dir.path().join("model.safetensors"), &views).unwrap();
        let e = load(dir.path()).err().unwrap().to_string();
        assert!(e.contains("missing tensor `model.layers.1.mlp.down_proj.weight` (shape [8, 12])"), "{e}");
    }
}
