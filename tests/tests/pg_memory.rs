//! Memory on the shared store, across two real flytod: entries are rows,
//! so what one node's memory holds every node's does; people read and
//! edit it as a folder through `memory_export` / `memory_import`, which
//! checks every file before it changes anything and sends what a folder
//! no longer holds to the trash, restorable; concurrent changes from two
//! nodes both land; a node's folder with entries from before the shared
//! store is adopted, and a file edited by hand in a node's folder is
//! copied aside, never silently replaced.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::pg::TestPostgres;
use flyto_tests::{DEADLINE, TestEnv, wait_until};
use serde_json::Value;
use std::path::{Path, PathBuf};

const DB: &str = "memory";

fn node(pg: &TestPostgres) -> TestEnv {
    TestEnv::new(&format!(
        "[daemon]\nshutdown_grace = \"1s\"\n[store]\nbackend = \"postgres\"\nurl = \"{}\"\n",
        pg.url_for(DB)
    ))
}

fn entry(name: &str, kind: &str, body: &str) -> String {
    format!(
        "---\nname: {name}\ndescription: about {name}\ntype: {kind}\ncreated: 2026-01-01T00:00:00Z\nupdated: 2026-01-01T00:00:00Z\nsource: user\nversion: 1\n---\n{body}\n"
    )
}

fn ctl_ok(env: &TestEnv, args: &[&str]) -> String {
    let out = env.ctl(args);
    assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
    out.stdout
}

