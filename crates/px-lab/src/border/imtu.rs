//! The iMTU advertisement over BGP (issue 30, paper §4.2), as BIRD 2
//! configuration: a b-network announces its prefixes with its iMTU in a
//! BGP large community (RFC 8092), and its neighbour copies that iMTU into
//! the route's `krt_mtu` in a kernel table of its own, which the gateway
//! reads (the verification before trust is the gateway's, see
//! `px_gateway::imtu`).
//!
//! Encoding: `(ASN, 1, iMTU)` — Global Administrator the announcing
//! b-network's own AS number, Local Data Part 1 the function `1` ("iMTU
//! of the b-network that originates this prefix"), Local Data Part 2 the
//! iMTU in bytes (the largest IP packet its interior carries). The
//! importer accepts it only from the AS that originated the route (the
//! first AS of the path: a transit network cannot speak for another's
//! interior) and only in 1280..=9216; anything else leaves the prefix out
//! of the iMTU table, which means "translate", the safe default.
//!
//! The configurations here are what `docs/border.md` shows and what the
//! root test runs; a unit test has BIRD parse them (`bird -p`).

/// The function number of the iMTU in the large community's first local
/// data part.
pub const IMTU_FUNCTION: u32 = 1;
/// The kernel routing table the importer writes (routes with `mtu`).
pub const IMTU_TABLE: u32 = 30;

/// A b-network's BIRD: router `router_id` in AS `asn`, one eBGP session to
/// `peer` (address, AS), announcing `prefixes` with the large community
/// `(asn, 1, imtu)` (`imtu: None`: announced without it).
pub fn announce_config(
    log: &str,
    router_id: &str,
    asn: u32,
    peer: (&str, u32),
    prefixes: &[&str],
    imtu: Option<u32>,
) -> String {
    let routes: String = prefixes.iter().map(|p| format!("  route {p} unreachable;\n")).collect();
    let tag = imtu.map_or(String::new(), |m| format!("bgp_large_community.add(({asn}, {IMTU_FUNCTION}, {m}));"));
    format!(
        r#"log "{log}" all;
router id {router_id};
protocol device {{ }}
protocol static announced {{
  ipv4;
{routes}}}
protocol bgp exchange {{
  local as {asn};
  neighbor {} as {};
  connect retry time 1;
  ipv4 {{ import all; export filter {{ if proto = "announced" then {{ {tag} accept; }} reject; }}; }};
}}
"#,
        peer.0, peer.1
    )
}

/// The gateway side's BIRD: learns routes from `peer` (a neighbour, or an
/// exchange's route server) over eBGP into its main table and copies
/// those that carry a valid iMTU claim into kernel table [`IMTU_TABLE`]
/// with `krt_mtu` set to it. A claim is valid when the route was
/// originated by one of `members` (the neighbouring b-networks: path of
/// that one AS, so a transit network cannot speak for another's
/// interior), is the only `(AS, 1, *)` community of that AS on the route,
/// and lies within 1280..=9216. With `main_kernel`, the learned routes
/// also go to the kernel's main table (the gateway host's own probes
/// toward the neighbours' responders follow them).
pub fn learn_config(
    log: &str,
    router_id: &str,
    asn: u32,
    peer: (&str, u32),
    members: &[u32],
    main_kernel: bool,
) -> String {
    let peer_as = peer.1;
    // BIRD 2.0 takes no variable as the first part of a large-community
    // pattern: one line per member AS.
    let claims: String = members
        .iter()
        .map(|m| {
            format!(
                "  if bgp_path.first = {m} then claims = filter(bgp_large_community, [({m}, {IMTU_FUNCTION}, *)]);\n"
            )
        })
        .collect();
    let main = if main_kernel {
        "protocol kernel main_kernel {\n  ipv4 { import none; export where source = RTS_BGP; };\n}\n"
    } else {
        ""
    };
    format!(
        r#"log "{log}" all;
router id {router_id};
protocol device {{ }}
ipv4 table imtu4;
# (origin AS, 1, iMTU): RFC 8092 large community, docs/border.md. Exactly
# one claim, by the member AS that originated the route and is the whole
# path, within 1280..9216.
function imtu_of()
lclist claims;
{{
  if bgp_path.len != 1 || bgp_path.first != bgp_path.last then return 0;
  claims = ---empty---;
{claims}  if claims.len != 1 then return 0;
  if claims.min.data2 < 1280 || claims.min.data2 > 9216 then return 0;
  return claims.min.data2;
}}
filter imtu_import {{
  if imtu_of() > 0 then {{
    krt_mtu = imtu_of();
    accept;
  }}
  reject;
}}
protocol pipe imtu_pipe {{ table master4; peer table imtu4; export filter imtu_import; import none; }}
protocol kernel imtu_kernel {{
  ipv4 {{ table imtu4; export all; import none; }};
  kernel table {IMTU_TABLE};
}}
{main}protocol bgp exchange {{
  local as {asn};
  neighbor {} as {peer_as};
  connect retry time 1;
  ipv4 {{ import all; export none; }};
}}
"#,
        peer.0
    )
}

