//! Which rows of a `lowcomm compare` sweep cannot be trusted, and why: a
//! method is marked **diverged** or **unstable** by the rules below, and a
//! marked method sets no target loss and takes no part in the verdict.
//!
//! The training curve is smoothed over the same tokens for every method:
//! the mean loss of the rounds in the last [`SMOOTH`] synchronous steps'
//! tokens (`window_tokens`: SMOOTH x the fewest tokens any method of the
//! sweep applies in one round, which is one synchronous step's: workers x
//! sequences x context x grad accum). A window of rounds would average
//! acco's 10 rounds of ~6 micro-batches against ddp's 10 of one.
//!
//! - **diverged**: the run stopped with `strategy::Diverged` (a loss or a
//!   value to checkpoint was not finite); or a round's training loss is not
//!   finite; or the validation loss of the run's own model is not finite
//!   or more than [`FAR_NATS`] above the loss the run started from (its
//!   first round's training loss: ln(vocab) for a fresh model), i.e. its
//!   perplexity is e times that of the untrained model or worse;
//! - **unstable**: at some round its smoothed training loss is above its
//!   lowest so far by more than [`GIVE_BACK`] of the drop it had made from
//!   its first round's loss down to that lowest, and by more than
//!   [`RISE_FLOOR`] (so noise before any drop is no rise), not counting the
//!   rise its **peers share** over the same tokens. Peers are the sweep's
//!   runs with the same seed, which draw the same data windows
//!   (data/sampler.rs): a passage of harder text lifts all their curves at
//!   once. The shared rise is the smallest rise among the peers covering
//!   those tokens (the run among them): one that every run with the same
//!   data shows. Not the median: in ACCO's compare, dpu, acco-wp and acco
//!   spike together at a high lr while ddp falls, and three of four runs
//!   sharing a spike does not make it the data's. A run with no peer is
//!   judged on its own rise. Without this, a warm start, whose drop is a
//!   few tenths of a nat, was marked unstable by every passage of harder
//!   text (issue 28: all five points of an outer-lr grid "rose" at the same
//!   round, 58 of 500).

use super::store::{Ended, MethodResult};

/// Synchronous steps' tokens in the moving average of the training loss.
pub const SMOOTH: u64 = 10;
/// Nats above its starting loss at which a run's validation loss counts
/// as diverged.
pub const FAR_NATS: f64 = 1.0;
/// Share of its drop so far that a smoothed curve may give back before it
/// counts as unstable. Measured on the sweep of the README (nano, a100-2x2,
/// 60 steps, batch 4): ddp's own 10-step average gives back 24% of its drop
/// at step 20, diloco 37% after its outer step, co2 (alpha 1) 128%.
pub const GIVE_BACK: f64 = 0.5;
/// Nats a smoothed curve must rise by, at least, to count as unstable.
pub const RISE_FLOOR: f64 = 0.1;

/// What kind of mark a row gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Neither diverged nor unstable.
    Sound,
    Diverged,
    Unstable,
}

/// A row's mark: its kind, a short cell for the table and the whole reason.
#[derive(Clone, Debug, PartialEq)]
pub struct Mark {
    pub kind: Kind,
    /// The table's status cell, e.g. `**diverged** at step 12: training loss NaN`.
    pub cell: String,
    /// Why, in a sentence (the verdict's and the notes' line).
    pub why: String,
}

impl Mark {
    fn sound() -> Mark {
        Mark { kind: Kind::Sound, cell: "ok".into(), why: String::new() }
    }

    fn new(kind: Kind, cell: String, why: String) -> Mark {
        let word = if kind == Kind::Diverged { "diverged" } else { "unstable" };
        Mark { kind, cell: format!("**{word}**{cell}"), why: format!("{word}: {why}") }
    }

    /// Left out of the target loss and the verdict.
    pub fn excluded(&self) -> bool {
        self.kind != Kind::Sound
    }
}

/// The smoothing window of a sweep, in tokens (module docs); at least 1.
pub fn window_tokens(results: &[MethodResult]) -> u64 {
    let step = results
        .iter()
        .flat_map(|r| {
            let mut prev = 0;
            r.rounds.iter().map(move |x| {
                let d = x.tokens.saturating_sub(prev);
                prev = x.tokens;
                d
            })
        })
        .filter(|&d| d > 0)
        .min()
        .unwrap_or(1);
    SMOOTH * step
}

