//! Error feedback: what a compressed message left out of a pseudo-gradient
//! is added to the next one before it is encoded (Seide et al. 2014, 1-bit
//! SGD; Karimireddy et al. 2019, "Error feedback fixes SignSGD"):
//!
//!   m_t = Delta_t + beta e_{t-1}     (what this round should send)
//!   sent_t = decode(encode(m_t))     (what the others receive)
//!   e_t = m_t - sent_t               (kept for the next round)
//!
//! With beta = 1 (classic error feedback) the sum of what was sent over
//! rounds trails the sum of the pseudo-gradients by exactly e_t, never
//! more: nothing is lost, only late. SparseLoCo (Sarfi et al., arXiv
//! 2508.15706, Algorithm 1) decays the residual by beta < 1 and drops the
//! outer momentum: the decayed accumulator stands in for it, and the outer
//! step is plain SGD (`outer = "sgd"`). Without feedback, e is zero (not
//! stored) and m_t = Delta_t.

use super::OuterWire;

/// Full-size f32 buffers a worker keeps to send its pseudo-gradient over
/// `wire` (none when it travels uncompressed): what [`ErrorFeedback::new`]
/// allocates (the staged message, plus the residual with feedback) and the
/// buffer the others' messages are decoded into. The strategies' memory
/// accounting and `plan`'s both count it from here.
pub fn sender_copies(wire: Option<OuterWire>, error_feedback: bool) -> usize {
    match wire {
        None => 0,
        Some(_) if error_feedback => 3,
        Some(_) => 2,
    }
}

/// One worker's compressed sender of pseudo-gradients, with its residual.
#[derive(Clone, Debug)]
pub struct ErrorFeedback {
    wire: OuterWire,
    /// With error feedback, beta: how much of the residual the next
    /// message carries; `None` without.
    feedback: Option<f32>,
    /// e_{t-1}: what earlier messages left out (empty without feedback).
    residual: Vec<f32>,
    /// m_t, then what the receivers decode from this round's message.
    staged: Vec<f32>,
}

impl ErrorFeedback {
    /// A sender of `n`-element pseudo-gradients; `feedback` keeps a
    /// residual, decayed by beta = the value each round (1: classic).
    pub fn new(wire: OuterWire, feedback: Option<f32>, n: usize) -> ErrorFeedback {
        // Without feedback the residual is always zero: not stored.
        let residual = vec![0.0; if feedback.is_some() { n } else { 0 }];
        ErrorFeedback { wire, feedback, residual, staged: vec![0.0; n] }
    }

    /// The message for `delta` (this round's pseudo-gradient); afterwards
    /// [`ErrorFeedback::sent`] is what the receivers decode from it and
    /// [`ErrorFeedback::residual`] what it left out.
    pub fn encode(&mut self, delta: &[f32]) -> Vec<u8> {
        assert_eq!(delta.len(), self.staged.len(), "pseudo-gradient of another size");
        self.staged.copy_from_slice(delta);
        let beta = self.feedback.unwrap_or(0.0);
        for (m, e) in self.staged.iter_mut().zip(&self.residual) {
            *m += beta * e;
        }
        let bytes = self.wire.encode(&self.staged);
        if self.feedback.is_some() {
            self.residual.copy_from_slice(&self.staged);
        }
        self.wire.decode(&bytes, &mut self.staged);
        if self.feedback.is_some() {
            for (e, s) in self.residual.iter_mut().zip(&self.staged) {
                *e -= s;
            }
        }
        bytes
    }

    /// The codec it sends with.
    pub fn wire(&self) -> OuterWire {
        self.wire
    }

    /// What the receivers decode from the last message.
    pub fn sent(&self) -> &[f32] {
        &self.staged
    }

    /// e_t: what the messages so far left out (empty without feedback).
    pub fn residual(&self) -> &[f32] {
        &self.residual
    }

    /// Puts back a residual saved from [`ErrorFeedback::residual`] (a resumed run).
    pub fn restore(&mut self, residual: &[f32]) {
        self.residual.copy_from_slice(residual);
    }
}
