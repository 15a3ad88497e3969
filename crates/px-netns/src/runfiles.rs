//! A `px gateway`'s files in `/run/px`: its control socket
//! (`gateway-net<ns>-<outer>-<inner>.sock`) and its port locks
//! (`port-net<ns>-<ifindex>-<port>.lock`), named after the inode of its
//! network namespace (px-runtime's `gateway/control.rs` and
//! `gateway/lock.rs`).
//!
//! A gateway removes them when it stops; one killed with SIGKILL (`px lab
//! border`'s failover), or still running when its namespace is deleted,
//! leaves them behind, and they would pile up run after run. So the lab
//! removes a namespace's files when it deletes the namespace
//! ([`remove_files_of`], from [`crate::Netns`]'s drop, the signal cleanup
//! and `px lab down`), and a lab gateway's start sweeps the files of
//! namespaces that no longer exist ([`sweep`]).
//!
//! A file whose namespace is gone belongs to no running gateway: a process
//! (a gateway included) keeps its namespace alive, so its inode is found
//! among the live ones ([`live_namespaces`]).

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Where `px gateway` keeps its control socket and port locks when systemd
/// gives it no `$RUNTIME_DIRECTORY` (as in the lab).
pub const RUN_DIR: &str = "/run/px";

/// The namespace inode a gateway file's name carries, if `name` is one of
/// a gateway's files.
pub fn namespace_of(name: &str) -> Option<u64> {
    let rest = match name {
        n if n.ends_with(".sock") => n.strip_prefix("gateway-net")?,
        n if n.ends_with(".lock") => n.strip_prefix("port-net")?,
        _ => return None,
    };
    let (ino, tail) = rest.split_once('-')?;
    if tail.is_empty() || ino.is_empty() || !ino.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    ino.parse().ok()
}

/// The gateway files among `names` whose namespace is not in `live`.
pub fn stale<'a>(names: impl IntoIterator<Item = &'a str>, live: &HashSet<u64>) -> Vec<&'a str> {
    names.into_iter().filter(|n| namespace_of(n).is_some_and(|ino| ino != 0 && !live.contains(&ino))).collect()
}

/// The inode of the network namespace `ip netns` calls `name`.
pub fn namespace_inode(name: &str) -> Option<u64> {
    std::fs::metadata(Path::new("/run/netns").join(name)).ok().map(|m| m.ino())
}

/// The inodes of the network namespaces alive on this host, as far as this
/// process can see: those of every thread, those open as descriptors, and
/// those mounted (`ip netns` names).
pub fn live_namespaces() -> HashSet<u64> {
    let mut live = HashSet::new();
    let link_ino = |p: &Path| -> Option<u64> {
        let t = std::fs::read_link(p).ok()?;
        t.to_str()?.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
    };
    for proc in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = proc.path();
        if !pid.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())) {
            continue;
        }
        for task in std::fs::read_dir(pid.join("task")).into_iter().flatten().flatten() {
            live.extend(link_ino(&task.path().join("ns/net")));
        }
        for fd in std::fs::read_dir(pid.join("fd")).into_iter().flatten().flatten() {
            live.extend(link_ino(&fd.path()));
        }
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    live.extend(mountinfo.lines().filter_map(|l| {
        let root = l.split_whitespace().nth(3)?;
        root.strip_prefix("net:[")?.strip_suffix(']')?.parse::<u64>().ok()
    }));
    for e in std::fs::read_dir("/run/netns").into_iter().flatten().flatten() {
        live.extend(std::fs::metadata(e.path()).ok().map(|m| m.ino()));
    }
    live
}

/// The file names in `dir` (none if it cannot be read).
fn names_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir).into_iter().flatten().flatten().filter_map(|e| e.file_name().into_string().ok()).collect()
}

/// Removes the gateway files of namespace `ino` from `dir`; returns them.
pub fn remove_files_of(dir: &Path, ino: u64) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    for n in names_in(dir).iter().filter(|n| namespace_of(n) == Some(ino)) {
        let p = dir.join(n);
        if std::fs::remove_file(&p).is_ok() {
            removed.push(p);
        }
    }
    removed
}

/// Removes the gateway files of the namespace `ip netns` calls `name` from
/// [`RUN_DIR`] (before the namespace is deleted: its inode names them).
pub fn remove_files_of_namespace(name: &str) -> Vec<PathBuf> {
    namespace_inode(name).map(|ino| remove_files_of(Path::new(RUN_DIR), ino)).unwrap_or_default()
}

/// Removes from `dir` the gateway files of namespaces that no longer
/// exist; returns them. The directory is read before the namespaces are:
/// a file made meanwhile belongs to a namespace that is alive when they
/// are read, and stays.
pub fn sweep(dir: &Path) -> Vec<PathBuf> {
    let names = names_in(dir);
    let live = live_namespaces();
    stale(names.iter().map(String::as_str), &live)
        .into_iter()
        .map(|n| dir.join(n))
        .filter(|p| std::fs::remove_file(p).is_ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_files_are_known_by_their_namespace() {
        assert_eq!(namespace_of("gateway-net4026532177-gwo-gwi.sock"), Some(4_026_532_177));
        assert_eq!(namespace_of("port-net4026532178-2-gwi.lock"), Some(4_026_532_178));
        for other in [
            "gateway-net4026532177-gwo-gwi.lock",
            "port-net4026532178-2-gwi.sock",
            "gateway-netX-gwo-gwi.sock",
            "gateway-net-gwo-gwi.sock",
            "gateway-net4026532177.sock",
            "bird.ctl",
            "port-net+1-2-gwi.lock",
        ] {
            assert_eq!(namespace_of(other), None, "{other}");
        }
        let live: HashSet<u64> = [7].into();
        let names =
            ["gateway-net7-a-b.sock", "gateway-net8-a-b.sock", "port-net8-2-b.lock", "port-net0-2-b.lock", "x.sock"];
        assert_eq!(stale(names, &live), ["gateway-net8-a-b.sock", "port-net8-2-b.lock"]);
    }

    #[test]
    fn this_process_namespace_is_live() {
        let own = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
        assert!(live_namespaces().contains(&own));
    }

    #[test]
    fn the_sweep_removes_files_of_dead_namespaces_only() {
        let dir = std::env::temp_dir().join(format!("px-netns-runfiles-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let own = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
        // An inode no namespace has: above any the kernel hands out here.
        let dead = u64::MAX - 7;
        let keep = [format!("gateway-net{own}-o-i.sock"), format!("port-net{own}-3-i.lock"), "other.lock".into()];
        let gone = [format!("gateway-net{dead}-o-i.sock"), format!("port-net{dead}-3-i.lock")];
        for n in keep.iter().chain(&gone) {
            std::fs::write(dir.join(n), "1").unwrap();
        }
        let mut removed = sweep(&dir);
        removed.sort();
        let mut want: Vec<PathBuf> = gone.iter().map(|n| dir.join(n)).collect();
        want.sort();
        assert_eq!(removed, want);
        assert!(keep.iter().all(|n| dir.join(n).exists()));
        assert_eq!(remove_files_of(&dir, own).len(), 2);
        assert!(dir.join("other.lock").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
