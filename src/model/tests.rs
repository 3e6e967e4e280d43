//! Whole-model tests: gradients reach every parameter and match finite
//! differences; accumulation over micro-batches equals one big batch.

use super::{Gpt, GptConfig};

fn tiny() -> GptConfig {
    GptConfig::gpt2(37, 16, 2, 2, 8)
}

/// A tiny llama: 4 query heads on 2 key/value heads, untied head, MLP 24.
fn tiny_llama() -> GptConfig {
    GptConfig { n_head: 4, n_kv_head: Some(2), ffn_hidden: Some(24), tie_head: false, ..GptConfig::llama_of(tiny()) }
}

fn batch(cfg: &GptConfig, b: usize, t: usize, salt: u32) -> (Vec<u32>, Vec<u32>) {
    let v = cfg.vocab_size as u32;
    let toks: Vec<u32> = (0..(b * t + 1) as u32).map(|i| (i * 7 + salt * 13 + i * i) % v).collect();
    (toks[..b * t].to_vec(), toks[1..].to_vec())
}

#[test]
fn initial_loss_is_near_uniform() {
    for cfg in [GptConfig::nano(), GptConfig::llama_nano()] {
        initial_loss_near_uniform(cfg);
    }
}

fn initial_loss_near_uniform(cfg: GptConfig) {
    let mut m = Gpt::new(cfg.clone(), 1).unwrap();
    let (x, y) = batch(&cfg, 2, cfg.ctx, 0);
    let loss = m.loss(&x, &y, 2, cfg.ctx);
    let uniform = (cfg.vocab_size as f32).ln();
    assert!((loss - uniform).abs() < 0.1, "loss {loss} vs ln(vocab) {uniform}");
}

#[test]
fn every_parameter_receives_a_gradient() {
    let untied = GptConfig { tie_head: false, ..GptConfig::llama_nano() };
    for cfg in [GptConfig::nano(), GptConfig::llama_nano(), untied] {
        every_parameter_gets_a_gradient(cfg);
    }
}

fn every_parameter_gets_a_gradient(cfg: GptConfig) {
    let mut m = Gpt::new(cfg.clone(), 2).unwrap();
    let (x, y) = batch(&cfg, 4, cfg.ctx, 1);
    m.forward_backward(&x, &y, 4, cfg.ctx, 1.0);
    for t in &m.layout.tensors {
        let g = &m.grads[t.range.clone()];
        let nonzero = g.iter().filter(|v| **v != 0.0).count();
        assert!(g.iter().all(|v| v.is_finite()), "{} has a non-finite gradient", t.name);
        // An untied embedding only gets gradients in the rows of the tokens read.
        let rows_seen = |tok: &[u32]| tok.iter().collect::<std::collections::BTreeSet<_>>().len() * cfg.n_embd;
        let want = if t.range == m.layout.wte && !cfg.tied() { rows_seen(&x) } else { g.len() };
        assert!(
            nonzero as f64 >= 0.99 * want as f64,
            "{}: only {nonzero} of {} gradient entries are nonzero",
            t.name,
            g.len()
        );
    }
}

/// Central differences on the mean loss, at the largest-gradient entries and
/// a spread of others of every tensor.
fn check_model_gradient(cfg: GptConfig, b: usize, eps: f32, samples: usize) {
    let t = cfg.ctx;
    let mut m = Gpt::new(cfg.clone(), 3).unwrap();
    let (x, y) = batch(&cfg, b, t, 2);
    m.zero_grads();
    m.forward_backward(&x, &y, b, t, 1.0);
    let grads = m.grads.clone();
    for spec in m.layout.tensors.clone() {
        let g = &grads[spec.range.clone()];
        let gmax = g.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let argmax = g.iter().enumerate().max_by(|a, b| a.1.abs().total_cmp(&b.1.abs())).unwrap().0;
        let stride = (g.len() / samples).max(1);
        let picks: Vec<usize> = std::iter::once(argmax).chain((0..g.len()).step_by(stride).take(samples)).collect();
        for i in picks {
            let k = spec.range.start + i;
            let orig = m.params[k];
            m.params[k] = orig + eps;
            let up = m.loss(&x, &y, b, t) as f64;
            m.params[k] = orig - eps;
            let down = m.loss(&x, &y, b, t) as f64;
            m.params[k] = orig;
            let fd = ((up - down) / (2.0 * eps as f64)) as f32;
            let err = (fd - g[i]).abs();
            assert!(
                err <= 0.05 * gmax + 2e-5,
                "{}[{i}]: analytic {} vs finite difference {fd} (max |g| {gmax})",
                spec.name,
                g[i]
            );
        }
    }
}

