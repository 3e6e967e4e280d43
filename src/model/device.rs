//! Where a model's forward and backward run: lowcomm's own CPU kernels
//! (`native`, the default) or libtorch (`cpu`, `cuda`, `cuda:N`; needs a
//! binary built with the `torch` feature, docs/torch.md).
//!
//! Either way the parameters and gradients the strategies see are the same
//! flat host buffers in the same layout, so checkpoints, exports and every
//! method work unchanged, and a run can resume on the other backend.

use super::{Gpt, GptConfig};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A compute device for the model's math (in TOML as its name: `device = "cuda:1"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ComputeDevice {
    /// lowcomm's hand-written kernels on the host (src/model/ops).
    #[default]
    Native,
    /// libtorch on the host CPU.
    TorchCpu,
    /// libtorch on CUDA device N (`cuda` is `cuda:0`, or worker i's
    /// `cuda:(i mod count)` in a multi-worker run: see [`Self::for_worker`]).
    Cuda(Option<usize>),
}

impl ComputeDevice {
    /// Whether libtorch computes (any device but `native`).
    pub fn is_torch(self) -> bool {
        self != ComputeDevice::Native
    }

    /// The device of worker `rank` among the local ones: an unnumbered
    /// `cuda` spreads workers over the visible GPUs round robin.
    pub fn for_worker(self, rank: usize, cuda_count: usize) -> Self {
        match self {
            ComputeDevice::Cuda(None) if cuda_count > 0 => ComputeDevice::Cuda(Some(rank % cuda_count)),
            other => other,
        }
    }

    /// Refuses a libtorch device in a binary built without libtorch, with
    /// the fix.
    pub fn check_available(self) -> Result<()> {
        if self.is_torch() && !cfg!(feature = "torch") {
            bail!(
                "--device {self} needs libtorch, and this lowcomm was built without it: rebuild with `cargo build --release --features torch` (docs/torch.md), or pass --device native"
            );
        }
        Ok(())
    }

    /// Refuses what this device cannot compute for `model`, each in one
    /// line with the fix: a libtorch device in a binary without libtorch
    /// ([`Self::check_available`]), and dropout on libtorch (lowcomm's
    /// masks come from its own random stream, which libtorch's dropout
    /// cannot reproduce). The one check for a run's configuration and for
    /// [`Gpt::on_device`].
    pub fn check_for(self, model: &GptConfig) -> Result<()> {
        self.check_available()?;
        if self.is_torch() && model.dropout > 0.0 {
            bail!(
                "model.dropout {} is not supported on --device {self}: its masks come from lowcomm's own random stream; set [model] dropout = 0 or use --device native",
                model.dropout
            );
        }
        Ok(())
    }
}

/// The precision of the model's math (in TOML as its name: `precision =
/// "bf16"`). The host buffers the strategies see (parameters, gradients,
/// optimizer state) are f32 either way: `bf16` is mixed precision with f32
/// master weights.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum ComputePrecision {
    /// Everything in f32 (the native kernels' only precision).
    #[default]
    F32,
    /// libtorch only: the forward and backward in bf16 (the parameters cast
    /// from the f32 ones each pass; norms accumulate in f32 inside
    /// libtorch's kernels), the loss in f32, the gradient back in f32.
    Bf16,
}

impl ComputePrecision {
    /// Refuses bf16 on the native kernels, with the fix.
    pub fn check_for(self, device: ComputeDevice) -> Result<()> {
        if self == ComputePrecision::Bf16 && !device.is_torch() {
            bail!("--precision bf16 needs a libtorch device (--device cpu or cuda): the native kernels compute in f32 only; drop --precision or pass --precision f32");
        }
        Ok(())
    }
}

/// For `skip_serializing_if`: an f32 run's config.toml does not mention it.
pub fn is_f32(p: &ComputePrecision) -> bool {
    *p == ComputePrecision::F32
}

impl FromStr for ComputePrecision {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "f32" => ComputePrecision::F32,
            "bf16" => ComputePrecision::Bf16,
            _ => bail!("unknown precision `{s}`: f32 (the default) or bf16 (libtorch devices)"),
        })
    }
}

impl fmt::Display for ComputePrecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ComputePrecision::F32 => "f32",
            ComputePrecision::Bf16 => "bf16",
        })
    }
}

impl TryFrom<String> for ComputePrecision {
    type Error = anyhow::Error;
    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl From<ComputePrecision> for String {
    fn from(p: ComputePrecision) -> String {
        p.to_string()
    }
}

/// For `skip_serializing_if`: a native run's config.toml does not mention it.
pub fn is_native(d: &ComputeDevice) -> bool {
    *d == ComputeDevice::Native
}

impl TryFrom<String> for ComputeDevice {
    type Error = anyhow::Error;

    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl From<ComputeDevice> for String {
    fn from(d: ComputeDevice) -> String {
        d.to_string()
    }
}

/// How many CUDA devices libtorch sees (0 in a binary without libtorch).
pub fn cuda_count() -> usize {
    #[cfg(feature = "torch")]
    return super::torch::cuda_count();
    #[cfg(not(feature = "torch"))]
    0
}

impl FromStr for ComputeDevice {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "native" => ComputeDevice::Native,
            "cpu" => ComputeDevice::TorchCpu,
            "cuda" => ComputeDevice::Cuda(None),
            _ => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => ComputeDevice::Cuda(Some(n)),
                _ => bail!("unknown device `{s}`: one of native (lowcomm's CPU kernels), cpu (libtorch on the CPU), cuda, cuda:N"),
            },
        })
    }
}

