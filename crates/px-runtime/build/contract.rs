//! The Rust side of the kernel fast path's contract, generated from
//! `bpf/fast_path.h` (issue 36: one contract, no hand-kept mirror).
//!
//! The header is written in a small subset of C that this reads strictly
//! (anything else is a build error naming the line):
//! - `#define PX_NAME <integer>` → `pub const PX_NAME: u32` (u64 if larger);
//! - `enum px_name { PX_X = <integer>, ... };` → a `pub const` per entry,
//!   and when the entries are 0, 1, … and the last is `<PREFIX>MAX` (their
//!   count), `PX_NAME_NAMES`: the entries' names without the prefix, in
//!   lower case, by value;
//! - `struct px_name { <type> field[<len>]; ... };` with `__u8`, `__u16`,
//!   `__u32`, `__u64` or an earlier `struct px_…` → `#[repr(C)] pub struct
//!   PxName`.
//!
//! `//` comments before an item or after it on its line become its docs.
//! With clang at hand, clang's own layout of each struct for the BPF
//! target (`-fdump-record-layouts-simple`) becomes compile-time assertions
//! on the Rust struct's size, alignment and field offsets.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::Command;

#[derive(Debug)]
pub struct Contract {
    items: Vec<Item>,
}

#[derive(Debug)]
enum Item {
    Define { name: String, value: u64, doc: Vec<String> },
    Enum { name: String, doc: Vec<String>, entries: Vec<(String, u64, String)> },
    Struct { name: String, doc: Vec<String>, fields: Vec<Field> },
}

#[derive(Debug)]
struct Field {
    name: String,
    ty: String,
    len: Option<String>,
    doc: String,
}

fn int(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// `code // comment` → (code, comment), both trimmed.
fn split_comment(line: &str) -> (&str, &str) {
    match line.find("//") {
        Some(i) => (line[..i].trim(), line[i + 2..].trim()),
        None => (line.trim(), ""),
    }
}

fn ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

pub fn parse(text: &str) -> Result<Contract, String> {
    let mut items = Vec::new();
    let mut doc: Vec<String> = Vec::new();
    let mut lines = text.lines().enumerate();
    let err = |n: usize, what: &str, line: &str| format!("line {}: {what}: {line:?}", n + 1);
    while let Some((n, line)) = lines.next() {
        let t = line.trim();
        if t.is_empty() {
            doc.clear();
            continue;
        }
        if let Some(c) = t.strip_prefix("//") {
            doc.push(c.trim().to_string());
            continue;
        }
        let (code, comment) = split_comment(t);
        let take_doc = |doc: &mut Vec<String>| {
            let mut d = std::mem::take(doc);
            if !comment.is_empty() {
                d.push(comment.to_string());
            }
            d
        };
        if code.starts_with("#ifndef") || code.starts_with("#endif") || code.starts_with("#include") {
            doc.clear();
            continue;
        }
        if let Some(rest) = code.strip_prefix("#define") {
            let mut w = rest.split_whitespace();
            let (Some(name), value) = (w.next(), w.next()) else {
                return Err(err(n, "a #define without a name", line));
            };
            match value {
                // The include guard.
                None => doc.clear(),
                Some(v) => {
                    let value = int(v).ok_or_else(|| err(n, "a #define whose value is not an integer", line))?;
                    if w.next().is_some() || !ident(name) {
                        return Err(err(n, "a #define that is not NAME INTEGER", line));
                    }
                    items.push(Item::Define { name: name.into(), value, doc: take_doc(&mut doc) });
                }
            }
            continue;
        }
        if let Some(rest) = code.strip_prefix("enum ") {
            let name = rest.strip_suffix('{').map(str::trim).filter(|n| ident(n));
            let name = name.ok_or_else(|| err(n, "an enum that does not open as `enum name {`", line))?;
            let doc = take_doc(&mut doc);
            let mut entries = Vec::new();
            loop {
                let (n, line) = lines.next().ok_or_else(|| format!("enum {name} does not end"))?;
                let (code, comment) = split_comment(line);
                if code == "};" {
                    break;
                }
                let e = code.strip_suffix(',').unwrap_or(code);
                let (k, v) = e.split_once('=').ok_or_else(|| err(n, "an enum entry without `= value`", line))?;
                let (k, v) =
                    (k.trim(), int(v.trim()).ok_or_else(|| err(n, "an enum value that is not an integer", line))?);
                if !ident(k) {
                    return Err(err(n, "an enum entry's name", line));
                }
                entries.push((k.to_string(), v, comment.to_string()));
            }
            items.push(Item::Enum { name: name.into(), doc, entries });
            continue;
        }
        if let Some(rest) = code.strip_prefix("struct ") {
            let name = rest.strip_suffix('{').map(str::trim).filter(|n| ident(n));
            let name = name.ok_or_else(|| err(n, "a struct that does not open as `struct name {`", line))?;
            let doc = take_doc(&mut doc);
            let mut fields = Vec::new();
            loop {
                let (n, line) = lines.next().ok_or_else(|| format!("struct {name} does not end"))?;
                let (code, comment) = split_comment(line);
                if code == "};" {
                    break;
                }
                let f = code.strip_suffix(';').ok_or_else(|| err(n, "a field without `;`", line))?;
                let (ty, decl) = match f.strip_prefix("struct ") {
                    Some(r) => {
                        let (s, d) = r.split_once(' ').ok_or_else(|| err(n, "a field", line))?;
                        (format!("struct {s}"), d.trim())
                    }
                    None => {
                        let (t, d) = f.split_once(' ').ok_or_else(|| err(n, "a field", line))?;
                        (t.to_string(), d.trim())
                    }
                };
                let (fname, len) = match decl.split_once('[') {
                    Some((f, l)) => {
                        let l = l.strip_suffix(']').ok_or_else(|| err(n, "an array length", line))?;
                        (f.trim(), Some(l.trim().to_string()))
                    }
                    None => (decl, None),
                };
                if !ident(fname) || len.as_deref().is_some_and(|l| int(l).is_none() && !ident(l)) {
                    return Err(err(n, "a field's name or length", line));
                }
                fields.push(Field { name: fname.into(), ty, len, doc: comment.to_string() });
            }
            items.push(Item::Struct { name: name.into(), doc, fields });
            continue;
        }
        return Err(err(n, "not a #define, enum or struct this generator reads", line));
    }
    Ok(Contract { items })
}

/// `px_flow` → `PxFlow`.
fn camel(c_name: &str) -> String {
    c_name
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect()
}

/// The multiarch directory name: Debian keeps <asm/types.h> under
/// `/usr/include/<multiarch>`, which clang does not search for the bpf
/// target.
pub fn multiarch() -> String {
    Command::new("gcc")
        .arg("-dumpmachine")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| format!("{}-linux-gnu", std::env::consts::ARCH))
}

