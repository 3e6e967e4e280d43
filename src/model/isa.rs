//! Which instruction-set level the kernels run on, detected at run time,
//! with an override (`LOWCOMM_ISA=scalar|avx2|avx512`) that is refused with
//! a clear error when the CPU or this build cannot honour it, never by an
//! illegal-instruction crash.
//!
//! Two parts of a step pick their level in different ways:
//! - GEMM (the `gemm` crate, most of the FLOPs) dispatches itself at run
//!   time: AVX-512 when the CPU has `avx512f` AND this crate was built with
//!   its `avx512` cargo feature (default; it turns on `gemm/x86-v4`), else
//!   AVX2+FMA when the CPU has `fma`, else scalar. The crate offers no public
//!   run-time switch (its dispatch pointer is private), so the only way to
//!   run its AVX2 kernels on an AVX-512 CPU is a build without the feature:
//!   `cargo build --release --no-default-features`.
//! - Our element-wise kernels (LayerNorm, GELU, softmax, AdamW) are plain
//!   loops the compiler vectorises for the build's baseline:
//!   `.cargo/config.toml` sets x86-64-v3 (AVX2+FMA). A build for an older CPU
//!   clears that: `RUSTFLAGS= cargo build --release --no-default-features`
//!   (SSE2 baseline; GEMM still picks its best path at run time). The
//!   arithmetic-bound ones (GELU, softmax) also have a copy compiled for
//!   AVX-512 (`ops::simd`), run where GEMM runs AVX-512 ([`kernels_path`]).

use anyhow::{bail, Result};
use std::sync::OnceLock;

/// The environment variable that caps the instruction-set level.
pub const ENV: &str = "LOWCOMM_ISA";

/// An x86 vector instruction-set level, in increasing order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// No AVX2/FMA (SSE2 on x86-64, or another architecture).
    Scalar,
    /// AVX2 + FMA (x86-64-v3).
    Avx2,
    /// AVX-512 F/BW/DQ/VL (x86-64-v4).
    Avx512,
}

impl Isa {
    /// Lower-case name, as `LOWCOMM_ISA` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Display name for reports: `AVX-512`, `AVX2` or `other`.
    pub fn label(self) -> &'static str {
        match self {
            Isa::Scalar => "other (no AVX2)",
            Isa::Avx2 => "AVX2",
            Isa::Avx512 => "AVX-512",
        }
    }

    /// Parse a `LOWCOMM_ISA` value.
    pub fn parse(s: &str) -> Result<Isa> {
        Ok(match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Isa::Scalar,
            "avx2" => Isa::Avx2,
            "avx512" | "avx-512" => Isa::Avx512,
            other => bail!("{ENV}={other:?} is not a level: use scalar, avx2 or avx512 (e.g. {ENV}=avx2)"),
        })
    }
}

/// The highest level this CPU supports.
pub fn cpu() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let v3 = has!("avx2") && has!("fma");
        let v4 = has!("avx512f") && has!("avx512bw") && has!("avx512dq") && has!("avx512vl");
        if v3 && v4 {
            return Isa::Avx512;
        }
        if v3 {
            return Isa::Avx2;
        }
    }
    Isa::Scalar
}

/// The level our element-wise loops were compiled for (the build baseline).
pub fn kernels_built() -> Isa {
    if cfg!(all(target_feature = "avx2", target_feature = "fma")) {
        Isa::Avx2
    } else {
        Isa::Scalar
    }
}

/// The level our element-wise kernels run on a CPU of level `cpu`: their
/// AVX-512 copies where GEMM runs AVX-512 (this build has the `avx512`
/// feature and the CPU the instructions), else the build's baseline.
pub fn kernels_path(cpu: Isa) -> Isa {
    if gemm_path(cpu) == Isa::Avx512 {
        Isa::Avx512
    } else {
        kernels_built()
    }
}

/// The level GEMM dispatches to on a CPU of level `cpu` in this build.
pub fn gemm_path(cpu: Isa) -> Isa {
    let built = if cfg!(feature = "avx512") { Isa::Avx512 } else { Isa::Avx2 };
    cpu.min(built)
}

/// The levels a run uses, after checking the CPU and `LOWCOMM_ISA`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Levels {
    /// What the CPU supports.
    pub cpu: Isa,
    /// What GEMM runs on.
    pub gemm: Isa,
    /// What the element-wise kernels run on ([`kernels_path`]).
    pub kernels: Isa,
}

impl Levels {
    /// The level of the step as a whole: GEMM's, where most FLOPs are.
    pub fn step(&self) -> Isa {
        self.gemm
    }
}

