//! Root test of issue 38 item 6: several `px lab up` labs on one machine.
//! Each has a name (by default the user who runs px) and its own state;
//! `px lab down` takes down only the lab it names, so a second user's
//! `px lab down` leaves the first user's lab up.

use std::path::Path;
use std::process::Command;

use px_lab::require_root_or_skip;

/// `px ARGS` with `TMPDIR` (where the labs' state lives) and `USER` set:
/// (exit code, stdout, stderr).
fn px(tmp: &Path, user: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_px"))
        .args(args)
        .env("TMPDIR", tmp)
        .env("USER", user)
        .env_remove("SUDO_USER")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The namespaces `px lab up` printed.
fn namespaces(out: &str) -> Vec<String> {
    let line = out.lines().find(|l| l.starts_with("namespaces: ")).unwrap_or_else(|| panic!("{out}"));
    line.split([' ', ',']).filter(|w| w.starts_with("px-")).map(str::to_string).collect()
}

fn existing(names: &[String]) -> Vec<String> {
    let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    names.iter().filter(|n| list.lines().any(|l| l.split_whitespace().next() == Some(n.as_str()))).cloned().collect()
}

#[test]
fn two_users_labs_are_two_labs() {
    if !require_root_or_skip("two_users_labs_are_two_labs") {
        return;
    }
    let tmp = std::env::temp_dir().join(format!("px-lab-up-many-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    /// Takes both labs down and removes the directory on every exit path.
    struct Cleanup<'a>(&'a Path);
    impl Drop for Cleanup<'_> {
        fn drop(&mut self) {
            for user in ["alice", "bob"] {
                let _ = px(self.0, user, &["lab", "down"]);
            }
            let _ = std::fs::remove_dir_all(self.0);
        }
    }
    let _cleanup = Cleanup(&tmp);
    let (code, alice, err) = px(&tmp, "alice", &["lab", "up", "--no-gateway"]);
    assert_eq!(code, Some(0), "{alice}{err}");
    let (code, bob, err) = px(&tmp, "bob", &["lab", "up", "--no-gateway"]);
    assert_eq!(code, Some(0), "bob's lab beside alice's: {bob}{err}");
    let (a, b) = (namespaces(&alice), namespaces(&bob));
    assert_eq!((a.len(), b.len()), (3, 3), "{alice}\n{bob}");
    assert!(a.iter().all(|n| !b.contains(n)), "{a:?} {b:?}");
    // A third lab by name, and the same name twice is refused.
    let (code, _, err) = px(&tmp, "bob", &["lab", "up", "--no-gateway"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("a lab named bob is already up"), "{err}");
    // Bob's `px lab down` takes down his lab only.
    let (code, out, err) = px(&tmp, "bob", &["lab", "down"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(existing(&b).is_empty(), "bob's lab left {:?}", existing(&b));
    assert_eq!(existing(&a), a, "bob's `px lab down` removed alice's lab");
    let (code, _, err) = px(&tmp, "bob", &["lab", "down"]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("labs up: alice"), "{err}");
    let (code, out, err) = px(&tmp, "bob", &["lab", "down", "--name", "alice"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(existing(&a).is_empty());
}
