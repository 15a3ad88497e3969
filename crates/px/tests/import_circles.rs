//! Import circles between files (issue 36): file A names something of file
//! B and B names something of A, directly or through other files, in
//! px-gateway, px-runtime, px-lab and px. Counted: `use` lines (braces
//! expanded) and inline `crate::`/`super::`/`self::` paths in code; not
//! counted: comments, `mod` declarations, the tests at the end of a file
//! (`#[cfg(test)] mod …`), and the `pub use` re-exports of `lib.rs` and
//! `mod.rs` files (a facade, followed to the file that defines the name). `scripts/import-circles` prints them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const CRATES: [&str; 4] = ["px-gateway", "px-runtime", "px-lab", "px"];

/// Circles still to be removed, each as its files sorted (relative to
/// `crates/`). An entry is removed with the circle: the test fails both
/// for a new circle and for a listed one that is gone.
const KNOWN: &[&[&str]] = &[];

/// One crate's files by module path (`["engine", "inbound"]`).
struct Crate {
    src: PathBuf,
    files: BTreeMap<Vec<String>, PathBuf>,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut files = BTreeMap::new();
        let mut stack = vec![src.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    let rel = p.strip_prefix(src).unwrap().with_extension("");
                    let mut module: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
                    if matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                        module.pop();
                    }
                    files.insert(module, p);
                }
            }
        }
        Crate { src: src.to_path_buf(), files }
    }

    /// The file a path from `module` names: the deepest module it goes
    /// through, re-exports followed.
    fn resolve(&self, module: &[String], path: &[String], depth: usize) -> Option<PathBuf> {
        let mut at: Vec<String> = match path.first().map(String::as_str) {
            Some("crate") => Vec::new(),
            Some("self") => module.to_vec(),
            Some("super") => module.to_vec(),
            _ => return None,
        };
        let mut rest = &path[1..];
        if path[0] == "super" {
            at.pop();
            while rest.first().is_some_and(|s| s == "super") {
                at.pop();
                rest = &rest[1..];
            }
        }
        for seg in rest {
            let mut next = at.clone();
            next.push(seg.clone());
            if self.files.contains_key(&next) {
                at = next;
            } else {
                // An item of `at`: defined there, or re-exported from elsewhere.
                if depth < 8
                    && let Some(target) = self.reexport(&at, seg, depth)
                {
                    return Some(target);
                }
                break;
            }
        }
        self.files.get(&at).cloned()
    }

    /// Where `name`, re-exported by `module`'s `pub use`, is defined.
    fn reexport(&self, module: &[String], name: &str, depth: usize) -> Option<PathBuf> {
        let text = code(&std::fs::read_to_string(self.files.get(module)?).ok()?);
        for stmt in statements(&text).into_iter().filter(|s| s.public) {
            for p in &stmt.paths {
                if p.last().is_some_and(|l| l == name || l == "*") {
                    let p = self.anchor(module, p);
                    if let Some(t) = self.resolve(module, &p, depth + 1) {
                        return Some(t);
                    }
                }
            }
        }
        None
    }

    /// A `use` path made absolute: a first segment that is a child module
    /// of `module` is read as `self::`.
    fn anchor(&self, module: &[String], p: &[String]) -> Vec<String> {
        let mut child = module.to_vec();
        child.push(p[0].clone());
        if self.files.contains_key(&child) {
            std::iter::once("self".to_string()).chain(p.iter().cloned()).collect()
        } else {
            p.to_vec()
        }
    }

    /// Files each file names.
    fn edges(&self) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
        let mut out = BTreeMap::new();
        for (module, file) in &self.files {
            let text = code(&std::fs::read_to_string(file).unwrap());
            let mut to = BTreeSet::new();
            let mut add = |p: &[String]| {
                if let Some(t) = self.resolve(module, p, 0)
                    && &t != file
                {
                    to.insert(t);
                }
            };
            // A module's or the crate's own `pub use` is its facade; anywhere
            // else a `pub use` is also a use.
            let facade = matches!(file.file_name().and_then(|n| n.to_str()), Some("mod.rs" | "lib.rs" | "main.rs"));
            for stmt in statements(&text).iter().filter(|s| !(s.public && facade)) {
                for p in &stmt.paths {
                    add(&self.anchor(module, p));
                }
            }
            for p in inline_paths(&strip_uses(&text)) {
                add(&p);
            }
            out.insert(file.clone(), to);
        }
        out
    }
}

/// The text without comments and without the tests at its end.
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") && lines.peek().is_some_and(|n| n.trim_start().starts_with("mod ")) {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        let l = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        out.push_str(l);
        out.push('\n');
    }
    out
}

struct Use {
    public: bool,
    paths: Vec<Vec<String>>,
}

/// The `use` statements, braces expanded.
fn statements(text: &str) -> Vec<Use> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = find_word(rest, "use") {
        let before = rest[..i].trim_end();
        let public = before.ends_with("pub") || before.ends_with(')') && before.contains("pub(");
        let Some(end) = rest[i..].find(';') else { break };
        // Spaces only where they separate words (`X as Y`).
        let words: Vec<&str> = rest[i + 3..i + end].split_whitespace().collect();
        let mut body = String::new();
        for w in words {
            let glue = body.ends_with([':', '{', ',']) || w.starts_with([':', '{', '}', ',']);
            if !body.is_empty() && !glue {
                body.push(' ');
            }
            body.push_str(w);
        }
        let mut paths = Vec::new();
        expand("", &body, &mut paths);
        out.push(Use { public, paths });
        rest = &rest[i + end + 1..];
    }
    out
}

