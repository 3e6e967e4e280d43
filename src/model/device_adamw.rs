//! AdamW's steps on the model's libtorch device, for a round of inner steps
//! (torch/resident.rs holds the device side; `strategy::inner::Inner::round_at`
//! is the one caller that takes steps). Natively, and with
//! `LOWCOMM_TORCH_HOST_OPTIMIZER=1` (to measure the difference), no round
//! begins and the host optimizer takes the steps as before.

use super::Gpt;
use crate::optim::{AdamW, DecaySegments};

impl Gpt {
    /// Begins a device round: the parameters and `opt`'s moments go to the
    /// device, which takes [`Gpt::device_adamw_step`]s until
    /// [`Gpt::end_device_adamw`]; meanwhile the host's copies are stale.
    /// False (nothing done) when the model is not on libtorch.
    pub fn begin_device_adamw(&mut self, opt: &mut AdamW) -> bool {
        #[cfg(feature = "torch")]
        if let Some(torch) = &mut self.torch {
            if std::env::var("LOWCOMM_TORCH_HOST_OPTIMIZER").is_ok_and(|v| v == "1") {
                return false;
            }
            let (m, v) = opt.moments_mut();
            torch.begin_round(&self.params, m, v);
            return true;
        }
        let _ = opt;
        false
    }

    /// In a device round: clips the gradient accumulated since
    /// [`Gpt::zero_grads`] to `max_norm` (`optim::clip_global_norm`'s rule)
    /// and returns its norm before clipping.
    pub fn device_clip(&mut self, max_norm: f32) -> f32 {
        #[cfg(feature = "torch")]
        if let Some(torch) = &mut self.torch {
            return torch.clip_in_round(max_norm);
        }
        let _ = max_norm;
        panic!("Gpt::device_clip outside a device round (Gpt::begin_device_adamw returned false)")
    }

    /// In a device round: one AdamW step at `lr` with the gradient
    /// accumulated since [`Gpt::zero_grads`]; `opt` counts it (its moments
    /// come back at the round's end).
    pub fn device_adamw_step(&mut self, opt: &mut AdamW, lr: f32, decay: &DecaySegments) {
        #[cfg(feature = "torch")]
        if let Some(torch) = &mut self.torch {
            let c = opt.count_step(lr);
            return torch.step_in_round(&c, decay.ranges());
        }
        let _ = (opt, lr, decay);
        panic!("Gpt::device_adamw_step outside a device round (Gpt::begin_device_adamw returned false)")
    }

    /// Ends a device round: the parameters and `opt`'s moments come back to
    /// the host, the truth again.
    pub fn end_device_adamw(&mut self, opt: &mut AdamW) {
        #[cfg(feature = "torch")]
        if let Some(torch) = &mut self.torch {
            let (m, v) = opt.moments_mut();
            return torch.end_round(&mut self.params, m, v);
        }
        let _ = opt;
        panic!("Gpt::end_device_adamw outside a device round (Gpt::begin_device_adamw returned false)")
    }

    /// Waits for the device's queued work (CUDA runs it asynchronously;
    /// nothing to wait for natively or on libtorch's CPU): for timing.
    pub fn wait_for_device(&self) {
        #[cfg(feature = "torch")]
        if let Some(torch) = &self.torch {
            torch.wait();
        }
    }
}
