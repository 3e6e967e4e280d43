//! A device round: AdamW's steps taken on the device, the parameters and
//! the moments staying there between steps (docs/decisions.md, "libtorch:
//! AdamW on the device for a round of inner steps").
//!
//! ```text
//! begin(host params, host m, host v)    three uploads
//! per inner step:
//!     micro-batches                     on the device's parameters, no upload
//!     clip(max_norm)                    the device's gradient, one scalar read back
//!     step(coefs, decay)                AdamW (optim/adamw.rs) on the device
//! end(host params, host m, host v)      three downloads: the host is the truth again
//! ```
//!
//! Between `begin` and `end` the host parameters and moments are stale, so
//! everything that would read or upload them (an evaluation, a read of the
//! host gradient) panics naming the call: a round is one call of
//! `Inner::round_at`, which nothing else runs inside.

use super::{host_view, TorchGpt};
use crate::optim::Coefs;
use std::ops::Range;
use tch::{Kind, Tensor};

impl TorchGpt {
    /// Uploads the parameters and AdamW's moments; until [`Self::end_round`]
    /// the device's copies are the truth.
    pub fn begin_round(&mut self, params: &[f32], m: &[f32], v: &[f32]) {
        self.refuse_in_round("begin another device round");
        self.upload(params);
        self.grads.clear();
        let (n, device) = (self.layout.len as i64, self.device);
        let (mut dm, mut dv) = self
            .moments
            .take()
            .unwrap_or_else(|| (Tensor::empty([n], (Kind::Float, device)), Tensor::empty([n], (Kind::Float, device))));
        self.copy_up(m, &mut dm);
        self.copy_up(v, &mut dv);
        self.moments = Some((dm, dv));
        self.resident = true;
    }

    /// Scales the window's gradient on the device by `max_norm / (norm +
    /// 1e-6)` where its global norm exceeds `max_norm`, as
    /// `optim::clip_global_norm` does on the host; returns the norm.
    pub fn clip_in_round(&mut self, max_norm: f32) -> f32 {
        let grad = self.round_grads();
        let _guard = tch::no_grad_guard();
        let sq = f64::try_from(grad.to_kind(Kind::Double).square().sum(Kind::Double)).expect("a scalar");
        let norm = sq.sqrt() as f32;
        if norm.is_finite() && norm > max_norm {
            let coef = (f64::from(max_norm) / (f64::from(norm) + 1e-6)) as f32;
            for g in &mut self.grads {
                if g.defined() {
                    *g *= f64::from(coef);
                }
            }
        }
        norm
    }

    /// One AdamW step (optim/adamw.rs, `Coefs::update`) on the device's
    /// parameters and moments with the window's gradient; ends the window.
    pub fn step_in_round(&mut self, c: &Coefs, decay: &[Range<usize>]) {
        let g = self.round_grads();
        self.grads.clear();
        let _guard = tch::no_grad_guard();
        let (m, v) = self.moments.as_mut().expect("a device round holds the moments");
        // Decoupled decay: p <- p * (1 - lr * wd) on the decayed elements (Alg. 2, line 12).
        for r in decay {
            let mut piece = self.params.narrow(0, r.start as i64, r.len() as i64);
            piece *= f64::from(c.decay_mul);
        }
        // m_t = beta1 m + (1 - beta1) g, v_t = beta2 v + (1 - beta2) g^2 (lines 7-8).
        *m *= f64::from(c.beta1);
        *m += &g * f64::from(1.0 - c.beta1);
        *v *= f64::from(c.beta2);
        *v += (&g * f64::from(1.0 - c.beta2)) * &g;
        // p <- p - lr * (m / bc1) / (sqrt(v / bc2) + eps) (lines 9-12).
        let denom = (&*v / f64::from(c.bc2)).sqrt() + f64::from(c.eps);
        let update = (&*m / f64::from(c.bc1) * f64::from(c.lr)) / denom;
        self.params -= update;
    }

    /// Downloads the parameters and moments into the host's buffers and
    /// ends the round.
    pub fn end_round(&mut self, params: &mut [f32], m: &mut [f32], v: &mut [f32]) {
        assert!(self.resident, "no device round to end");
        self.grads.clear();
        let (dm, dv) = self.moments.take().expect("a device round holds the moments");
        let dp = self.params.shallow_clone();
        for (src, dst) in [(&dp, params), (&dm, m), (&dv, v)] {
            self.copy_down(src, dst);
        }
        self.moments = Some((dm, dv));
        self.resident = false;
        self.params_current = false;
        #[cfg(debug_assertions)]
        {
            self.uploaded.clear();
        }
    }

    /// Waits for the work queued on a CUDA device.
    pub fn wait(&self) {
        if let tch::Device::Cuda(i) = self.device {
            tch::Cuda::synchronize(i as i64);
        }
    }

    /// Panics naming `what` inside a device round (the host's copies are
    /// stale there).
    pub(super) fn refuse_in_round(&self, what: &str) {
        assert!(
            !self.resident,
            "cannot {what} during a device round: the parameters and AdamW's moments live on the device until Inner::round_at ends it (Gpt::end_device_adamw)"
        );
    }

    /// The window's gradient, flat, while keeping the per-tensor sums for
    /// the step: clip and step both read it.
    fn round_grads(&mut self) -> Tensor {
        assert!(self.resident, "no device round under way (Gpt::begin_device_adamw)");
        let flat = self.flat_grads().expect("a device step needs at least one micro-batch since zero_grads");
        // Kept as the window's sum, one tensor in place of the per-tensor
        // ones: the next `flat_grads` returns it as it is (a cat of one).
        self.grads = vec![flat.shallow_clone()];
        flat
    }

    /// `src` (host) into the device tensor `dst`, through the pinned buffer.
    pub(super) fn copy_up(&mut self, src: &[f32], dst: &mut Tensor) {
        assert_eq!(src.len(), self.layout.len, "buffer of another shape");
        let _guard = tch::no_grad_guard();
        // SAFETY: the view is only read, and dropped before `src` is released.
        let host = self.staged(&unsafe { host_view(src.as_ptr().cast_mut(), src.len()) });
        dst.copy_(&host);
    }

    /// The device tensor `src` into the host buffer `dst`, through the pinned buffer.
    fn copy_down(&mut self, src: &Tensor, dst: &mut [f32]) {
        assert_eq!(dst.len(), self.layout.len, "buffer of another shape");
        let _guard = tch::no_grad_guard();
        let staged = self.staged(src);
        // SAFETY: the view is written and dropped here, while `dst` is borrowed.
        let mut host = unsafe { host_view(dst.as_mut_ptr(), dst.len()) };
        host.copy_(&staged);
    }
}
