//! `lowcomm compare`: run several methods (`--methods all`: every one) on
//! the same model, data and cluster; write a table (summary.md), the curves
//! (curves.csv), three plots (SVG) and one self-contained report.html to a
//! directory. Each finished run leaves `runs/DIR/result.json`, so the
//! same command run again reuses it (`--fresh`: rerun everything).
//!
//! Every method trains the same tokens unless `--budget rounds` is given,
//! and the report says whether they did (table.rs). A method whose
//! run stops with `strategy::Diverged` does not end the sweep: its row is
//! marked, with its curve up to there. Rows are marked diverged or unstable
//! by marks.rs and left out of the target loss and the verdict
//! (verdict.rs) that ends summary.md and report.html. With `--seeds N`
//! every method runs N seeds (sweep.rs), the table shows mean ± std over
//! them (stats.rs), the plots a band (curves.rs), and the verdict calls
//! times within the spread a tie. `lowcomm tune` (cli/tune/) runs its grid
//! through the same sweep and reads its results with the same table.

mod budget;
pub(super) mod curves;
mod html;
pub(super) mod marks;
mod methods;
mod report;
pub(super) mod stats;
pub(super) mod store;
pub(super) mod sweep;
pub(super) mod table;
mod verdict;

use super::CompareArgs;
use crate::strategy::method_spec::expand;
use anyhow::{bail, Context, Result};
use std::path::Path;
use sweep::{configure, Setup, Sweep};

/// The `[methods.NAME]` sections of the `--tuned` files (as `lowcomm tune`
/// writes them, or any run config), merged in order: a later file's key
/// wins. Any other section of those files is refused: they give settings of
/// methods only.
pub(super) fn tuned_sections(files: &[std::path::PathBuf]) -> Result<toml::Table> {
    let mut out = toml::Table::new();
    for f in files {
        let text = std::fs::read_to_string(f).with_context(|| format!("--tuned {}: cannot read it", f.display()))?;
        let t: toml::Table = text.parse().with_context(|| format!("--tuned {}: not TOML", f.display()))?;
        for (section, v) in t {
            let Some(methods) = v.as_table().filter(|_| section == "methods") else {
                bail!(
                    "--tuned {}: [{section}] is not a method's settings: a --tuned file holds [methods.NAME] sections only (as `lowcomm tune` writes tuned.toml); put the rest in --config",
                    f.display()
                );
            };
            for (name, keys) in methods {
                let Some(keys) = keys.as_table() else {
                    bail!("--tuned {}: methods.{name} is not a [methods.{name}] section", f.display());
                };
                let dst = out.entry(name.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
                if let Some(d) = dst.as_table_mut() {
                    d.extend(keys.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
        }
    }
    Ok(out)
}

/// Runs `lowcomm compare`.
pub fn compare(a: &CompareArgs) -> Result<()> {
    sweep::refuse_single_run_flags("compare", &a.train)?;
    let out = &a.results;
    let tuned = tuned_sections(&a.tuned)?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let runner = super::mpi::runner(a.train.backend.as_deref().unwrap_or("local"))?;
    let mut sweep = Sweep::new(runner, "compare", a.train.quiet);
    let mut notes = Vec::new();
    let setup = Setup {
        train: &a.train,
        out: Path::new(out),
        fresh: a.fresh,
        seeds: a.seeds,
        flag: "--methods",
        tuned: &tuned,
    };
    let planned = configure(expand(&a.methods)?, &setup, &mut notes)?;
    for n in &notes {
        sweep.say(&format!("compare: {n}"));
    }
    if planned.is_empty() {
        bail!("--methods {}: no method fits this setup (see the lines above)", a.methods.join(","));
    }
    let runs: Vec<&sweep::Planned> = planned.iter().flatten().collect();
    let n = runs.len();
    let mut groups: Vec<Vec<_>> = vec![Vec::new(); planned.len()];
    let mut k = 0;
    for (g, entry) in planned.iter().enumerate() {
        for p in entry {
            let remaining: u64 = runs[k..].iter().filter(|q| q.done.is_none()).map(|q| q.cfg.train.steps).sum();
            k += 1;
            if let Some(r) = sweep.run(p, &format!("{k}/{n}"), remaining, &mut notes)? {
                groups[g].push(r);
            }
        }
    }
    if !sweep.runner.root {
        return Ok(());
    }
    report::write_report(a, &groups, &notes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn tuned_files_give_method_sections_only_and_a_later_file_wins() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.toml");
        let b = dir.path().join("b.toml");
        std::fs::write(&a, "[methods.diloco]\nouter_lr = 0.5\nh = 4\n").unwrap();
        std::fs::write(&b, "[methods.diloco]\nouter_lr = 0.2\n[methods.co2]\ntau = 6\n").unwrap();
        let t = super::tuned_sections(&[a.clone(), b]).unwrap();
        assert_eq!(t["diloco"]["outer_lr"].as_float(), Some(0.2));
        assert_eq!(t["diloco"]["h"].as_integer(), Some(4));
        assert_eq!(t["co2"]["tau"].as_integer(), Some(6));
        std::fs::write(&a, "[train]\nsteps = 4\n").unwrap();
        let e = super::tuned_sections(&[a]).unwrap_err().to_string();
        assert!(e.contains("[train] is not a method's settings") && e.contains("--config"), "{e}");
    }
}
