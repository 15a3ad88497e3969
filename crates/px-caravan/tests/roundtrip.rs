//! Properties of the caravan format: whatever is packed is unpacked the
//! same, in order; whatever bytes arrive, parsing never panics and either
//! refuses them with a reason or yields records that tile them exactly.

use proptest::prelude::*;
use px_caravan::{Builder, Caravan, Counts, InnerChecksum, Pseudo};

proptest! {
    #[test]
    fn pack_then_unpack_gives_the_same_datagrams(
        payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..1500), 1..40),
        ports in (any::<u16>(), any::<u16>()),
        limit in 64usize..65_536,
    ) {
        let p = Pseudo::V6 { src: "2001:db8::1".parse().unwrap(), dst: "2001:db8:1::2".parse().unwrap() };
        let mut buf = vec![0u8; limit];
        let mut b = Builder::new(&mut buf[..], ports.0, ports.1);
        // Pack greedily into as many caravans as needed, as a sender would.
        let mut caravans: Vec<Vec<u8>> = Vec::new();
        let mut packed = Vec::new();
        for d in &payloads {
            if !b.fits(d.len()) && !b.is_empty() {
                caravans.push(b.as_bytes().to_vec());
                b.clear();
            }
            if b.push(d, InnerChecksum::Compute(p)).is_ok() {
                packed.push(d.clone());
            }
        }
        if !b.is_empty() {
            caravans.push(b.as_bytes().to_vec());
        }
        let mut k = Counts::default();
        let mut got = Vec::new();
        for c in &caravans {
            let parsed = k.open(c, Some(ports)).unwrap();
            for r in parsed.iter() {
                prop_assert!(r.verify_checksum(&p, false));
                prop_assert_eq!((r.src_port(), r.dst_port()), ports);
                got.push(r.payload().to_vec());
            }
        }
        prop_assert_eq!(&got, &packed);
        prop_assert_eq!(k.datagrams as usize, packed.len());
        // Only datagrams larger than the whole buffer were refused.
        prop_assert!(payloads.iter().filter(|d| d.len() + 8 > limit).count() == payloads.len() - packed.len());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300), check_ports in any::<bool>()) {
        let mut k = Counts::default();
        let ports = check_ports.then_some((1u16, 2u16));
        match k.open(&bytes, ports) {
            Ok(c) => {
                let total: usize = c.iter().map(|r| r.datagram().len()).sum();
                prop_assert_eq!(total, bytes.len());
                prop_assert_eq!(c.iter().count(), c.len());
            }
            Err(e) => {
                prop_assert_eq!(k.malformed[e.reason() as usize], 1);
                prop_assert!(!e.to_string().is_empty());
            }
        }
        prop_assert_eq!(k.opened + k.total_malformed(), 1);
    }

    #[test]
    fn one_corrupt_length_refuses_the_whole_caravan(n in 2usize..10, at in 0usize..10, bad in 0u16..8) {
        let mut b = Builder::new(vec![0u8; 4096], 5, 6);
        for i in 0..n {
            b.push(&[i as u8; 33], InnerChecksum::None).unwrap();
        }
        let mut c = b.as_bytes().to_vec();
        let at = at % n * 41;
        c[at + 4..at + 6].copy_from_slice(&bad.to_be_bytes());
        prop_assert!(Caravan::parse(&c, None).is_err());
    }
}
