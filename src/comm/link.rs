//! Alpha-beta link model: an operation on `B` bytes over a link of latency
//! `alpha` (s) and bandwidth `bw` (bytes/s) takes `alpha + B / bw`.
//!
//! Collective costs on one tier of `p` workers (ring algorithms; Thakur,
//! Rabenseifner & Gropp, "Optimization of Collective Communication
//! Operations in MPICH", IJHPCA 2005; Patarasuk & Yuan, "Bandwidth optimal
//! all-reduce algorithms for clusters of workstations", JPDC 2009, who show
//! the ring all-reduce's `2 (p-1)/p B / bw` is the bandwidth lower bound):
//!
//! - all-reduce (reduce-scatter + all-gather ring): `2(p-1) alpha + 2(p-1)/p * B / bw`
//! - reduce-scatter, all-gather (ring): `(p-1) alpha + (p-1)/p * B / bw`
//! - broadcast (pipelined chain, large-message limit): `(p-1) alpha + B / bw`
//!
//! `B` is the whole buffer (for reduce-scatter the input, for all-gather the
//! output). With `p = 1` every cost is 0. These are the same per-rank byte
//! volumes [`super::CommStats`] counts.
//!
//! Two tiers (`inter` set and `p > workers_per_node = k`, `m = ceil(p / k)`
//! nodes), the hierarchical schemes:
//! - all-reduce: intra reduce-scatter of B (k) + inter all-reduce of B/k (m)
//!   + intra all-gather of B (k)
//! - reduce-scatter: intra reduce-scatter of B (k) + inter reduce-scatter of B/k (m);
//!   all-gather is the mirror image
//! - broadcast: chain across node leaders (m) then chain inside each node (k),
//!   not pipelined across tiers.
//!
//! Collectives over a sub-group take a [`Route`]: inside one node (the intra
//! tier, a flat ring), one member per node (the inter tier; when several
//! such groups run at once, as FlexDeMo's replication groups do, they share
//! each node's link, so each gets `1/share` of its bandwidth), or spread
//! over nodes with several members each (the hierarchical formulas above).
//!
//! A point-to-point message of `B` bytes takes `alpha + B / bw` on the tier
//! between the two participants (intra within a node, else inter), or the
//! measured ping-pong's time when calibrate wrote one. The
//! runtimes hold the sender for it, and the receiver's link takes one
//! message at a time (runtime/sim/comm.rs, `send`).
//!
//! A tier calibrate measured may carry its sweep's message times
//! (link_measured.rs): every formula above is then built from one message's
//! measured time `t(m)` in place of `alpha + m / bw` (the ring all-reduce is
//! `2(p-1) t(B/p)`, the broadcast `t(B) + (p-2) alpha`).

use super::link_measured::MessageTimes;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// One kind of link: latency and bandwidth, and where calibrate measured
/// them, the message times the line stands for.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tier {
    /// Per-message latency (alpha), seconds.
    pub latency_s: f64,
    /// Bandwidth (1 / beta), bytes per second.
    pub bandwidth_bytes_per_s: f64,
    /// Measured message times (calibrate's sweep, link_measured.rs): when
    /// set, every cost on the tier is built from them instead of the line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<MessageTimes>,
    /// Measured point-to-point message times (calibrate's ping-pong): when
    /// set, a message costs these; the collectives keep `measured`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p2p: Option<MessageTimes>,
}

impl Tier {
    /// The alpha-beta tier `alpha + B / bw`.
    pub const fn line(latency_s: f64, bandwidth_bytes_per_s: f64) -> Tier {
        Tier { latency_s, bandwidth_bytes_per_s, measured: None, p2p: None }
    }

    /// Seconds one point-to-point message of `bytes` takes: the measured
    /// ping-pong's time at that size, else the all-reduce sweep's message,
    /// else `alpha + B / bw`.
    pub fn message_time_s(&self, bytes: f64) -> f64 {
        match (&self.p2p, &self.measured) {
            (Some(m), _) | (None, Some(m)) => m.at(bytes),
            (None, None) => self.latency_s + bytes / self.bandwidth_bytes_per_s,
        }
    }

    /// Ring all-reduce of `bytes` over `p` workers, seconds: `2(p-1)`
    /// messages of `bytes / p`.
    pub fn all_reduce_s(&self, bytes: f64, p: usize) -> f64 {
        let f = (p - 1) as f64;
        match &self.measured {
            Some(m) => 2.0 * f * m.at(bytes / p as f64),
            None => 2.0 * f * self.latency_s + 2.0 * f / p as f64 * bytes / self.bandwidth_bytes_per_s,
        }
    }

    /// Ring reduce-scatter (or all-gather) of a `bytes` buffer over `p`
    /// workers, seconds: `p-1` messages of `bytes / p`.
    pub fn scatter_gather_s(&self, bytes: f64, p: usize) -> f64 {
        let f = (p - 1) as f64;
        match &self.measured {
            Some(m) => f * m.at(bytes / p as f64),
            None => f * self.latency_s + f / p as f64 * bytes / self.bandwidth_bytes_per_s,
        }
    }

