//! Text generation from a trained model: temperature and top-k sampling.

use crate::model::Gpt;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;

/// How to pick each next token.
#[derive(Clone, Debug)]
pub struct SampleOptions {
    /// Tokens to generate.
    pub max_tokens: usize,
    /// Softmax temperature; 0 means greedy (always the most likely token).
    pub temperature: f32,
    /// Keep only the k most likely tokens (0: all).
    pub top_k: usize,
    /// Seed of the sampling RNG.
    pub seed: u64,
    /// Stop early at this token (end of text), if given.
    pub stop_token: Option<u32>,
}

/// Continue `prompt` (token ids; must be non-empty) by up to
/// `opts.max_tokens` tokens. The model sees at most its context length of
/// the most recent tokens.
pub fn generate(model: &mut Gpt, prompt: &[u32], opts: &SampleOptions) -> Vec<u32> {
    assert!(!prompt.is_empty(), "generation needs at least one prompt token");
    let (ctx, v) = (model.cfg.ctx, model.cfg.vocab_size);
    let mut rng = Pcg64::seed_from_u64(opts.seed);
    let mut tokens = prompt.to_vec();
    let mut out = Vec::new();
    let mut probs = vec![0.0f32; v];
    for _ in 0..opts.max_tokens {
        let window = &tokens[tokens.len().saturating_sub(ctx)..];
        let logits = model.logits(window, 1, window.len());
        let last = &logits[(window.len() - 1) * v..];
        let next = pick(last, &mut probs, opts, &mut rng);
        tokens.push(next);
        out.push(next);
        if Some(next) == opts.stop_token {
            break;
        }
    }
    out
}

/// Sample one token id from `logits`.
fn pick(logits: &[f32], probs: &mut [f32], opts: &SampleOptions, rng: &mut Pcg64) -> u32 {
    let argmax = logits.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(i, _)| i);
    if opts.temperature <= 0.0 {
        return argmax as u32;
    }
    // Threshold = k-th largest logit; everything below it gets probability 0.
    let threshold = if opts.top_k > 0 && opts.top_k < logits.len() {
        let mut sorted = logits.to_vec();
        sorted.sort_unstable_by(|a, b| b.total_cmp(a));
        sorted[opts.top_k - 1]
    } else {
        f32::NEG_INFINITY
    };
    let max = logits[argmax];
    let mut total = 0.0f64;
    for (p, &z) in probs.iter_mut().zip(logits) {
        *p = if z >= threshold { ((z - max) / opts.temperature).exp() } else { 0.0 };
        total += *p as f64;
    }
    let mut r = rng.random::<f64>() * total;
    for (i, &p) in probs.iter().enumerate() {
        r -= p as f64;
        if r <= 0.0 && p > 0.0 {
            return i as u32;
        }
    }
    argmax as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(temperature: f32, top_k: usize) -> SampleOptions {
        SampleOptions { max_tokens: 1, temperature, top_k, seed: 0, stop_token: None }
    }

    #[test]
    fn greedy_takes_the_argmax() {
        let mut rng = Pcg64::seed_from_u64(1);
        let mut p = vec![0.0; 4];
        assert_eq!(pick(&[0.1, 3.0, 2.9, -1.0], &mut p, &opts(0.0, 0), &mut rng), 1);
    }

    #[test]
    fn top_k_never_picks_outside_the_k_best() {
        let mut rng = Pcg64::seed_from_u64(2);
        let mut p = vec![0.0; 5];
        let logits = [1.0, 5.0, 4.9, 0.5, 4.8];
        for _ in 0..200 {
            let t = pick(&logits, &mut p, &opts(5.0, 2), &mut rng);
            assert!(t == 1 || t == 2, "picked {t}");
        }
    }
}