/// Check `cpu` against this build and a requested cap (`LOWCOMM_ISA`).
pub fn resolve(cpu: Isa, kernels: Isa, gemm: Isa, want: Option<Isa>) -> Result<Levels> {
    if kernels > cpu {
        bail!(
            "this build's kernels need {} but the CPU only has {}: rebuild for it with \
             `RUSTFLAGS= cargo build --release --no-default-features`",
            kernels.label(),
            cpu.label()
        );
    }
    if let Some(w) = want {
        if w > cpu {
            bail!(
                "{ENV}={} asks for {} but this CPU lacks it: use {ENV}={} or leave it unset",
                w.name(),
                w.label(),
                cpu.name()
            );
        }
        if gemm > w && w == Isa::Scalar {
            bail!(
                "{ENV}=scalar but GEMM picks {} on this CPU by itself (the gemm crate has no run-time switch and \
                 every build has its AVX2 kernels): the scalar path runs only on CPUs without AVX2/FMA; \
                 use {ENV}=avx2 with a `--no-default-features` build",
                gemm.label()
            );
        }
        if gemm > w {
            bail!(
                "{ENV}={} but this build's GEMM picks {} on this CPU by itself (the gemm crate has no run-time \
                 switch): build without it, `cargo build --release --no-default-features`, to run the AVX2 path",
                w.name(),
                gemm.label()
            );
        }
        if kernels > w {
            bail!(
                "{ENV}={} but this build's element-wise kernels were compiled for {}: rebuild with \
                 `RUSTFLAGS= cargo build --release --no-default-features`",
                w.name(),
                kernels.label()
            );
        }
    }
    Ok(Levels { cpu, gemm, kernels })
}

/// The levels of this process (checked once; later calls return the same).
pub fn active() -> Result<Levels> {
    static LEVELS: OnceLock<std::result::Result<Levels, String>> = OnceLock::new();
    LEVELS
        .get_or_init(|| {
            let want = match std::env::var(ENV) {
                Ok(s) if !s.trim().is_empty() => Some(Isa::parse(&s).map_err(|e| format!("{e:#}"))?),
                _ => None,
            };
            let c = cpu();
            resolve(c, kernels_path(c), gemm_path(c), want).map_err(|e| format!("{e:#}"))
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Isa::*;

    #[test]
    fn parse_accepts_the_three_levels_and_names_the_variable_otherwise() {
        assert_eq!(Isa::parse("AVX2").unwrap(), Avx2);
        assert_eq!(Isa::parse("avx512").unwrap(), Avx512);
        assert_eq!(Isa::parse("scalar").unwrap(), Scalar);
        let e = Isa::parse("sse4").unwrap_err().to_string();
        assert!(e.contains("LOWCOMM_ISA") && e.contains("avx2"), "{e}");
    }

    #[test]
    fn forcing_a_level_the_cpu_lacks_is_refused() {
        let e = resolve(Avx2, Avx2, Avx2, Some(Avx512)).unwrap_err().to_string();
        assert!(e.contains("lacks") && e.contains("LOWCOMM_ISA=avx2"), "{e}");
        // a build for AVX2 on a CPU without it: refused before any kernel runs
        let e = resolve(Scalar, Avx2, Scalar, None).unwrap_err().to_string();
        assert!(e.contains("RUSTFLAGS="), "{e}");
    }

    #[test]
    fn forcing_below_what_gemm_picks_by_itself_names_the_build_to_use() {
        let e = resolve(Avx512, Avx2, Avx512, Some(Avx2)).unwrap_err().to_string();
        assert!(e.contains("--no-default-features"), "{e}");
        let e = resolve(Avx2, Scalar, Avx2, Some(Scalar)).unwrap_err().to_string();
        assert!(e.contains("only on CPUs without AVX2"), "{e}");
        assert_eq!(resolve(Scalar, Scalar, Scalar, Some(Scalar)).unwrap().step(), Scalar);
        // the AVX2 build on an AVX-512 CPU honours the cap
        let l = resolve(Avx512, Avx2, Avx2, Some(Avx2)).unwrap();
        assert_eq!((l.cpu, l.gemm, l.step()), (Avx512, Avx2, Avx2));
        // no cap: whatever the build picks
        assert_eq!(resolve(Avx512, Avx2, Avx512, None).unwrap().step(), Avx512);
    }

    #[test]
    fn element_wise_kernels_go_wide_only_where_gemm_does() {
        assert_eq!(kernels_path(Avx2), kernels_built());
        assert_eq!(kernels_path(Scalar), kernels_built());
        // AVX-512 copies with the `avx512` feature (as gemm's x86-v4), the baseline without it
        let want = if cfg!(feature = "avx512") { Avx512 } else { kernels_built() };
        assert_eq!(kernels_path(Avx512), want);
    }

    #[test]
    fn gemm_path_never_exceeds_the_cpu() {
        assert_eq!(gemm_path(Scalar), Scalar);
        assert_eq!(gemm_path(Avx2), Avx2);
        assert!(gemm_path(Avx512) >= Avx2);
        assert!(cpu() >= kernels_built(), "this test host runs this build");
    }
}