    /// Pipelined chain broadcast of `bytes` over `p` workers, seconds: the
    /// whole buffer once, plus one latency per further hop.
    pub fn broadcast_s(&self, bytes: f64, p: usize) -> f64 {
        if p <= 1 {
            return 0.0;
        }
        match &self.measured {
            Some(m) => m.at(bytes) + (p - 2) as f64 * self.latency_s,
            None => (p - 1) as f64 * self.latency_s + bytes / self.bandwidth_bytes_per_s,
        }
    }

    /// This tier shared by `share` groups at once: each gets `1/share` of
    /// the bandwidth.
    fn shared(&self, share: usize) -> Tier {
        Tier {
            latency_s: self.latency_s,
            bandwidth_bytes_per_s: self.bandwidth_bytes_per_s / share.max(1) as f64,
            measured: self.measured.map(|m| m.shared(share)),
            p2p: self.p2p.map(|m| m.shared(share)),
        }
    }
}

/// Which links a collective over a group crosses (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Over `p` workers laid out as the whole cluster: hierarchical when
    /// they span nodes of `workers_per_node`.
    World(usize),
    /// `p` members inside one node: the intra tier only.
    Node(usize),
    /// `p` members, one per node: the inter tier, its bandwidth shared by
    /// `share` such groups running at once.
    Across {
        /// Members (= nodes).
        p: usize,
        /// Groups sharing each node's link.
        share: usize,
    },
}

/// A collective, for [`LinkModel::collective_s`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// In-place all-reduce of the buffer.
    AllReduce,
    /// Reduce-scatter of a buffer (its input).
    ReduceScatter,
    /// All-gather into a buffer (its output).
    AllGather,
    /// Broadcast of the buffer.
    Broadcast,
}

/// Link costs for a cluster: one tier, or nodes of `workers_per_node` with an
/// `intra` (e.g. NVLink) and an `inter` (e.g. Ethernet) tier.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkModel {
    /// Links inside a node (or the only tier when `inter` is `None`).
    pub intra: Tier,
    /// Links between nodes; `None` for a flat network. Its bandwidth is per
    /// node: the node's workers share one network interface, so the k
    /// concurrent inter-node rings of a hierarchical collective together
    /// move the whole buffer through it.
    pub inter: Option<Tier>,
    /// Workers per node; only read when `inter` is set.
    pub workers_per_node: usize,
}

impl LinkModel {
    /// A flat network where every pair of workers talks over `tier`.
    pub fn flat(tier: Tier) -> LinkModel {
        LinkModel { intra: tier, inter: None, workers_per_node: 1 }
    }

    /// `(k, m, inter)`: workers per node, nodes and inter tier when the
    /// hierarchical formulas apply to `p` workers.
    fn tiers(&self, p: usize) -> Option<(usize, usize, &Tier)> {
        let k = self.workers_per_node.max(1);
        match &self.inter {
            Some(inter) if p > k => Some((k, p.div_ceil(k), inter)),
            _ => None,
        }
    }

    /// All-reduce of `n` elements of `bytes_per_elem` over `p` workers, seconds.
    pub fn all_reduce_s(&self, n: usize, bytes_per_elem: usize, p: usize) -> f64 {
        let b = (n * bytes_per_elem) as f64;
        match self.tiers(p) {
            None => self.intra.all_reduce_s(b, p),
            Some((k, m, inter)) => {
                // k rings of b/k bytes each share the node's NIC: b in total.
                2.0 * self.intra.scatter_gather_s(b, k) + inter.all_reduce_s(b, m)
            }
        }
    }

    /// Reduce-scatter of an `n`-element input over `p` workers, seconds.
    pub fn reduce_scatter_s(&self, n: usize, bytes_per_elem: usize, p: usize) -> f64 {
        let b = (n * bytes_per_elem) as f64;
        match self.tiers(p) {
            None => self.intra.scatter_gather_s(b, p),
            Some((k, m, inter)) => self.intra.scatter_gather_s(b, k) + inter.scatter_gather_s(b, m),
        }
    }

    /// All-gather into an `n`-element output over `p` workers, seconds.
    pub fn all_gather_s(&self, n: usize, bytes_per_elem: usize, p: usize) -> f64 {
        // The mirror image of reduce-scatter moves the same bytes.
        self.reduce_scatter_s(n, bytes_per_elem, p)
    }

    /// Broadcast of `n` elements over `p` workers, seconds.
    pub fn broadcast_s(&self, n: usize, bytes_per_elem: usize, p: usize) -> f64 {
        let b = (n * bytes_per_elem) as f64;
        match self.tiers(p) {
            None => self.intra.broadcast_s(b, p),
            Some((k, m, inter)) => inter.broadcast_s(b, m) + self.intra.broadcast_s(b, k),
        }
    }
}

impl LinkModel {
    /// The tier between nodes (the only tier of a flat model).
    fn network(&self) -> &Tier {
        self.inter.as_ref().unwrap_or(&self.intra)
    }