/// Bytes (size, alignment, field offsets) of each struct, from clang.
pub type Layouts = HashMap<String, (u64, u64, Vec<u64>)>;

/// Clang's layout of the contract's structs for the BPF target; `None`
/// without clang (there is then no program to agree with either).
pub fn clang_layouts(clang: &str, header: &str, c: &Contract) -> Option<Layouts> {
    let mut probe = format!("#include \"{}\"\n", std::fs::canonicalize(header).ok()?.display());
    for i in &c.items {
        if let Item::Struct { name, .. } = i {
            writeln!(probe, "_Static_assert(sizeof(struct {name}) > 0, \"{name}\");").unwrap();
        }
    }
    let dir = std::env::var_os("OUT_DIR")?;
    let path = std::path::Path::new(&dir).join("fast_path_layout_probe.c");
    std::fs::write(&path, probe).ok()?;
    let out = Command::new(clang)
        .args(["-target", "bpf", "-fsyntax-only", "-Xclang", "-fdump-record-layouts-simple"])
        .arg(format!("-I/usr/include/{}", multiarch()))
        .arg(&path)
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let text = String::from_utf8(out.stdout).ok()?;
    let mut layouts = Layouts::new();
    let mut name = None;
    let (mut size, mut align) = (0, 0);
    for line in text.lines().map(str::trim) {
        if let Some(n) = line.strip_prefix("Type: struct ") {
            name = Some(n.to_string());
        } else if let Some(v) = line.strip_prefix("Size:") {
            size = v.parse::<u64>().ok()? / 8;
        } else if let Some(v) = line.strip_prefix("Alignment:") {
            align = v.parse::<u64>().ok()? / 8;
        } else if let Some(v) = line.strip_prefix("FieldOffsets: [") {
            let v = v.trim_end_matches(">").trim_end_matches(']');
            let offsets =
                v.split(',').map(|o| o.trim().parse::<u64>().map(|b| b / 8)).collect::<Result<Vec<_>, _>>().ok()?;
            layouts.insert(name.take()?, (size, align, offsets));
        }
    }
    Some(layouts)
}

