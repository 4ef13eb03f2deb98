//! The import graph, checked mechanically (issue 25): no circles between the modules of either
//! crate, the server's layers run one way (frontends → server facade → repository → engine),
//! and the engine depends on no protocol or model library.
//!
//! An edge is a `crate::…` path in a module's code (tests excluded), resolved to the deepest
//! module file it names; `super::` and relative paths stay inside one module's own tree and
//! are its business.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source folder").flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `a/b.rs` → `a::b`, `a/mod.rs` → `a`, `lib.rs` / `main.rs` → `` (the crate root).
fn module_of(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).expect("under the root").with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib" || p == "main") {
        parts.pop();
    }
    parts.join("::")
}

/// The code without its `#[cfg(test)] mod tests` (last in a file, by the house style) and
/// without line comments.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
    &s[..end]
}

/// The module paths named after each `crate::` in `code`: `crate::a::b::C` gives `a::b::C`,
/// `crate::a::{b::C, d}` gives `a::b::C` and `a::d`.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        if i > 0 && code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `tritium_actors::` is not this crate
        }
        let mut rest = &code[i + "crate::".len()..];
        let mut prefix = Vec::new();
        loop {
            let id = ident_at(rest);
            if id.is_empty() {
                break;
            }
            prefix.push(id.to_string());
            rest = &rest[id.len()..];
            if !rest.starts_with("::") {
                break;
            }
            rest = &rest[2..];
        }
        if rest.starts_with('{') {
            let group = &rest[1..rest.find('}').unwrap_or(rest.len())];
            for item in group.split(',') {
                let mut path = prefix.clone();
                path.extend(item.trim().split("::").map(|s| ident_at(s.trim()).to_string()).filter(|s| !s.is_empty()));
                out.push(path);
            }
        } else {
            out.push(prefix);
        }
    }
    out
}

fn graph(root: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(root, f)).collect();
    let mut g = Graph::new();
    for file in &files {
        let from = module_of(root, file);
        let code = code_of(&std::fs::read_to_string(file).expect("read a source file"));
        let edges = g.entry(from.clone()).or_default();
        for path in crate_paths(&code) {
            // The deepest module the path names.
            let to = (1..=path.len()).rev().map(|n| path[..n].join("::")).find(|m| modules.contains(m));
            if let Some(to) = to {
                if to != from {
                    edges.insert(to);
                }
            }
        }
    }
    g
}

/// A circle, if the graph has one: the modules along it.
fn circle(g: &Graph) -> Option<Vec<String>> {
    fn visit(g: &Graph, m: &str, state: &mut BTreeMap<String, u8>, stack: &mut Vec<String>) -> Option<Vec<String>> {
        state.insert(m.to_string(), 1);
        stack.push(m.to_string());
        for next in g.get(m).into_iter().flatten() {
            match state.get(next.as_str()) {
                Some(1) => {
                    let start = stack.iter().position(|s| s == next).expect("on the stack");
                    let mut c = stack[start..].to_vec();
                    c.push(next.clone());
                    return Some(c);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(g, next, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in g.keys() {
        if !state.contains_key(m) {
            if let Some(c) = visit(g, m, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_engine_has_no_import_circle() {
    let g = graph(&manifest_dir().join("actors/src"));
    assert!(g.contains_key("scheduler") && g.contains_key("protocol"), "{:?}", g.keys());
    assert_eq!(circle(&g), None, "actors/src imports in a circle");
}

#[test]
fn the_server_has_no_import_circle() {
    let g = graph(&manifest_dir().join("src"));
    assert!(g.contains_key("repository") && g.contains_key("server"), "{:?}", g.keys());
    assert_eq!(circle(&g), None, "src imports in a circle");
}

/// Each top-level module of `src/` may import only modules of a lower layer.
#[test]
fn the_servers_layers_run_one_way() {
    let layer = |top: &str| match top {
        "proto" | "observe" | "shm" => 0,
        "config" => 1,
        "backends" | "ensemble" => 2,
        "repository" => 3,
        "drain" => 4,
        "server" => 5,
        "frontends" | "metrics" | "cli" => 6,
        "fuzzing" => 7,
        other => panic!("module '{other}' has no layer in tests/import_graph.rs: give it one"),
    };
    let top = |m: &str| m.split("::").next().unwrap_or_default().to_string();
    let g = graph(&manifest_dir().join("src"));
    let mut wrong = Vec::new();
    for (from, tos) in &g {
        if from.is_empty() {
            continue; // main.rs wires the layers together
        }
        for to in tos {
            let (a, b) = (top(from), top(to));
            if a != b && layer(&a) <= layer(&b) {
                wrong.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(wrong.is_empty(), "imports against the layers: {wrong:?}");
}

#[test]
fn the_engine_depends_on_no_protocol_or_model_library() {
    let manifest = std::fs::read_to_string(manifest_dir().join("actors/Cargo.toml")).expect("actors/Cargo.toml");
    for lib in ["actix-web", "tonic", "prost", "ort", "tokenizers", "ndarray", "serde_json", "metrics", "clap"] {
        assert!(
            !manifest
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{lib} "))
                    || l.trim_start().starts_with(&format!("{lib}="))),
            "tritium-actors depends on {lib}"
        );
    }
}

#[test]
fn the_checker_sees_paths_and_groups() {
    let code = "use crate::a::{b::C, d};\nfn f() { crate::e::F::new(); tritium_actors::x(); }\n// crate::g::H\n";
    assert_eq!(
        crate_paths(&code_of(code)),
        vec![
            vec!["a".to_string(), "b".into(), "C".into()],
            vec!["a".into(), "d".into()],
            vec!["e".into(), "F".into(), "new".into()],
        ]
    );
    let mut g = Graph::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("a".into());
    assert_eq!(circle(&g), Some(vec!["a".into(), "b".into(), "a".into()]));
}
