//! Root test of the iMTU advertisement over BGP (issue 30): BIRD 2 in a
//! b-network B announces its prefix with the large community
//! `(64501, 1, 9000)` across a 9000-byte exchange link; BIRD 2 on the
//! gateway side copies it into kernel table 30 as `mtu 9000`. When B drops
//! the community, the prefix leaves table 30 (translation again) while the
//! route itself stays; a claim outside 1280..=9216 is ignored. Skips with a
//! message when not root or BIRD 2 is missing. About 10 s.

use std::time::{Duration, Instant};

use px_lab::border::Scratch;
use px_lab::border::bird::Bird;
use px_lab::border::imtu::{IMTU_TABLE, ImtuRoute, announce_config, learn_config, parse_imtu_routes};
use px_lab::{Topology, require_root_or_skip};

/// Table 30's iMTU routes. A table without routes may not exist at all
/// (`ip` says "FIB table does not exist": before the first route, or once
/// the last one left — a suite run failed on it): that is an empty table.
fn table30(t: &Topology, ns: px_lab::NsId) -> Vec<ImtuRoute> {
    let out = match t.ns(ns).ip(&["-j", "-4", "route", "show", "table", &IMTU_TABLE.to_string()]) {
        Ok(out) => out,
        Err(px_lab::LabError::Cmd(px_lab::CmdError::Failed { stderr, .. }))
            if stderr.contains("FIB table does not exist") =>
        {
            String::new()
        }
        Err(e) => panic!("ip route show table {IMTU_TABLE}: {e:?}"),
    };
    parse_imtu_routes(if out.trim().is_empty() { "[]" } else { &out }).unwrap()
}

fn wait_table(t: &Topology, ns: px_lab::NsId, want: &[ImtuRoute], what: &str) {
    let t0 = Instant::now();
    loop {
        let got = table30(t, ns);
        if got == want {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "{what}: table {IMTU_TABLE} is {got:?}, want {want:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn imtu_community_reaches_the_kernel_table_and_leaves_with_it() {
    if !require_root_or_skip("imtu_community_reaches_the_kernel_table_and_leaves_with_it") {
        return;
    }
    if !px_lab::border::bird::require_or_skip("imtu_community_reaches_the_kernel_table_and_leaves_with_it") {
        return;
    }
    let mut t = Topology::new().unwrap();
    let a = t.add_ns("ra").unwrap();
    let b = t.add_ns("rb").unwrap();
    t.add_veth((a, "x0"), (b, "x0"), 9000).unwrap();
    t.ns(a).add_addr("x0", "198.51.100.17/29").unwrap();
    t.ns(b).add_addr("x0", "198.51.100.18/29").unwrap();
    let dir = Scratch::new("imtu-test").unwrap();
    let log = |n: &str| Bird::log_path(&dir.0, n).to_string_lossy().into_owned();
    let prefixes = ["203.0.113.64/26"];
    let conf_b = |imtu| announce_config(&log("rb"), "198.51.100.18", 64501, ("198.51.100.17", 64500), &prefixes, imtu);
    let rb = Bird::start(t.ns(b), &dir.0, "rb", &conf_b(Some(9000))).unwrap();
    let ra = Bird::start(
        t.ns(a),
        &dir.0,
        "ra",
        &learn_config(&log("ra"), "198.51.100.17", 64500, ("198.51.100.18", 64501), &[64501], false),
    )
    .unwrap();
    ra.wait_established(&["exchange"], Duration::from_secs(30)).unwrap();
    let nine = vec![ImtuRoute { dst: "203.0.113.64/26".into(), mtu: 9000 }];
    wait_table(&t, a, &nine, "advertised 9000");
    // Withdraw the community: the prefix leaves the iMTU table, the route stays.
    rb.reconfigure(&conf_b(None)).unwrap();
    wait_table(&t, a, &[], "community withdrawn");
    let main = ra.birdc(&["show", "route", "203.0.113.64/26"]).unwrap();
    assert!(main.contains("203.0.113.64/26"), "the route itself must stay: {main}");
    // A claim outside 1280..=9216 is no claim.
    rb.reconfigure(&conf_b(Some(65000))).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(table30(&t, a), vec![], "an out-of-range iMTU was accepted");
    // And back.
    rb.reconfigure(&conf_b(Some(9000))).unwrap();
    wait_table(&t, a, &nine, "advertised again");
    let pids = [ra.pid(), rb.pid()];
    drop((ra, rb));
    for pid in pids.into_iter().flatten() {
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "bird {pid} survived");
    }
}
