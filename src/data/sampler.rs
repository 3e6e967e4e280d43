//! What a worker reads: its shard of the token stream, random training
//! windows from it, and the fixed windows used for evaluation.

use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// The `rank`-th of `world` contiguous, near-equal shards of `0..len`.
/// The first `len % world` shards get one extra token, so shards cover
/// `0..len` exactly and differ in size by at most one.
pub fn shard_range(len: usize, rank: usize, world: usize) -> Range<usize> {
    assert!(world > 0 && rank < world, "shard_range: rank {rank} out of world {world}");
    let base = len / world;
    let extra = len % world;
    let start = rank * base + rank.min(extra);
    let size = base + usize::from(rank < extra);
    start..start + size
}

/// Draws random training windows from a token range, reproducibly.
///
/// Each window is `ctx` inputs and the same `ctx` tokens shifted by one as
/// targets, so a window needs `ctx + 1` tokens.
#[derive(Debug, Clone)]
pub struct WindowSampler {
    /// The token range windows are drawn from.
    range: Range<usize>,
    /// Window length (inputs per window).
    ctx: usize,
    /// Source of window starts.
    rng: Pcg64,
    /// Windows drawn so far (for progress and checks on restore).
    windows_drawn: u64,
}

/// Everything needed to resume a [`WindowSampler`] exactly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplerState {
    /// The RNG, mid-stream.
    pub rng: Pcg64,
    /// Windows drawn before the state was taken.
    pub windows_drawn: u64,
    /// Range the sampler was built on; restoring onto another is an error.
    pub range: Range<usize>,
    /// Window length the sampler was built with.
    pub ctx: usize,
}

impl WindowSampler {
    /// A sampler over `range` for windows of `ctx` tokens. `seed` is shared
    /// by all workers; it is mixed with `rank` so each worker draws its own
    /// sequence from the same seed.
    pub fn new(range: Range<usize>, ctx: usize, seed: u64, rank: usize) -> Result<WindowSampler> {
        if ctx == 0 {
            bail!("context length must be at least 1");
        }
        if range.len() < ctx + 1 {
            bail!(
                "the token range {range:?} has only {} tokens, fewer than one context window ({}); use more text or a shorter window (--seq-len N, or [model] ctx in the config)",
                range.len(),
                ctx + 1
            );
        }
        // Not PCG stream selection: rand_pcg warns that streams with the
        // same state can be correlated. Instead hash (seed, rank) into one
        // u64; splitmix64 is a bijection, so for a given rank distinct seeds
        // stay distinct.
        let rng = Pcg64::seed_from_u64(splitmix64(seed ^ splitmix64(rank as u64)));
        Ok(WindowSampler { range, ctx, rng, windows_drawn: 0 })
    }

    /// Start of the next random window, uniform in
    /// `range.start ..= range.end - ctx - 1`.
    pub fn next_start(&mut self) -> usize {
        self.windows_drawn += 1;
        self.rng.random_range(self.range.start..=self.range.end - self.ctx - 1)
    }

    /// Fill a batch of `inputs.len() / ctx` windows: `inputs[b*ctx..][..ctx]`
    /// is a window of `tokens` and `targets` the same window shifted by one.
    /// `tokens` is the whole stream the range indexes into. No allocation.
    pub fn fill_batch(&mut self, tokens: &[u32], inputs: &mut [u32], targets: &mut [u32]) {
        assert!(tokens.len() >= self.range.end, "token stream shorter than the sampler's range");
        assert_eq!(inputs.len(), targets.len(), "inputs and targets differ in length");
        assert_eq!(inputs.len() % self.ctx, 0, "batch buffer is not a multiple of ctx {}", self.ctx);
        let ctx = self.ctx;
        for (inp, tgt) in inputs.chunks_exact_mut(ctx).zip(targets.chunks_exact_mut(ctx)) {
            let start = self.next_start();
            inp.copy_from_slice(&tokens[start..start + ctx]);
            tgt.copy_from_slice(&tokens[start + 1..start + ctx + 1]);
        }
    }

    /// Draws from `range` from now on, continuing the same random stream
    /// (async DiLoCo moves a worker from data shard to data shard); an
    /// error, as in [`WindowSampler::new`], when it cannot hold a window.
    pub fn set_range(&mut self, range: Range<usize>) -> Result<()> {
        if range.len() < self.ctx + 1 {
            bail!(
                "the token range {range:?} has only {} tokens, fewer than one context window ({})",
                range.len(),
                self.ctx + 1
            );
        }
        self.range = range;
        Ok(())
    }

    /// Windows drawn so far.
    pub fn windows_drawn(&self) -> u64 {
        self.windows_drawn
    }

    /// Snapshot for a checkpoint.
    pub fn state(&self) -> SamplerState {
        SamplerState {
            rng: self.rng.clone(),
            windows_drawn: self.windows_drawn,
            range: self.range.clone(),
            ctx: self.ctx,
        }
    }

    /// Resume from a snapshot taken on a sampler with the same range and ctx.
    pub fn restore(&mut self, state: SamplerState) -> Result<()> {
        if state.range != self.range || state.ctx != self.ctx {
            bail!(
                "sampler state is for range {:?} ctx {}, this sampler has range {:?} ctx {}: the data or the window (--seq-len, [model] ctx) changed since the checkpoint",
                state.range,
                state.ctx,
                self.range,
                self.ctx
            );
        }
        self.rng = state.rng;
        self.windows_drawn = state.windows_drawn;
        Ok(())
    }
}

