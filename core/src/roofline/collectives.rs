//! Collective times of the roofline: NCCL's ring model on one link, and NCCL's protocols on a
//! PCIe path (the model and its sources: `adapters/roofline/collectives.py`).

const NS: f64 = 1e9;

/// One of NCCL's protocols on a PCI path, as its tuning model times it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Protocol {
    pub name: &'static str,
    /// NCCL's base latency of the Ring algorithm with this protocol (baseLat).
    pub base_latency_us: f64,
    /// NCCL's latency of one ring step over PCI (hwLat[PCI][Ring]).
    pub hop_latency_us: f64,
    /// The share of the Simple protocol's bus bandwidth it reaches.
    pub width: f64,
}

/// NCCL 2.28.3, src/graph/tuning.cc (ncclTunerConstantsDefaults): Ring baseLat LL 6.6 µs, Simple
/// 8.4 µs; hwLat[PCI][Ring] LL 1.0 µs, Simple 5.7 µs; Ring LL busBw x 0.5 (an LL line is 8 bytes
/// of which 4 are data). LL128 needs NVLink, so it never runs over PCIe.
pub const LL: Protocol = Protocol { name: "LL", base_latency_us: 6.6, hop_latency_us: 1.0, width: 0.5 };
pub const SIMPLE: Protocol = Protocol { name: "Simple", base_latency_us: 8.4, hop_latency_us: 5.7, width: 1.0 };
/// The protocols NCCL picks from on PCIe, in the order ties keep.
pub const PCIE_PROTOCOLS: [Protocol; 2] = [LL, SIMPLE];

/// Ring (`ring`: 2(n-1)/n x bytes) or BestServe's formula 8 (`bestserve`: bytes / n).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Formula {
    Ring,
    BestServe,
}

/// One all-reduce of `size_bytes` per rank over `ranks` ranks, in ns (0 for one rank).
pub fn all_reduce_ns(
    size_bytes: f64,
    ranks: i64,
    bus_bytes_per_s: f64,
    latency_us: f64,
    hop_latency_us: f64,
    formula: Formula,
) -> f64 {
    if ranks < 2 {
        return 0.0;
    }
    let scale = match formula {
        Formula::BestServe => 1.0 / ranks as f64,
        Formula::Ring => 2.0 * (ranks - 1) as f64 / ranks as f64,
    };
    (latency_us + (2 * (ranks - 1)) as f64 * hop_latency_us) * 1e3 + scale * size_bytes / bus_bytes_per_s * NS
}

/// One all-to-all of each rank's `size_bytes` buffer over `ranks` ranks, in ns (0 for one rank).
pub fn all_to_all_ns(size_bytes: f64, ranks: i64, bus_bytes_per_s: f64, latency_us: f64, hop_latency_us: f64) -> f64 {
    if ranks < 2 {
        return 0.0;
    }
    (latency_us + (ranks - 1) as f64 * hop_latency_us) * 1e3
        + (ranks - 1) as f64 / ranks as f64 * size_bytes / bus_bytes_per_s * NS
}

/// A path between GPUs without NVLink: the LL latency and the Simple bus bandwidth NCCL's
/// protocols are timed by (`collectives.PathLink`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathLink {
    pub bus_gbps: f64,
    pub latency_us: f64,
}

impl PathLink {
    /// A collective of `steps` ring steps that sends `share` x `size_bytes` per rank, with
    /// `protocol`, in ns.
    pub fn protocol_ns(&self, protocol: &Protocol, size_bytes: f64, steps: i64, share: f64) -> f64 {
        let fixed =
            self.latency_us + protocol.base_latency_us - LL.base_latency_us + steps as f64 * protocol.hop_latency_us;
        fixed * 1e3 + share * size_bytes / (protocol.width * self.bus_gbps)
    }

    /// The protocol NCCL's tuning model would pick (the fastest; the first on a tie), as its
    /// index in [`PCIE_PROTOCOLS`], and its time in ns.
    pub fn fastest_ns(&self, size_bytes: f64, steps: i64, share: f64) -> (f64, usize) {
        let mut best = (self.protocol_ns(&PCIE_PROTOCOLS[0], size_bytes, steps, share), 0);
        for (index, protocol) in PCIE_PROTOCOLS.iter().enumerate().skip(1) {
            let t = self.protocol_ns(protocol, size_bytes, steps, share);
            if t < best.0 {
                best = (t, index);
            }
        }
        best
    }
}

/// Ring all-reduce over `link`: NCCL's faster protocol, 2(ranks - 1) steps, 2(ranks - 1)/ranks of
/// the bytes, in ns.
pub fn path_all_reduce_ns(size_bytes: f64, ranks: i64, link: &PathLink) -> f64 {
    if ranks < 2 {
        return 0.0;
    }
    link.fastest_ns(size_bytes, 2 * (ranks - 1), 2.0 * (ranks - 1) as f64 / ranks as f64).0
}

/// All-to-all (or all-gather, reduce-scatter) over `link`: NCCL's faster protocol, ranks - 1
/// steps, (ranks - 1)/ranks of the bytes, in ns.
pub fn path_all_to_all_ns(size_bytes: f64, ranks: i64, link: &PathLink) -> f64 {
    if ranks < 2 {
        return 0.0;
    }
    link.fastest_ns(size_bytes, ranks - 1, (ranks - 1) as f64 / ranks as f64).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_all_reduce_by_hand() {
        // 4 ranks: 10 µs + 6 hops of 1 µs, then 2 x 3/4 of 1 MB at 100 GB/s = 15 µs
        let t = all_reduce_ns(1e6, 4, 100e9, 10.0, 1.0, Formula::Ring);
        assert!((t - 31_000.0).abs() < 1e-6);
        assert_eq!(all_reduce_ns(1e6, 1, 100e9, 10.0, 1.0, Formula::Ring), 0.0);
    }

    #[test]
    fn nccl_picks_ll_for_small_messages_and_simple_for_large_ones() {
        let link = PathLink { bus_gbps: 42.88, latency_us: 20.0 };
        assert_eq!(link.fastest_ns(163_840.0, 2, 1.0).1, 0);
        assert_eq!(link.fastest_ns(1_310_720.0, 2, 1.0).1, 1);
    }
}
