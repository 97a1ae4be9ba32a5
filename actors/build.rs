//! Embeds the workspace's built-in skills (the top-level `skills/` folder)
//! into the crate: flytod serves them from its binary, read-only, and never
//! copies them out. Generates `$OUT_DIR/builtin_skills.rs`, a sorted list
//! of (path relative to `skills/`, bytes).

use std::path::{Path, PathBuf};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../skills");
    // A directory here makes cargo re-run this script when anything under it changes.
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    if root.is_dir() {
        collect(&root, &root, &mut files);
    }
    files.sort();
    let mut out = String::from("pub static FILES: &[(&str, &[u8])] = &[\n");
    for (rel, abs) in &files {
        out.push_str(&format!("    ({rel:?}, include_bytes!({abs:?})),\n"));
    }
    out.push_str("];\n");
    let dest =
        PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()).join("builtin_skills.rs");
    if let Err(e) = std::fs::write(&dest, out) {
        panic!("cannot write {}: {e}", dest.display());
    }
}

fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            collect(root, &path, files);
        } else if let Ok(rel) = path.strip_prefix(root) {
            let abs = std::fs::canonicalize(&path).unwrap_or(path.clone());
            files.push((
                rel.to_string_lossy().into_owned(),
                abs.to_string_lossy().into_owned(),
            ));
        }
    }
}
