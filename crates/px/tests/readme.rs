//! The README is a deployment guide (issue 29 item 4): its first screen
//! says what PacketExpress is, gives the two commands (which exist, and
//! the test command is what CI runs), and says what it does not do; it
//! has a Deploy section an operator can follow; it links the operations
//! and metrics documents, and every document it links exists. The
//! measurement history lives in `docs/`, not in the README.

const README: &str = include_str!("../../../README.md");
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

#[test]
fn first_screen_is_what_it_is_the_two_commands_and_what_it_does_not_do() {
    // A screen: the first 45 lines.
    let first: String = README.lines().take(45).collect::<Vec<_>>().join("\n");
    assert!(first.contains("transparent layer-2 bump in the") && first.contains("wire"), "{first}");
    assert!(first.contains("\n./scripts/demo "), "{first}");
    assert!(first.contains("\n./scripts/test "), "{first}");
    assert!(first.contains("**What it does not do.**"), "{first}");
    assert!(first.contains("traffic between the ports") && first.contains("stops"), "{first}");
    for script in ["scripts/demo", "scripts/test"] {
        assert!(std::path::Path::new(ROOT).join(script).exists(), "{script}");
    }
    let ci = std::fs::read_to_string(format!("{ROOT}/.ci/run")).unwrap();
    assert!(ci.contains("exec ./scripts/test"), "CI runs the README's test command: {ci}");
}

#[test]
fn deploy_section_covers_what_an_operator_needs() {
    let deploy = README.split("\n## Deploy\n").nth(1).expect("a Deploy section").split("\n## ").next().unwrap();
    for must in [
        "promiscuous",
        "one subnet",
        "STP",
        "LACP",
        "ip link set",
        "mtu 9000",
        "ethtool -K",
        "lro off",
        "ethtool -G",
        "RSS",
        "VLAN",
        "icmp_source_v6",
        "px gateway --check-config",
        "systemctl enable --now px-gateway@",
        "px status",
        "no bypass",
        "redundancy",
        "one core carries",
    ] {
        assert!(deploy.to_lowercase().contains(&must.to_lowercase()), "Deploy lacks {must:?}");
    }
}

#[test]
fn links_resolve_and_history_lives_in_docs() {
    for must in ["docs/operations.md", "docs/metrics.md", "docs/results-2026-11.md"] {
        assert!(README.contains(&format!("]({must})")), "README does not link {must}");
    }
    let mut rest = README;
    while let Some(i) = rest.find("](") {
        let tail = &rest[i + 2..];
        let end = tail.find(')').unwrap();
        let target = tail[..end].split('#').next().unwrap();
        if !target.is_empty() && !target.contains("://") {
            assert!(std::path::Path::new(ROOT).join(target).exists(), "README links {target}, which does not exist");
        }
        rest = &tail[end..];
    }
    assert!(README.lines().count() < 260, "the README grew to {} lines", README.lines().count());
    // The figures moved, not lost.
    let history = std::fs::read_to_string(format!("{ROOT}/docs/results-2026-11.md")).unwrap();
    assert!(history.contains("## Engine benchmark") && history.contains("## Lab demo"));
}