#[test]
fn tiny_model_gradient_matches_finite_differences() {
    check_model_gradient(tiny(), 2, 1e-2, 12);
}

#[test]
fn nano_model_gradient_matches_finite_differences() {
    check_model_gradient(GptConfig::nano(), 1, 2e-2, 3);
}

#[test]
fn tiny_llama_gradient_matches_finite_differences() {
    check_model_gradient(tiny_llama(), 2, 1e-2, 12);
    // tied head, plain multi-head attention
    check_model_gradient(GptConfig { n_kv_head: None, tie_head: true, ..tiny_llama() }, 2, 1e-2, 6);
}

#[test]
fn llama_nano_gradient_matches_finite_differences() {
    check_model_gradient(GptConfig::llama_nano(), 1, 2e-2, 3);
}

#[test]
fn accumulated_micro_batches_equal_one_big_batch() {
    for cfg in [tiny(), tiny_llama()] {
        accumulation_equals_big_batch(cfg);
    }
}

fn accumulation_equals_big_batch(cfg: GptConfig) {
    let t = cfg.ctx;
    let (x, y) = batch(&cfg, 4, t, 5);
    let mut big = Gpt::new(cfg.clone(), 4).unwrap();
    big.forward_backward(&x, &y, 4, t, 1.0);
    let mut acc = Gpt::new(cfg.clone(), 4).unwrap();
    for h in 0..2 {
        let r = h * 2 * t..(h + 1) * 2 * t;
        acc.forward_backward(&x[r.clone()], &y[r], 2, t, 0.5);
    }
    for (a, b) in big.grads.iter().zip(&acc.grads) {
        assert!((a - b).abs() <= 1e-6 + 1e-4 * a.abs(), "{a} vs {b}");
    }
}

#[test]
fn forward_backward_is_bit_reproducible() {
    for cfg in [GptConfig::nano(), GptConfig::llama_nano()] {
        bit_reproducible(cfg);
    }
}

fn bit_reproducible(cfg: GptConfig) {
    let (x, y) = batch(&cfg, 3, cfg.ctx, 9);
    let run = || {
        let mut m = Gpt::new(cfg.clone(), 11).unwrap();
        let loss = m.forward_backward(&x, &y, 3, cfg.ctx, 1.0);
        (loss.to_bits(), m.grads.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
    };
    assert_eq!(run(), run());
}

#[test]
fn dropout_changes_training_but_not_evaluation() {
    let cfg = GptConfig { dropout: 0.2, ..tiny() };
    let t = cfg.ctx;
    let (x, y) = batch(&cfg, 2, t, 3);
    let mut m = Gpt::new(cfg.clone(), 5).unwrap();
    let e1 = m.loss(&x, &y, 2, t);
    let tr = m.forward_backward(&x, &y, 2, t, 1.0);
    let e2 = m.loss(&x, &y, 2, t);
    assert_eq!(e1, e2, "evaluation must not use dropout");
    assert_ne!(tr, e1, "training forward should drop activations");
    assert!(m.grads.iter().any(|g| *g != 0.0));
}

#[test]
fn shorter_sequences_use_the_first_positions() {
    // Generation runs the model on prefixes shorter than ctx.
    for cfg in [tiny(), tiny_llama()] {
        prefix_logits_match(cfg);
    }
}

fn prefix_logits_match(cfg: GptConfig) {
    let mut m = Gpt::new(cfg.clone(), 6).unwrap();
    let (x, _) = batch(&cfg, 1, cfg.ctx, 0);
    let full = m.logits(&x, 1, cfg.ctx).to_vec();
    let part = m.logits(&x[..3], 1, 3).to_vec();
    // causal: the first 3 positions' logits do not depend on later tokens
    for (a, b) in full[..3 * cfg.vocab_size].iter().zip(&part) {
        assert!((a - b).abs() < 1e-5);
    }
}

#[test]
fn llama_init_follows_the_rule() {
    let cfg = GptConfig { n_layer: 8, ..GptConfig::llama_nano() };
    let m = Gpt::new(cfg, 7).unwrap();
    let std = |name: &str| {
        let p = &m.params[m.layout.get(name).unwrap().range.clone()];
        (p.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / p.len() as f64).sqrt()
    };
    assert!((std("layers.0.self_attn.q_proj.weight") - 0.02).abs() < 1e-3);
    assert!((std("layers.3.mlp.down_proj.weight") - 0.005).abs() < 3e-4, "0.02 / sqrt(16)");
    assert!((std("layers.3.self_attn.o_proj.weight") - 0.005).abs() < 3e-4);
    assert_eq!(std("norm.weight"), 1.0);
    assert_eq!(std("layers.5.post_attention_layernorm.weight"), 1.0);
}