/// `r`'s training loss per round, each the mean of the rounds whose tokens
/// are within `window` tokens of it (it included).
pub fn smoothed(r: &MethodResult, window: u64) -> Vec<f64> {
    let mut start = 0;
    (0..r.rounds.len())
        .map(|i| {
            let t = r.rounds[i].tokens;
            while start < i && r.rounds[start].tokens + window <= t {
                start += 1;
            }
            let w = &r.rounds[start..=i];
            w.iter().map(|x| x.loss as f64).sum::<f64>() / w.len() as f64
        })
        .collect()
}

/// A run of the sweep as a peer: its rounds' tokens and its smoothed curve.
pub type Peer<'a> = (&'a MethodResult, &'a [f64]);

/// The smoothed loss of `p` at `tokens`: its last round at or before them;
/// `None` before its first round or after its last.
fn loss_at(p: &Peer, tokens: u64) -> Option<f64> {
    let rounds = &p.0.rounds;
    if rounds.last().is_none_or(|x| x.tokens < tokens) {
        return None;
    }
    let i = rounds.partition_point(|x| x.tokens <= tokens);
    (i > 0).then(|| p.1[i - 1])
}

/// The smallest rise from `from` to `to` tokens among the `peers` covering
/// both (module docs), at least 0; 0 with fewer than two.
pub fn shared_rise(peers: &[Peer], from: u64, to: u64) -> f64 {
    let rises: Vec<f64> =
        peers.iter().filter_map(|p| Some(loss_at(p, to)? - loss_at(p, from)?)).filter(|x| x.is_finite()).collect();
    if rises.len() < 2 {
        return 0.0;
    }
    rises.into_iter().fold(f64::INFINITY, f64::min).max(0.0)
}