    /// Seconds a collective `op` over `n` elements of `bytes_per_elem` takes on `route`.
    pub fn collective_s(&self, op: Op, n: usize, bytes_per_elem: usize, route: Route) -> f64 {
        let flat = |t: &Tier, p: usize| {
            let b = (n * bytes_per_elem) as f64;
            match op {
                Op::AllReduce => t.all_reduce_s(b, p),
                Op::ReduceScatter | Op::AllGather => t.scatter_gather_s(b, p),
                Op::Broadcast => t.broadcast_s(b, p),
            }
        };
        match route {
            Route::World(p) => match op {
                Op::AllReduce => self.all_reduce_s(n, bytes_per_elem, p),
                Op::ReduceScatter => self.reduce_scatter_s(n, bytes_per_elem, p),
                Op::AllGather => self.all_gather_s(n, bytes_per_elem, p),
                Op::Broadcast => self.broadcast_s(n, bytes_per_elem, p),
            },
            Route::Node(p) => flat(&self.intra, p),
            Route::Across { p, share } => flat(&self.network().shared(share), p),
        }
    }

    /// Seconds a message of `bytes` takes between two participants,
    /// `same_node` or not.
    pub fn message_s(&self, bytes: usize, same_node: bool) -> f64 {
        let t = if same_node { &self.intra } else { self.network() };
        t.message_time_s(bytes as f64)
    }
}

/// Why a link spec such as `1gbit,50us` did not parse.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkParseError(pub String);

impl fmt::Display for LinkParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LinkParseError {}

/// Splits `"25GB/s"` into `(25.0, "GB/s")`; `None` when there is no leading number.
fn number_unit(s: &str) -> Option<(f64, &str)> {
    let end = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+')).unwrap_or(s.len());
    let v = s[..end].parse::<f64>().ok()?;
    Some((v, s[end..].trim()))
}

/// Bytes per second per unit of bandwidth (decimal SI prefixes).
fn bandwidth_unit(u: &str) -> Option<f64> {
    let core = u.strip_suffix("/s").unwrap_or(u);
    let bits = match core.to_ascii_lowercase().as_str() {
        "bit" | "bps" => Some(1.0),
        "kbit" | "kbps" => Some(1e3),
        "mbit" | "mbps" => Some(1e6),
        "gbit" | "gbps" => Some(1e9),
        "tbit" | "tbps" => Some(1e12),
        _ => None,
    };
    if let Some(b) = bits {
        return Some(b / 8.0);
    }
    // Byte units are case-sensitive: "gb" alone would be ambiguous.
    match core {
        "B" => Some(1.0),
        "kB" | "KB" => Some(1e3),
        "MB" => Some(1e6),
        "GB" => Some(1e9),
        "TB" => Some(1e12),
        _ => None,
    }
}

fn latency_unit(u: &str) -> Option<f64> {
    match u {
        "s" => Some(1.0),
        "ms" => Some(1e-3),
        "us" | "µs" => Some(1e-6),
        "ns" => Some(1e-9),
        _ => None,
    }
}

impl FromStr for Tier {
    type Err = LinkParseError;

    /// `BANDWIDTH[,LATENCY]`, e.g. `1gbit,50us`, `100mbit,1ms`, `10gbit`,
    /// `25GB/s,2us`. Bandwidth units: bit/kbit/mbit/gbit/tbit (per second,
    /// `/s` optional) or B/KB/MB/GB/TB per second; latency units s/ms/us/ns,
    /// default 0.
    fn from_str(s: &str) -> Result<Tier, LinkParseError> {
        let err = |problem: String| {
            LinkParseError(format!("cannot parse link \"{s}\": {problem}; expected e.g. 1gbit,50us or 25GB/s,2us"))
        };
        let mut parts = s.split(',').map(str::trim);
        let bw = parts.next().unwrap_or("");
        let lat = parts.next();
        if parts.next().is_some() {
            return Err(err("more than one comma".into()));
        }
        let (v, unit) =
            number_unit(bw).ok_or_else(|| err(format!("bandwidth \"{bw}\" does not start with a number")))?;
        if unit.is_empty() {
            return Err(err(format!("bandwidth \"{bw}\" has no unit")));
        }
        let mult = bandwidth_unit(unit).ok_or_else(|| err(format!("unknown bandwidth unit \"{unit}\"")))?;
        let bandwidth = v * mult;
        if !(bandwidth > 0.0 && bandwidth.is_finite()) {
            return Err(err(format!("bandwidth must be positive, got \"{bw}\"")));
        }
        let latency = match lat {
            None => 0.0,
            Some(l) => {
                let (v, unit) =
                    number_unit(l).ok_or_else(|| err(format!("latency \"{l}\" does not start with a number")))?;
                if unit.is_empty() {
                    return Err(err(format!("latency \"{l}\" has no unit")));
                }
                let mult = latency_unit(unit).ok_or_else(|| err(format!("unknown latency unit \"{unit}\"")))?;
                let t = v * mult;
                if !(t >= 0.0 && t.is_finite()) {
                    return Err(err(format!("latency must be >= 0, got \"{l}\"")));
                }
                t
            }
        };
        Ok(Tier::line(latency, bandwidth))
    }
}

#[cfg(test)]
#[path = "link_tests.rs"]
mod tests;
