//! Streaming DiLoCo's (streaming.rs) eager updates (`eager = true`; Kale,
//! Douillard et al., "Eager Updates For Overlapped Communication and
//! Computation in DiLoCo", arXiv 2502.12996). The paper overlaps a whole
//! outer step: at round t worker m, holding its fresh Delta_m^(t) and the
//! average Delta^(t-1) that just landed, steps with Delta_m^(t) / M + (Delta^(t-1) - Delta_m^(t-1) / M),
//! its own share fresh and the others' one round old. Here the average is
//! in flight for tau steps only, so that stand-in bridges those steps and
//! is replaced by the average when it lands:
//!
//! ```text
//! at S6, fragment p, k workers (others_p = 0 before its first landing):
//!     g~ = delta_{i,p} / k + others_p                              E1 stand-in for Delta_p
//!     theta~ = OuterOpt_p(theta_old_p, g~) on a copy of the state   E1 the stand-in step
//!     theta_{i,p} = alpha theta_{i,p} + (1 - alpha) theta~         S9 at once, not tau steps later
//! at S7, when Delta_p lands:
//!     theta_outer_p = OuterOpt_p(theta_old_p, Delta_p)             S8 the true step, as without eager
//!     theta_{i,p} += (1 - alpha) (theta_outer_p - theta~)          E2 correct to the average
//!     others_p = Delta_p - delta_{i,p} / k                         E3 the others' share, for E1 next time
//! ```
//!
//! E1-E3 are our labels: the paper's own text (its algorithm and equation
//! numbers) was not reachable while writing this, only summaries of it
//! that give E1's form (docs/methods.md says so). Our decisions:
//! - delta_{i,p} in E1 and E3 is this worker's share as the others
//!   receive it: with a compressed `outer_wire`, what its message decodes
//!   to (so with one worker the stand-in is still exactly the average).
//! - The correction E2 (ours, as the issue asks): the paper lets each
//!   worker's outer state run on its own stand-ins, so replicas' outer
//!   states differ by their own shares; here theta_old and OuterOpt's
//!   state only ever see the true average (S8), equal on every worker, so
//!   checkpoints, resume and the run's end stay DiLoCo's. The stand-in
//!   moves the local replica only, for tau steps.
//! - With one worker the stand-in is the average (others_p = 0 exactly,
//!   delta / 1 = delta), E2 adds nothing, and the run is the one where the
//!   average lands at once (tau = 0): a test.
//! - tau >= 1 (settings): at tau = 0 the average lands at once.
//! - The paper's "1-outer-step" overlap (the average in flight for a whole
//!   round, tau = H) is not offered: tau x P < H keeps one fragment in
//!   flight; P = 1 with tau = H - 1 is the nearest.
//! - The end of the run sends without a stand-in (the global value is
//!   taken). others_p is state: saved per fragment at each checkpoint
//!   (nothing is in flight then). Memory: others (n) and, for the
//!   fragment in flight, g~, theta~ and the copied outer state.

/// E1: `g` becomes the stand-in `own / k + others` for the average of k
/// workers' outer gradients, `own` this worker's and `others` the others'
/// share of the last average (zero before one landed). With k = 1 and
/// `others` = 0 it is `own` (up to the sign of a zero).
pub fn standin(g: &mut [f32], own: &[f32], others: &[f32], k: usize) {
    let k = k as f32;
    g.iter_mut().zip(own).zip(others).for_each(|((g, o), r)| *g = o / k + r);
}

/// E2: `local += (1 - alpha) (outer - standin)`: the local replica, mixed
/// at S6 with the stand-in step `standin`, as if it had been mixed with
/// the true step `outer`. Where the two agree nothing is touched (one
/// worker's run keeps its bits, the sign of a zero included).
pub fn correct(local: &mut [f32], outer: &[f32], standin: &[f32], alpha: f32) {
    for ((x, o), s) in local.iter_mut().zip(outer).zip(standin) {
        let c = (1.0 - alpha) * (o - s);
        if c != 0.0 {
            *x += c;
        }
    }
}