/// One route of kernel table [`IMTU_TABLE`] (`ip -j route show table 30`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImtuRoute {
    /// The destination prefix.
    pub dst: String,
    /// Its `mtu` metric: the advertised iMTU.
    pub mtu: u16,
}

/// Parses `ip -j -d route show table 30`: the routes that carry an `mtu`
/// metric (others are not iMTU advertisements and are skipped).
pub fn parse_imtu_routes(json: &str) -> Result<Vec<ImtuRoute>, String> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("ip -j route: {e}"))?;
    let mut out = Vec::new();
    for r in v.as_array().ok_or("ip -j route: not a list")? {
        let Some(dst) = r["dst"].as_str() else { continue };
        let mtu = r["metrics"].as_array().and_then(|m| m.iter().find_map(|x| x["mtu"].as_u64()));
        if let Some(mtu) = mtu.and_then(|m| u16::try_from(m).ok()) {
            out.push(ImtuRoute { dst: dst.to_owned(), mtu });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::bird_parses as parses;

    #[test]
    fn bird_parses_both_configurations() {
        parses(&announce_config(
            "/tmp/x.log",
            "198.51.100.18",
            64501,
            ("198.51.100.17", 64500),
            &["203.0.113.64/26"],
            Some(9000),
        ))
        .unwrap();
        parses(&announce_config(
            "/tmp/x.log",
            "198.51.100.18",
            64501,
            ("198.51.100.17", 64500),
            &["203.0.113.64/26"],
            None,
        ))
        .unwrap();
        parses(&learn_config("/tmp/x.log", "198.51.100.17", 64500, ("198.51.100.18", 64501), &[64501], false)).unwrap();
        parses(&learn_config("/tmp/x.log", "198.51.100.2", 64500, ("198.51.100.126", 64510), &[64501, 64502], true))
            .unwrap();
    }

    #[test]
    fn the_community_is_origin_asn_function_imtu() {
        let c =
            announce_config("/l", "198.51.100.18", 64501, ("198.51.100.17", 64500), &["203.0.113.64/26"], Some(9000));
        assert!(c.contains("bgp_large_community.add((64501, 1, 9000))"), "{c}");
        assert!(!announce_config("/l", "198.51.100.18", 64501, ("x", 1), &["203.0.113.64/26"], None).contains("large"));
    }

    #[test]
    fn kernel_routes_with_an_mtu_are_read() {
        let j = r#"[{"dst":"203.0.113.64/26","gateway":"198.51.100.18","dev":"x0","protocol":"bird","metrics":[{"mtu":9000}],"flags":[]},
                   {"dst":"203.0.113.128/26","gateway":"198.51.100.18","dev":"x0","flags":[]}]"#;
        assert_eq!(parse_imtu_routes(j).unwrap(), vec![ImtuRoute { dst: "203.0.113.64/26".into(), mtu: 9000 }]);
        assert!(parse_imtu_routes("nope").is_err());
    }
}