/// `use` at a word boundary, at the start of an item.
fn find_word(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find(word) {
        let at = from + i;
        let before = text[..at].chars().last();
        let after = text[at + word.len()..].chars().next();
        let item_start = text[..at].trim_end().chars().last().is_none_or(|c| matches!(c, ';' | '}' | '{' | ']' | ')'))
            || text[..at].trim_end().ends_with("pub");
        if before.is_none_or(|c| !c.is_alphanumeric() && c != '_') && after == Some(' ') && item_start {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

fn expand(prefix: &str, body: &str, out: &mut Vec<Vec<String>>) {
    match body.find('{') {
        None => {
            let full = format!("{prefix}{body}");
            let full = full.split(" as ").next().unwrap_or(&full).trim().to_string();
            let segs: Vec<String> = full.split("::").filter(|s| !s.is_empty()).map(str::to_string).collect();
            if !segs.is_empty() {
                out.push(segs);
            }
        }
        Some(open) => {
            let head = &body[..open];
            let inner = &body[open + 1..body.rfind('}').unwrap_or(body.len())];
            let mut level = 0;
            let mut start = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => level += 1,
                    '}' => level -= 1,
                    ',' if level == 0 => {
                        expand(&format!("{prefix}{head}"), &inner[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            expand(&format!("{prefix}{head}"), &inner[start..], out);
        }
    }
}

fn strip_uses(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = find_word(rest, "use") {
        out.push_str(&rest[..i]);
        match rest[i..].find(';') {
            Some(end) => rest = &rest[i + end + 1..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

/// `crate::a::b`, `super::x`, `self::y` in code.
fn inline_paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = text[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_' || bytes[at - 1] == b':') {
                continue;
            }
            let end = text[at..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(text.len(), |e| at + e);
            out.push(text[at..end].split("::").filter(|s| !s.is_empty()).map(str::to_string).collect());
        }
    }
    out
}

/// Strongly connected components of two or more files (Tarjan).
fn circles(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct T<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on: BTreeSet<&'a PathBuf>,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a PathBuf) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.edges.get(v).into_iter().flatten() {
            if !t.index.contains_key(w) {
                visit(t, w);
                let l = t.low[w].min(t.low[v]);
                t.low.insert(v, l);
            } else if t.on.contains(w) {
                let l = t.index[w].min(t.low[v]);
                t.low.insert(v, l);
            }
        }
        if t.low[v] == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                scc.push(w.clone());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                t.out.push(scc);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Every circle in the four crates, files relative to `crates/`.
fn all_circles() -> Vec<Vec<String>> {
    let root = crates_dir();
    let mut out = Vec::new();
    for name in CRATES {
        let c = Crate::read(&root.join(name).join("src"));
        assert!(!c.files.is_empty(), "{}", c.src.display());
        for scc in circles(&c.edges()) {
            out.push(scc.iter().map(|p| p.strip_prefix(&root).unwrap().display().to_string()).collect());
        }
    }
    out.sort();
    out
}

#[test]
fn no_import_circles_between_files() {
    let found = all_circles();
    for c in &found {
        println!("import circle: {}", c.join(" <-> "));
    }
    let known: Vec<Vec<String>> = KNOWN.iter().map(|c| c.iter().map(|s| s.to_string()).collect()).collect();
    assert_eq!(
        found, known,
        "import circles (left) differ from the known ones (right): remove a new one, or the known one that is gone from KNOWN"
    );
}

/// The check sees what it must: a circle through an inline `super::`
/// path and one through a grouped `use`, none through a re-export or a
/// comment, none in tests.
#[test]
fn the_check_counts_inline_paths_and_braced_uses() {
    let dir = std::env::temp_dir().join(format!("px-circles-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("g")).unwrap();
    let w = |p: &str, t: &str| std::fs::write(src.join(p), t).unwrap();
    w("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\nmod e;\nmod g;\nmod h;\nmod i;\npub use a::A;\n");
    w("a.rs", "pub struct A { x: Option<super::b::B> }\n");
    w("b.rs", "use crate::{c::C, a::{A as Alias}};\npub struct B;\n");
    w("c.rs", "pub struct C;\n");
    w("d.rs", "use crate::e::E;\npub struct D;\n");
    w("e.rs", "pub struct E;\n#[cfg(test)]\nmod tests {\n    use crate::d::D;\n}\n");
    w("g/mod.rs", "mod x;\npub use x::Y;\npub fn f() {}\n");
    w("g/x.rs", "pub struct Y;\nfn g() { super::f() }\n");
    w("h.rs", "use crate::i::I;\npub struct H;\n");
    w("i.rs", "pub struct I; // crate::h::H\n// crate::h::H\nfn f() -> crate::A { todo!() }\n");
    let c = Crate::read(&src);
    let found: Vec<Vec<String>> = circles(&c.edges())
        .iter()
        .map(|s| s.iter().map(|p| p.strip_prefix(&src).unwrap().display().to_string()).collect())
        .collect();
    // a -> b (inline super::), b -> a (braced use): a circle. e -> d only
    // in its tests, g/mod.rs -> x only by `pub use`, i -> h only in
    // comments: none. i -> a goes through lib.rs's re-export to a.rs.
    assert_eq!(found, vec![vec!["a.rs".to_string(), "b.rs".to_string()]]);
    let i_to = &c.edges()[&src.join("i.rs")];
    let seen = (i_to.contains(&src.join("a.rs")), i_to.contains(&src.join("lib.rs")));
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(seen, (true, false), "{i_to:?}");
}