/// (scope, name, body) of every entry `memory_list` shows for `project`.
fn listed(env: &TestEnv, project: &Path) -> Vec<(String, String)> {
    let text = ctl_ok(
        env,
        &[
            "memory_list",
            "--json",
            "--project",
            project.to_str().unwrap(),
        ],
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    let mut out: Vec<(String, String)> = v
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| {
            let scope = s["scope"].as_str().unwrap().to_string();
            s["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |e| (scope.clone(), e["name"].as_str().unwrap().to_string()))
                .collect::<Vec<_>>()
        })
        .collect();
    out.sort();
    out
}

/// The project's id, as its folder is named.
fn project_id(env: &TestEnv, project: &Path) -> String {
    let out = ctl_ok(
        env,
        &["memory_path", "--project", project.to_str().unwrap()],
    );
    let line = out.lines().find(|l| l.starts_with("project:")).unwrap();
    let path = PathBuf::from(line.trim_start_matches("project:").trim());
    path.parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn memory_is_shared_by_every_node_and_edited_as_a_folder() {
    let pg = TestPostgres::start();
    pg.create_database(DB);
    let (a, b) = (node(&pg), node(&pg));
    let _da = a.start();
    let _db = b.start();
    let project = a.work.join("proj");
    std::fs::create_dir_all(&project).unwrap();
    let id = project_id(&a, &project);
    assert_eq!(id, project_id(&b, &project));

    // Written through a on a folder, read on b.
    let folder = a.tmp.path().join("edit");
    write(
        &folder,
        "user/tabs.md",
        &entry("tabs", "user", "Prefers tabs."),
    );
    write(
        &folder,
        &format!("projects/{id}/build.md"),
        &entry("build", "project", "Build with make."),
    );
    let said = ctl_ok(&a, &["memory_import", folder.to_str().unwrap()]);
    assert!(said.contains("2 written"), "{said}");
    let expected = vec![
        ("project".to_string(), "build".to_string()),
        ("user".to_string(), "tabs".to_string()),
    ];
    assert_eq!(listed(&b, &project), expected);
    let shown = ctl_ok(
        &b,
        &[
            "memory_show",
            "build",
            "--project",
            project.to_str().unwrap(),
        ],
    );
    assert!(shown.contains("Build with make."), "{shown}");

    // Exported on b, edited by a person, imported on b, seen on a: the
    // changed entry is written, the removed one goes to the trash.
    let out = b.tmp.path().join("export");
    let said = ctl_ok(&b, &["memory_export", out.to_str().unwrap()]);
    assert!(said.contains("exported 2 entries"), "{said}");
    let exported = std::fs::read_to_string(out.join(format!("projects/{id}/build.md"))).unwrap();
    assert!(exported.contains("Build with make."), "{exported}");
    write(
        &out,
        &format!("projects/{id}/build.md"),
        &exported.replace("Build with make.", "Build with cargo."),
    );
    std::fs::remove_file(out.join("user/tabs.md")).unwrap();
    let said = ctl_ok(&b, &["memory_import", out.to_str().unwrap()]);
    assert!(
        said.contains("1 written") && said.contains("1 forgotten"),
        "{said}"
    );
    assert_eq!(
        listed(&a, &project),
        [("project".to_string(), "build".to_string())]
    );
    let shown = ctl_ok(
        &a,
        &[
            "memory_show",
            "build",
            "--project",
            project.to_str().unwrap(),
        ],
    );
    assert!(shown.contains("Build with cargo."), "{shown}");
    // No dream ran on this node: undo says where a run is undone.
    let undo = b.ctl(&["dream_undo", "--project", project.to_str().unwrap()]);
    assert_eq!(undo.code, 4, "{undo:?}");
    assert!(
        undo.stderr.contains("nothing to undo")
            && undo.stderr.contains("undone on the node that ran it"),
        "{}",
        undo.stderr
    );
    // What the folder dropped can be brought back, from any node.
    ctl_ok(
        &a,
        &[
            "memory_restore",
            "tabs",
            "--project",
            project.to_str().unwrap(),
        ],
    );
    assert_eq!(listed(&b, &project), expected);

    // Importing the same folder again changes nothing.
    let again = b.tmp.path().join("again");
    ctl_ok(&b, &["memory_export", again.to_str().unwrap()]);
    let said = ctl_ok(&a, &["memory_import", again.to_str().unwrap()]);
    assert!(
        said.contains("0 written") && said.contains("2 unchanged"),
        "{said}"
    );

    // A folder with a broken file changes nothing, and says which file
    // and line.
    write(&again, "user/new.md", &entry("new", "user", "fresh"));
    write(&again, "user/broken.md", "---\nname: broken\n");
    let refused = a.ctl(&["memory_import", again.to_str().unwrap()]);
    assert_ne!(refused.code, 0);
    assert!(
        refused.stderr.contains("user/broken.md")
            && refused.stderr.contains("nothing was imported"),
        "{}",
        refused.stderr
    );
    assert_eq!(listed(&b, &project), expected);
    // An export refuses a folder that is not empty.
    let refused = a.ctl(&["memory_export", again.to_str().unwrap()]);
    assert_ne!(refused.code, 0);
    assert!(refused.stderr.contains("not empty"), "{}", refused.stderr);
}

#[test]
fn a_nodes_own_memory_is_adopted_and_a_hand_edit_is_kept_aside() {
    let pg = TestPostgres::start();
    pg.create_database(DB);
    // a has memory from before the shared store.
    let a = node(&pg);
    write(
        &a.state,
        "memory/old.md",
        &entry("old", "user", "From before."),
    );
    let b = node(&pg);
    let _da = a.start();
    let _db = b.start();
    let project = a.work.join("p");
    std::fs::create_dir_all(&project).unwrap();
    assert_eq!(
        listed(&a, &project),
        [("user".to_string(), "old".to_string())]
    );
    assert_eq!(
        listed(&b, &project),
        [("user".to_string(), "old".to_string())],
        "a's memory was not adopted into the shared store"
    );

    // Someone edits b's working copy by hand, then the shared memory
    // changes on a: b's copy follows the database, and the edit is kept
    // aside, not lost.
    let b_file = b.state.join("memory/old.md");
    std::fs::write(&b_file, entry("old", "user", "Edited by hand on b.")).unwrap();
    let folder = a.tmp.path().join("in");
    write(
        &folder,
        "user/old.md",
        &entry("old", "user", "Changed on a."),
    );
    ctl_ok(&a, &["memory_import", folder.to_str().unwrap()]);
    let shown = ctl_ok(
        &b,
        &["memory_show", "old", "--project", project.to_str().unwrap()],
    );
    assert!(shown.contains("Changed on a."), "{shown}");
    let aside = b.state.join("memory.local-edits");
    let kept = wait_until("the hand edit is kept aside", DEADLINE, || {
        let dir = std::fs::read_dir(&aside).ok()?.next()?.ok()?.path();
        std::fs::read_to_string(dir.join("old.md")).ok()
    });
    assert!(kept.contains("Edited by hand on b."), "{kept}");
}