/// The splitmix64 finaliser: a fast bijective mixer of 64-bit values.
pub(crate) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Starts of up to `max_windows` non-overlapping windows of `ctx` inputs
/// (plus one target token) over `tokens`, spread evenly over the whole
/// split (the validation text is the tail of every book, so the first
/// windows alone would measure one book): the same set every time.
pub fn eval_windows(tokens: &[u32], ctx: usize, max_windows: usize) -> Vec<usize> {
    if ctx == 0 {
        return Vec::new();
    }
    let fit = tokens.len().saturating_sub(1) / ctx;
    let k = fit.min(max_windows);
    (0..k).map(|i| i * fit / k * ctx).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_the_stream_exactly_and_disjointly() {
        for (len, world) in [(10, 3), (7, 7), (3, 5), (1000, 8), (0, 2)] {
            let shards: Vec<_> = (0..world).map(|r| shard_range(len, r, world)).collect();
            assert_eq!(shards[0].start, 0);
            assert_eq!(shards[world - 1].end, len);
            for w in shards.windows(2) {
                assert_eq!(w[0].end, w[1].start, "gap or overlap in {shards:?}");
            }
            let sizes: Vec<usize> = shards.iter().map(|s| s.len()).collect();
            assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1, "{sizes:?}");
        }
        assert_eq!(shard_range(10, 0, 3), 0..4);
        assert_eq!(shard_range(10, 2, 3), 7..10);
    }

    fn stream() -> Vec<u32> {
        (0..100).collect()
    }

    #[test]
    fn windows_stay_in_range_and_targets_are_shifted() {
        let tokens = stream();
        let mut s = WindowSampler::new(20..40, 4, 7, 0).unwrap();
        let (mut x, mut y) = (vec![0; 4 * 200], vec![0; 4 * 200]);
        s.fill_batch(&tokens, &mut x, &mut y);
        for (xw, yw) in x.chunks(4).zip(y.chunks(4)) {
            assert!(xw[0] >= 20 && yw[3] < 40, "window {xw:?} {yw:?} leaves 20..40");
            for i in 0..4 {
                assert_eq!(yw[i], xw[i] + 1);
                assert_eq!(xw[i], xw[0] + i as u32);
            }
        }
        // Both ends of the range are reachable.
        let starts: Vec<u32> = x.chunks(4).map(|w| w[0]).collect();
        assert!(starts.contains(&20) && starts.contains(&35), "{starts:?}");
        assert_eq!(s.windows_drawn(), 200);
    }

    #[test]
    fn ranks_draw_different_windows_and_seeds_repeat() {
        let draw = |seed, rank| {
            let mut s = WindowSampler::new(0..100, 8, seed, rank).unwrap();
            (0..20).map(|_| s.next_start()).collect::<Vec<_>>()
        };
        assert_eq!(draw(1, 0), draw(1, 0));
        assert_ne!(draw(1, 0), draw(1, 1));
        assert_ne!(draw(1, 0), draw(2, 0));
    }

    #[test]
    fn resume_from_saved_state_is_bit_exact() {
        let tokens = stream();
        let n = 3 * 5;
        let mut straight = WindowSampler::new(0..100, 5, 42, 3).unwrap();
        let (mut a, mut at) = (vec![0; 2 * n], vec![0; 2 * n]);
        straight.fill_batch(&tokens, &mut a, &mut at);

        let mut first = WindowSampler::new(0..100, 5, 42, 3).unwrap();
        let (mut b, mut bt) = (vec![0; 2 * n], vec![0; 2 * n]);
        first.fill_batch(&tokens, &mut b[..n], &mut bt[..n]);
        let json = serde_json::to_string(&first.state()).unwrap();
        let mut resumed = WindowSampler::new(0..100, 5, 999, 0).unwrap();
        resumed.restore(serde_json::from_str(&json).unwrap()).unwrap();
        resumed.fill_batch(&tokens, &mut b[n..], &mut bt[n..]);
        assert_eq!(a, b);
        assert_eq!(at, bt);
        assert_eq!(resumed.windows_drawn(), straight.windows_drawn());
    }

    #[test]
    fn restore_onto_a_different_range_is_an_error() {
        let s = WindowSampler::new(0..100, 5, 1, 0).unwrap();
        let mut other = WindowSampler::new(0..50, 5, 1, 0).unwrap();
        assert!(other.restore(s.state()).is_err());
    }

    #[test]
    fn range_shorter_than_a_window_is_an_error() {
        assert!(WindowSampler::new(0..9, 8, 0, 0).is_ok());
        let err = WindowSampler::new(0..8, 8, 0, 0).unwrap_err().to_string();
        assert!(err.contains("only 8 tokens") && err.contains("shorter window (--seq-len N"), "{err}");
    }

    #[test]
    fn eval_windows_are_spread_and_fit() {
        let tokens = vec![0u32; 21];
        assert_eq!(eval_windows(&tokens, 5, 10), [0, 5, 10, 15]);
        // 4 slots, 2 wanted: every other slot
        assert_eq!(eval_windows(&tokens, 5, 2), [0, 10]);
        assert_eq!(eval_windows(&tokens[..20], 5, 10), [0, 5, 10]);
        assert!(eval_windows(&tokens[..5], 5, 10).is_empty());
    }
}
