//! The floors of this crate's rooms, checked: a room may use rooms on the
//! floors below its own and never one on its floor or above, so no cycle
//! can form between rooms. ARCHITECTURE.md draws the same table.

/// Bottom up. A room is a folder or a file directly under `src/`.
const FLOORS: &[&[&str]] = &[
    &["kernel"],
    &[
        "clock",
        "durable",
        "failpoint",
        "supervisor",
        "store",
        "llm",
    ],
    &["exec"],
    &["tools"],
    &["subrun", "hooks", "skills", "mcp", "compaction"],
    &["memory"],
    &["session"],
    &["plans", "dream", "channels"],
    &["jobs"],
];

fn floor(room: &str) -> Option<usize> {
    FLOORS.iter().position(|f| f.contains(&room))
}

/// Every `crate::<room>` a file names outside comments.
fn rooms_used(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
        }
    }
    out
}

fn sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn rooms_use_only_rooms_on_lower_floors() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    assert!(
        files.len() > 50,
        "found only {} sources under {src:?}",
        files.len()
    );
    let mut wrong = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap_or(&file);
        let first = rel
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().to_string());
        let Some(first) = first else { continue };
        let room = first.trim_end_matches(".rs").to_string();
        if room == "lib" || room == "floors" {
            continue;
        }
        let Some(mine) = floor(&room) else {
            wrong.push(format!(
                "{room}: not on any floor; add it to FLOORS in floors.rs and ARCHITECTURE.md"
            ));
            continue;
        };
        let code = std::fs::read_to_string(&file).unwrap_or_default();
        for other in rooms_used(&code) {
            if other == room {
                continue;
            }
            match floor(&other) {
                Some(theirs) if theirs < mine => {}
                Some(_) => wrong.push(format!(
                    "{}: room `{room}` (floor {mine}) uses `{other}` on its floor or above",
                    rel.display()
                )),
                None => {}
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "rooms out of their floors:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn a_use_of_a_higher_room_is_seen() {
    let code = "use crate::kernel::Reject;\n// crate::jobs in a comment\nlet x = crate::session::ask(a, crate::plans::X);";
    assert_eq!(rooms_used(code), ["kernel", "session", "plans"]);
}
