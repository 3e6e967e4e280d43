//! `lowcomm bench --device native,cpu`: the training step of `--what step`
//! on each device, one child process per measurement (so each peak RSS is
//! its own), alternated A B B A and the faster of each device's two runs
//! kept; prints tokens/s and peak memory with the ratios to the first device.
//!
//!   lowcomm bench --preset micro --device native,cpu      (a `--features torch` build)

use super::StepConfig;
use crate::model::ComputeDevice;
use anyhow::{bail, Context, Result};
use std::process::Command;

/// One child's measurement.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceResult {
    pub tokens_per_s: f64,
    pub peak_rss_mb: f64,
    pub median_step_s: f64,
}

/// The field `key=` of a RESULT line.
fn field(line: &str, key: &str) -> Result<f64> {
    let prefix = format!("{key}=");
    let v = line.split_whitespace().find_map(|w| w.strip_prefix(prefix.as_str()));
    v.with_context(|| format!("no {key} in `{line}`"))?.parse().with_context(|| format!("{key} in `{line}`"))
}

/// `lowcomm bench --what step` of `step` in a child process.
fn measure(step: &StepConfig, steps: usize, warmup: usize) -> Result<DeviceResult> {
    let exe = std::env::current_exe().context("this binary's path")?;
    let args = ["bench", "--preset", &step.preset, "--steps", &steps.to_string(), "--warmup", &warmup.to_string()];
    let mut cmd = Command::new(exe);
    cmd.args(args).args(["--device", &step.device.to_string(), "--precision", &step.precision.to_string()]);
    if let Some(b) = step.batch {
        cmd.args(["--batch", &b.to_string()]);
    }
    let out = cmd.output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("bench on --device {} failed: {}", step.device, String::from_utf8_lossy(&out.stderr).trim());
    }
    let line = text.lines().find(|l| l.starts_with("RESULT lib=lowcomm")).context("the child printed no RESULT")?;
    Ok(DeviceResult {
        tokens_per_s: field(line, "tok_per_s")?,
        peak_rss_mb: field(line, "peak_rss_mb")?,
        median_step_s: field(line, "median_step_s")?,
    })
}

/// `step` on every device, each measured twice (A B B A), the faster run
/// of each kept.
pub fn run(step: &StepConfig, steps: usize, warmup: usize, devices: &[ComputeDevice]) -> Result<Vec<DeviceResult>> {
    let mut best = vec![DeviceResult::default(); devices.len()];
    let order: Vec<usize> = (0..devices.len()).chain((0..devices.len()).rev()).collect();
    for i in order {
        eprintln!("bench: {} on --device {} ...", step.preset, devices[i]);
        let r = measure(&StepConfig { device: devices[i], ..step.clone() }, steps, warmup)?;
        eprintln!("  {:.0} tok/s, peak {:.0} MB", r.tokens_per_s, r.peak_rss_mb);
        if r.tokens_per_s > best[i].tokens_per_s {
            best[i] = r;
        }
    }
    Ok(best)
}

/// The RESULT lines: each device against the first.
pub fn lines(preset: &str, devices: &[ComputeDevice], results: &[DeviceResult]) -> Vec<String> {
    let base = results[0];
    devices
        .iter()
        .zip(results)
        .map(|(d, r)| {
            format!(
                "RESULT device={d} preset={preset} median_step_s={:.4} tok_per_s={:.0} peak_rss_mb={:.0} speed_vs_{}={:.2} memory_vs_{}={:.2}",
                r.median_step_s,
                r.tokens_per_s,
                r.peak_rss_mb,
                devices[0],
                r.tokens_per_s / base.tokens_per_s,
                devices[0],
                r.peak_rss_mb / base.peak_rss_mb
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_fields_are_read_and_ratios_are_against_the_first_device() {
        let line = "RESULT lib=lowcomm preset=nano median_step_s=0.0100 tok_per_s=204800 peak_rss_mb=50";
        assert_eq!(field(line, "tok_per_s").unwrap(), 204800.0);
        assert!(field(line, "gflops").unwrap_err().to_string().contains("no gflops"));
        let r = |t, m| DeviceResult { tokens_per_s: t, peak_rss_mb: m, median_step_s: 1.0 };
        let out = lines("nano", &[ComputeDevice::Native, ComputeDevice::TorchCpu], &[r(100.0, 50.0), r(50.0, 200.0)]);
        assert!(out[1].contains("device=cpu") && out[1].contains("speed_vs_native=0.50"), "{}", out[1]);
        assert!(out[1].contains("memory_vs_native=4.00"), "{}", out[1]);
    }
}