/// The mark of `r`, whose smoothed curve is `s`, among `peers` (the
/// sweep's runs with its seed, `r` among them; module docs).
pub fn mark(r: &MethodResult, s: &[f64], peers: &[Peer]) -> Mark {
    if let Ended::Diverged { participant, step, what } = &r.ended {
        return Mark::new(
            Kind::Diverged,
            format!(" at step {step}: {what}"),
            format!("the run stopped at step {step} of participant {participant}: {what}"),
        );
    }
    if let Some(x) = r.rounds.iter().find(|x| !x.loss.is_finite()) {
        return Mark::new(
            Kind::Diverged,
            format!(" at round {}: training loss {}", x.step, x.loss),
            format!("its training loss is {} at round {}", x.loss, x.step),
        );
    }
    let start = r.rounds.first().map_or(f64::NAN, |x| x.loss as f64);
    let val = r.val_loss as f64;
    if !val.is_finite() {
        return Mark::new(Kind::Diverged, format!(": val loss {val}"), format!("its model's validation loss is {val}"));
    }
    if val > start + FAR_NATS {
        return Mark::new(
            Kind::Diverged,
            format!(": val loss {val:.2}, started at {start:.2}"),
            format!(
                "its model's validation loss {val:.2} is more than {FAR_NATS} nat above the loss it started from ({start:.2}, its first round's)"
            ),
        );
    }
    // The worst rise over the running lowest, less the peers' shared rise,
    // as a multiple of what is allowed.
    // worst: (over, round index, lowest before it, shared rise)
    let mut worst: Option<(f64, usize, f64, f64)> = None;
    let (mut low, mut at_low) = (f64::INFINITY, 0);
    for (i, &v) in s.iter().enumerate() {
        if v < low {
            (low, at_low) = (v, i);
        }
        let allowed = (GIVE_BACK * (s[0] - low)).max(RISE_FLOOR);
        if (v - low) / allowed <= 1.0 {
            continue;
        }
        let shared = shared_rise(peers, r.rounds[at_low].tokens, r.rounds[i].tokens);
        let over = (v - low - shared) / allowed;
        if over > 1.0 && worst.is_none_or(|(o, ..)| over > o) {
            worst = Some((over, i, low, shared));
        }
    }
    match worst {
        Some((_, i, low, shared)) => {
            let (v, round) = (s[i], r.rounds[i].step);
            let back = if s[0] > low {
                format!("{:.0}% of its drop from {:.2}", 100.0 * (v - low) / (s[0] - low), s[0])
            } else {
                "with no drop before".into()
            };
            let beside = if shared > 0.0 {
                format!("; its peers with the same data rose {shared:.2} over the same tokens, which does not count")
            } else {
                String::new()
            };
            Mark::new(
                Kind::Unstable,
                format!(": rose {low:.2} -> {v:.2} by round {round}"),
                format!(
                    "its smoothed training loss rose from its lowest, {low:.2}, to {v:.2} by round {round}, giving back {back} (more than {:.0}% of the drop and more than {RISE_FLOOR} nat counts){beside}",
                    100.0 * GIVE_BACK
                ),
            )
        }
        None => Mark::sound(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::store::Round;
    use super::*;

    /// A finished result of `losses`, one per round of 100 tokens, a round a second.
    pub(crate) fn result(spec: &str, losses: &[f32], val_loss: f32) -> MethodResult {
        MethodResult {
            spec: spec.into(),
            label: spec.into(),
            config: String::new(),
            world: 2,
            rounds: losses
                .iter()
                .enumerate()
                .map(|(i, &loss)| Round {
                    step: i as u64 + 1,
                    tokens: 100 * (i as u64 + 1),
                    wall_s: i as f64 + 1.0,
                    loss,
                    bytes: 0.0,
                })
                .collect(),
            val_loss,
            summary: crate::metrics::summarize(&[], 2, 0).unwrap(),
            memory: Default::default(),
            exchange: None,
            largest_transfer: None,
            run_s: 0.0,
            membership: None,
            ended: Ended::Finished,
        }
    }

    fn mark_of(r: &MethodResult, window: u64) -> Mark {
        let s = smoothed(r, window);
        mark(r, &s, &[(r, &s)])
    }

    #[test]
    fn smoothing_averages_the_same_tokens_whatever_the_round_size() {
        let a = result("a", &[4.0, 2.0, 0.0], 0.0);
        // 200 tokens: this round and the one before.
        assert_eq!(smoothed(&a, 200), [4.0, 3.0, 1.0]);
        // A method whose rounds are twice as long: one round per window.
        let mut b = a.clone();
        b.rounds.iter_mut().for_each(|x| x.tokens *= 2);
        assert_eq!(smoothed(&b, 200), [4.0, 2.0, 0.0]);
        // The window: 10 x the smallest round of the sweep (100 tokens).
        assert_eq!(window_tokens(&[a, b]), 1000);
    }

    #[test]
    fn a_run_that_stopped_diverged_is_marked_with_its_step_and_what() {
        let mut r = result("ddp", &[7.6, 7.0], f32::NAN);
        r.ended = Ended::Diverged { participant: 2, step: 3, what: "training loss NaN".into() };
        let m = mark_of(&r, 100);
        assert_eq!((m.kind, m.cell.as_str()), (Kind::Diverged, "**diverged** at step 3: training loss NaN"));
        assert!(m.why.contains("participant 2") && m.excluded(), "{}", m.why);
    }

    #[test]
    fn a_validation_loss_far_above_the_start_is_diverged() {
        // Started at 7.6: 8.6 is the limit (1 nat).
        assert_eq!(mark_of(&result("a", &[7.6, 6.0], 8.5), 100).kind, Kind::Sound);
        let m = mark_of(&result("async-diloco", &[7.6, 6.0], 52.1), 100);
        assert_eq!(m.kind, Kind::Diverged);
        assert_eq!(m.cell, "**diverged**: val loss 52.10, started at 7.60");
        assert_eq!(mark_of(&result("a", &[7.6, 6.0], f32::INFINITY), 100).kind, Kind::Diverged);
        assert_eq!(mark_of(&result("a", &[7.6, f32::NAN], 6.0), 100).kind, Kind::Diverged);
    }

    #[test]
    fn a_curve_giving_back_more_than_half_its_drop_is_unstable() {
        // Raw losses, window of one round: 8 -> 6 is a drop of 2; back up to 6.9 gives back 45%: sound.
        assert_eq!(mark_of(&result("a", &[8.0, 6.0, 6.9], 7.0), 100).kind, Kind::Sound);
        // Up to 7.1: 55% of the drop.
        let m = mark_of(&result("co2", &[8.0, 6.0, 7.1, 6.5], 7.0), 100);
        assert_eq!((m.kind, m.cell.as_str()), (Kind::Unstable, "**unstable**: rose 6.00 -> 7.10 by round 3"));
        assert!(m.why.contains("55% of its drop from 8.00"), "{}", m.why);
        // Noise before any drop is no rise until it passes the 0.1 nat floor.
        assert_eq!(mark_of(&result("a", &[8.0, 8.05, 7.0], 7.0), 100).kind, Kind::Sound);
        assert_eq!(mark_of(&result("a", &[8.0, 8.2, 7.0], 7.0), 100).kind, Kind::Unstable);
        // Smoothing over the window first: a one-round spike to 7.1 averages to 6.55 over two rounds
        // (smoothed 8, 7, 6, 6.55, 6.55: 0.55 back of a drop of 2, 27%).
        assert_eq!(mark_of(&result("a", &[8.0, 6.0, 6.0, 7.1, 6.0], 7.0), 200).kind, Kind::Sound);
    }

    #[test]
    fn a_rise_the_peers_share_is_the_data_and_does_not_count() {
        // A warm start: a drop of 0.2 allows a rise of 0.1 (the floor). Three runs with the
        // same data all rise 0.4 at round 3 (a passage of harder text); one rises 1.0.
        let a = result("a", &[4.6, 4.4, 4.8, 4.4], 4.4);
        let b = result("b", &[4.6, 4.5, 4.9, 4.5], 4.5);
        let c = result("c", &[4.6, 4.4, 5.4, 4.4], 4.6);
        let curve = |r: &MethodResult| smoothed(r, 100);
        let (sa, sb, sc) = (curve(&a), curve(&b), curve(&c));
        let peers: [Peer; 3] = [(&a, &sa), (&b, &sb), (&c, &sc)];
        // Alone, a's rise of 0.4 is 4 x the floor: unstable.
        assert_eq!(mark(&a, &sa, &peers[..1]).kind, Kind::Unstable);
        // Rises from round 2 to 3: a 0.4, b 0.4, c 1.0; every one rose at least 0.4.
        assert!((shared_rise(&peers, 200, 300) - 0.4).abs() < 1e-6);
        assert_eq!(mark(&a, &sa, &peers).kind, Kind::Sound);
        assert_eq!(mark(&b, &sb, &peers).kind, Kind::Sound);
        // c's own 0.6 beyond the shared 0.4 is still 6 x the floor, and its reason says what was discounted.
        let m = mark(&c, &sc, &peers);
        assert_eq!((m.kind, m.cell.as_str()), (Kind::Unstable, "**unstable**: rose 4.40 -> 5.40 by round 3"));
        assert!(m.why.contains("its peers with the same data rose 0.40 over the same tokens"), "{}", m.why);
        // Two peers: the smaller rise is the shared one (a's 0.4 against c's 1.0).
        assert!((shared_rise(&peers[..1], 200, 300)).abs() < 1e-12, "one run has no peer");
        assert!((shared_rise(&[peers[0], peers[2]], 200, 300) - 0.4).abs() < 1e-6);
        // A fall shared by the peers excuses nothing (the shared rise is at least 0).
        assert_eq!(shared_rise(&peers, 300, 400), 0.0);
        // Three of four rising together is not the data when the fourth fell (ACCO's compare:
        // dpu, acco-wp and acco spike while ddp falls): nothing is shared, a is judged alone.
        let d = result("d", &[4.6, 4.4, 4.3, 4.2], 4.2);
        let sd = curve(&d);
        let four: [Peer; 4] = [peers[0], peers[1], peers[2], (&d, &sd)];
        assert_eq!(shared_rise(&four, 200, 300), 0.0);
        assert_eq!(mark(&a, &sa, &four).kind, Kind::Unstable);
    }

    #[test]
    fn a_peer_counts_only_over_the_tokens_it_covers() {
        // b stopped after two rounds: it cannot say what the data did at round 3.
        let a = result("a", &[4.6, 4.4, 4.8], 4.4);
        let b = result("b", &[4.6, 4.4], 4.4);
        let c = result("c", &[4.6, 4.4, 4.8], 4.4);
        let (sa, sb, sc) = (smoothed(&a, 100), smoothed(&b, 100), smoothed(&c, 100));
        assert_eq!(mark(&a, &sa, &[(&a, &sa), (&b, &sb)]).kind, Kind::Unstable);
        assert_eq!(mark(&a, &sa, &[(&a, &sa), (&b, &sb), (&c, &sc)]).kind, Kind::Sound);
        // Between rounds, a peer's loss is its last round's at or before the tokens.
        assert_eq!(loss_at(&(&a, &sa), 250), Some(sa[1]));
        assert_eq!(loss_at(&(&a, &sa), 50), None);
        assert_eq!(loss_at(&(&a, &sa), 301), None);
    }
}
