//! Root test of the iMTU advertisement end to end (issue 30, `px lab
//! border`): an exchange (9000-byte bridge, BIRD 2 route server), b-network
//! A behind `px gateway --emtu 1500 --imtu-table 30`, neighbours B (claims
//! 9000, true), C (claims 9000 behind a 1500 hop: a lie) and L (legacy).
//! A↔B must use 9000-byte frames on the exchange, A↔L at most 1500, C's
//! lie must be caught by the measurement and A↔C must complete, and B
//! dropping its claim mid-transfer must cost no byte. Skips with a message
//! when not root or BIRD 2 is missing. About 40 s.

use std::time::Duration;

use px_lab::border::exchange::{ExchangeOptions, run};
use px_lab::require_root_or_skip;

#[test]
fn verified_neighbours_get_jumbo_frames_liars_and_legacy_get_translation() {
    if !require_root_or_skip("verified_neighbours_get_jumbo_frames_liars_and_legacy_get_translation") {
        return;
    }
    if !px_lab::border::bird::require_or_skip("verified_neighbours_get_jumbo_frames_liars_and_legacy_get_translation") {
        return;
    }
    let o = ExchangeOptions {
        exe: env!("CARGO_BIN_EXE_px").into(),
        bytes: 8 << 20,
        withdraw_transfer: Duration::from_secs(4),
    };
    let r = run(&o, &|l| eprintln!("{l}")).expect("the exchange run");
    eprintln!("{}", serde_json::to_string_pretty(&r).unwrap());
    assert!(r.transfers_exact, "{:?}", r.transfers);
    assert_eq!(r.lost_bytes, 0);
    assert!(r.to_bnet_max_frame > 8900, "A<->B never used jumbo frames on the exchange: {:?}", r.bnet);
    assert!(r.to_legacy_max_frame <= 1500, "{:?}", r.legacy);
    assert!(r.lie_detected, "{:?} {:?}", r.liar, r.gateway_log);
    assert!(r.after_withdraw.to_max <= 1500, "A->B still jumbo after the claim was dropped: {:?}", r.after_withdraw);
    assert!(r.imtu_passed > 0);
}
