//! What a real store-and-forward path adds to a round trip, by arithmetic:
//! the explanation of the study's result, put in numbers beside what the
//! shaped lab measures.
//!
//! On a link of rate R a frame of L bytes takes L/R to arrive whole; a
//! store-and-forward hop (a switch, a NIC) sends a frame on only once it
//! has all of it. A message cut into frames L₁ … Lₙ through H such hops
//! arrives whole at F(n, H), where F(i, h) is Lᵢ/R after the later of
//! F(i, h − 1) and F(i − 1, h): a frame leaves hop h when it has arrived
//! whole and the frame before it has left. Fewer, larger frames pipeline
//! worse: the first 9000-byte frame must arrive whole at the switch before
//! any of it goes on.

use px_netns::LinkRate;

/// Ethernet header bytes counted with each frame (what `tbf` counts; the
/// wire adds preamble, FCS and the inter-frame gap, 24 bytes, which the
/// model leaves out like the lab's shaping does).
const ETH: usize = 14;

/// The frames (bytes with the Ethernet header) of one message of `size`
/// bytes sent with `proto` (`udp`: IP fragments of one datagram; `tcp`,
/// `tcp_nodelay`: segments of MSS `mtu` − 52, timestamps on) over `mtu`.
pub fn frames(proto: &str, size: usize, mtu: u32) -> Vec<usize> {
    let mtu = mtu as usize;
    // (headers per frame, payload per frame, bytes the first frame adds)
    let (header, per, extra) = if proto == "udp" {
        // IP fragments of the datagram (UDP header included): payload
        // multiples of 8 but the last.
        (20, (mtu - 20) / 8 * 8, 8)
    } else {
        // Segments of MSS mtu − 52 (IP, TCP with timestamps).
        (52, mtu - 52, 0)
    };
    let mut left = size + extra;
    let mut out = Vec::new();
    while left > 0 {
        let n = left.min(per);
        out.push(header + n + ETH);
        left -= n;
    }
    out
}

/// When the last of `frames` has arrived whole after `hops`
/// store-and-forward links at `rate`, µs after the first bit left.
pub fn arrival_us(frames: &[usize], rate: LinkRate, hops: usize) -> f64 {
    let mut done = vec![0.0f64; hops + 1];
    for &len in frames {
        let t = rate.serialisation_us(len as u32);
        // done[h]: when this frame has arrived whole at hop h's far end.
        let mut prev_hop = 0.0f64;
        for d in done.iter_mut().skip(1) {
            let start = prev_hop.max(*d);
            *d = start + t;
            prev_hop = *d;
        }
    }
    done[hops]
}

/// What the wire adds to one round trip of `size` bytes (the message one
/// way, the 4-byte answer back) over `hops` store-and-forward links.
pub fn wire_us(proto: &str, size: usize, mtu: u32, rate: LinkRate, hops: usize) -> f64 {
    let answer = frames(proto, 4, mtu).into_iter().map(|l| l.max(60)).collect::<Vec<_>>();
    arrival_us(&frames(proto, size, mtu), rate, hops) + arrival_us(&answer, rate, hops)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GBIT: LinkRate = LinkRate(1_000_000_000);

    #[test]
    fn frames_of_a_datagram_and_of_a_message() {
        // 11008 bytes of UDP datagram: seven 1480-byte fragments and 648.
        let f = frames("udp", 11000, 1500);
        assert_eq!(f.len(), 8);
        assert_eq!((f[0], f[7]), (1514, 20 + 648 + 14));
        assert_eq!(frames("udp", 11000, 9000), vec![20 + 8976 + 14, 20 + 11008 - 8976 + 14]);
        assert_eq!(frames("tcp", 2000, 1500), vec![1514, 52 + 552 + 14]);
    }

    #[test]
    fn one_frame_pays_its_time_at_every_hop_a_train_pipelines() {
        // One 9014-byte frame through two hops: twice its 72 µs.
        assert!((arrival_us(&[9014], GBIT, 2) - 2.0 * 72.112).abs() < 1e-6);
        // n equal frames through h hops: (n + h − 1) frame times.
        assert!((arrival_us(&[1514; 8], GBIT, 2) - 9.0 * 12.112).abs() < 1e-6);
    }

    /// The study's example, UDP at 11000 B through a gigabit switch: the
    /// wire alone makes 9000 about 1.5 times slower than 1500.
    #[test]
    fn the_studys_example_by_arithmetic() {
        let at1500 = wire_us("udp", 11000, 1500, GBIT, 2);
        let at9000 = wire_us("udp", 11000, 9000, GBIT, 2);
        assert!((95.0..110.0).contains(&at1500), "{at1500}");
        assert!((155.0..170.0).contains(&at9000), "{at9000}");
        assert!(at9000 / at1500 > 1.4);
        // At 10 Gb/s the difference is a tenth.
        let ten = LinkRate(10_000_000_000);
        assert!(wire_us("udp", 11000, 9000, ten, 2) - wire_us("udp", 11000, 1500, ten, 2) < 7.0);
    }
}