impl fmt::Display for ComputeDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ComputeDevice::Native => write!(f, "native"),
            ComputeDevice::TorchCpu => write!(f, "cpu"),
            ComputeDevice::Cuda(None) => write!(f, "cuda"),
            ComputeDevice::Cuda(Some(n)) => write!(f, "cuda:{n}"),
        }
    }
}

/// Moving a model onto a device (the dispatch itself is in gpt.rs).
impl Gpt {
    /// The same model computing on `device` (parameters and gradients stay
    /// the host buffers). Refuses a libtorch device in a binary without the
    /// `torch` feature, CUDA where libtorch sees none, and dropout on
    /// libtorch, each with the fix.
    pub fn on_device(self, device: ComputeDevice) -> Result<Self> {
        self.on(device, ComputePrecision::F32)
    }

    /// [`Gpt::on_device`] computing in `precision` (bf16: libtorch only,
    /// refused natively with the fix).
    pub fn on(mut self, device: ComputeDevice, precision: ComputePrecision) -> Result<Self> {
        device.check_for(&self.cfg)?;
        precision.check_for(device)?;
        #[cfg(feature = "torch")]
        {
            self.sync_grads();
            self.torch = match device {
                ComputeDevice::Native => None,
                d => Some(Box::new(super::torch::TorchGpt::new(&self.cfg, d, precision)?)),
            };
        }
        self.device = device;
        Ok(self)
    }

    /// The gradient accumulated since [`Gpt::zero_grads`]. On libtorch the
    /// micro-batches accumulate on the device (one transfer per optimizer
    /// step, not per micro-batch); this brings their sum to the host first.
    pub fn grads(&mut self) -> &[f32] {
        self.sync_grads();
        &self.grads
    }

    /// [`Gpt::grads`], writable (clipping, an all-reduce in place).
    pub fn grads_mut(&mut self) -> &mut Vec<f32> {
        self.sync_grads();
        &mut self.grads
    }

    /// The parameters and the accumulated gradient at once, for an
    /// optimizer step (`opt.step(params, grads, ..)`).
    pub fn params_and_grads(&mut self) -> (&mut [f32], &mut [f32]) {
        self.sync_grads();
        (&mut self.params, &mut self.grads)
    }

    /// Adds the device's pending gradient into the host's (nothing to do
    /// natively, where the backward writes the host buffer itself).
    fn sync_grads(&mut self) {
        #[cfg(feature = "torch")]
        if let Some(torch) = &mut self.torch {
            torch.take_grads_into(&mut self.grads);
        }
    }

    #[cfg(feature = "torch")]
    pub(super) fn torch_logits(&mut self, inputs: &[u32], b: usize, t: usize) -> &[f32] {
        let torch = self.torch.as_mut().expect("called on a libtorch model");
        torch.logits(&self.params, inputs, b, t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precisions_parse_print_and_bf16_is_refused_natively() {
        for s in ["f32", "bf16"] {
            assert_eq!(s.parse::<ComputePrecision>().unwrap().to_string(), s);
        }
        assert!("fp16".parse::<ComputePrecision>().unwrap_err().to_string().contains("f32 (the default) or bf16"));
        let e = ComputePrecision::Bf16.check_for(ComputeDevice::Native).unwrap_err().to_string();
        assert!(e.contains("--precision bf16 needs a libtorch device") && e.contains("--precision f32"), "{e}");
        ComputePrecision::Bf16.check_for(ComputeDevice::TorchCpu).unwrap();
        ComputePrecision::F32.check_for(ComputeDevice::Native).unwrap();
    }

    #[test]
    fn devices_parse_print_and_spread_over_gpus() {
        for s in ["native", "cpu", "cuda", "cuda:3"] {
            assert_eq!(s.parse::<ComputeDevice>().unwrap().to_string(), s);
        }
        let e = "gpu".parse::<ComputeDevice>().unwrap_err().to_string();
        assert!(e.contains("unknown device `gpu`") && e.contains("cuda:N"), "{e}");
        assert!("cuda:x".parse::<ComputeDevice>().is_err());
        let cuda = ComputeDevice::Cuda(None);
        assert_eq!(cuda.for_worker(5, 4), ComputeDevice::Cuda(Some(1)));
        assert_eq!(ComputeDevice::Cuda(Some(2)).for_worker(5, 4), ComputeDevice::Cuda(Some(2)));
        assert_eq!(ComputeDevice::TorchCpu.for_worker(5, 4), ComputeDevice::TorchCpu);
    }

    #[cfg(not(feature = "torch"))]
    #[test]
    fn a_torch_device_without_the_feature_names_the_rebuild() {
        ComputeDevice::Native.check_available().unwrap();
        let e = ComputeDevice::TorchCpu.check_available().unwrap_err().to_string();
        assert!(e.contains("--features torch") && e.contains("--device native"), "{e}");
    }
}