fn docs(out: &mut String, indent: &str, doc: &[String]) {
    for d in doc {
        // C's `a[0]` is no intra-doc link.
        let d = d.replace('[', "\\[").replace(']', "\\]");
        let _ = writeln!(out, "{indent}/// {d}");
    }
}

/// The Rust module's text.
pub fn rust(c: &Contract, layouts: Option<&Layouts>) -> String {
    let mut o = String::from(
        "// Generated by px-runtime's build.rs (build/contract.rs) from bpf/fast_path.h: edit the header.\n\n",
    );
    for item in &c.items {
        match item {
            Item::Define { name, value, doc } => {
                docs(&mut o, "", doc);
                let ty = if *value > u64::from(u32::MAX) { "u64" } else { "u32" };
                let _ = writeln!(o, "pub const {name}: {ty} = {value};\n");
            }
            Item::Enum { name, doc, entries } => {
                for (k, v, d) in entries {
                    docs(
                        &mut o,
                        "",
                        &[format!("`enum {name}`{}", if d.is_empty() { String::new() } else { format!(": {d}") })],
                    );
                    let _ = writeln!(o, "pub const {k}: u32 = {v};");
                }
                let in_order = entries.iter().enumerate().all(|(i, e)| e.1 == i as u64);
                if let (true, Some((last, count, _))) = (in_order, entries.last())
                    && let Some(prefix) = last.strip_suffix("MAX")
                    && *count as usize == entries.len() - 1
                {
                    o.push('\n');
                    docs(&mut o, "", doc);
                    let _ = writeln!(o, "///\n/// By value: the entries' names without `{prefix}`, in lower case.");
                    let _ = writeln!(o, "pub const {}_NAMES: [&str; {count}] = [", name.to_uppercase());
                    for (k, _, _) in &entries[..entries.len() - 1] {
                        let short = k.strip_prefix(prefix).unwrap_or(k).to_lowercase();
                        let _ = writeln!(o, "    \"{short}\",");
                    }
                    o.push_str("];\n");
                }
                o.push('\n');
            }
            Item::Struct { name, doc, fields } => {
                docs(&mut o, "", doc);
                let _ = writeln!(o, "///\n/// `struct {name}`.");
                let rust_name = camel(name);
                o.push_str("#[repr(C)]\n#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]\n");
                let _ = writeln!(o, "pub struct {rust_name} {{");
                for f in fields {
                    if !f.doc.is_empty() {
                        docs(&mut o, "    ", std::slice::from_ref(&f.doc));
                    }
                    let base = match f.ty.as_str() {
                        "__u8" => "u8".to_string(),
                        "__u16" => "u16".to_string(),
                        "__u32" => "u32".to_string(),
                        "__u64" => "u64".to_string(),
                        t => match t.strip_prefix("struct ") {
                            Some(s) => camel(s),
                            None => panic!("struct {name}: field {}: type {t} is not one the generator reads", f.name),
                        },
                    };
                    let ty = match &f.len {
                        Some(l) if int(l).is_some() => format!("[{base}; {l}]"),
                        Some(l) => format!("[{base}; {l} as usize]"),
                        None => base,
                    };
                    let _ = writeln!(o, "    pub {}: {ty},", f.name);
                }
                o.push_str("}\n\n");
                if let Some((size, align, offsets)) = layouts.and_then(|l| l.get(name)) {
                    assert_eq!(offsets.len(), fields.len(), "clang's fields of struct {name}");
                    let _ = writeln!(o, "// The layout clang gives `struct {name}` for the BPF target.");
                    let _ = writeln!(o, "const _: () = assert!(core::mem::size_of::<{rust_name}>() == {size});");
                    let _ = writeln!(o, "const _: () = assert!(core::mem::align_of::<{rust_name}>() == {align});");
                    for (f, off) in fields.iter().zip(offsets) {
                        let _ = writeln!(
                            o,
                            "const _: () = assert!(core::mem::offset_of!({rust_name}, {}) == {off});",
                            f.name
                        );
                    }
                    o.push('\n');
                }
            }
        }
    }
    o
}
