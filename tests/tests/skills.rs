//! Skills through the real binaries: precedence and shadowing across the
//! user's and the project's folders in `skill_list`, a broken skill
//! reported by `skill_list --all` and counted in the catalogue the model
//! receives, `load_skill` through a scripted tool call (body, resources,
//! an escape refused), and `skill_reload` reaching the next model call.

// Test helpers panic to fail the test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use flyto_tests::TestEnv;
use flyto_tests::fake_llm::{FakeLlm, Reply};
use flyto_tests::sessions_support::{
    done, new_session, request_tool_result, send, setup, system_prompt, workdir,
};
use serde_json::{Value, json};
use std::path::Path;

fn write_skill(root: &Path, name: &str, description: &str) {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        format!(
            "---\nname: {name}\ndescription: {description}\n---\n# {name}\nThe steps of {name}.\n"
        ),
    )
    .unwrap();
}

/// The user's skill folder: `skills/` next to the config file.
fn user_skills(env: &TestEnv) -> std::path::PathBuf {
    env.config.parent().unwrap().join("skills")
}

#[test]
fn skill_list_shows_which_source_won_and_what_it_shadowed() {
    let env = TestEnv::new("");
    let user = user_skills(&env);
    let project = env.work.join("app");
    write_skill(&user, "flyto-plans", "The user's own plan procedure.");
    write_skill(&user, "deploy", "User deploy.");
    write_skill(&project.join(".flyto/skills"), "deploy", "Flyto deploy.");
    write_skill(&project.join(".agents/skills"), "deploy", "Agents deploy.");
    // A name that differs from its folder.
    let bad = project.join(".flyto/skills/release");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(
        bad.join("SKILL.md"),
        "---\nname: relase\ndescription: typo\n---\n",
    )
    .unwrap();
    let _daemon = env.start();
    let dir = project.display().to_string();

    let out = env.ctl(&["skill_list", "--project", &dir]);
    assert_eq!(out.code, 0, "{out:?}");
    let agents = project.join(".agents/skills/deploy").display().to_string();
    assert!(
        out.stdout
            .contains(&format!("deploy  (project) {agents}\n    Agents deploy.")),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains(&format!(
        "flyto-plans  (user) {}",
        user.join("flyto-plans").display()
    )));
    assert!(
        out.stdout
            .contains("flyto-memory  (builtin) <builtin>/flyto-memory")
    );
    assert!(out.stdout.contains("1 skill folder could not be loaded"));
    assert!(!out.stdout.contains("shadows"), "{}", out.stdout);

    let out = env.ctl(&["skill_list", "--all", "--project", &dir]);
    assert_eq!(out.code, 0, "{out:?}");
    let flyto = project.join(".flyto/skills/deploy").display().to_string();
    let user_deploy = user.join("deploy").display().to_string();
    assert!(
        out.stdout.contains(&format!(
            "    Agents deploy.\n    shadows {flyto}\n    shadows {user_deploy}\n"
        )),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("    shadows <builtin>/flyto-plans\n"));
    assert!(
        out.stdout.contains(&format!(
            "broken: {}:2: name `relase` differs from its folder `release`",
            bad.join("SKILL.md").display()
        )),
        "{}",
        out.stdout
    );

    let out = env.ctl(&["skill_list", "--all", "--json", "--project", &dir]);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let deploy = v["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "deploy")
        .unwrap();
    assert_eq!(deploy["source"], "project");
    assert_eq!(deploy["shadowed"], json!([flyto, user_deploy]));
    assert_eq!(v["broken"][0]["line"], 2);

    let out = env.ctl(&["skill_show", "deploy", "--project", &dir]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout
            .contains(&format!("source:      project {agents}"))
    );
    assert!(out.stdout.contains(&format!("shadows:     {user_deploy}")));
    assert!(out.stdout.contains("The steps of deploy."));

    // Outside the project only the built-ins and the user's remain.
    let out = env.ctl(&[
        "skill_list",
        "--all",
        "--project",
        &env.work.display().to_string(),
    ]);
    assert!(out.stdout.contains("deploy  (user)"), "{}", out.stdout);
    assert!(!out.stdout.contains("broken:"), "{}", out.stdout);

    let out = env.ctl(&["skill_show", "nope", "--project", &dir]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.stderr.contains("no skill named `nope`"), "{out:?}");
}

#[test]
fn the_model_gets_the_catalogue_and_the_count_of_broken_skills_and_reload_reaches_the_next_call() {
    let fake = FakeLlm::start(vec![Reply::text("first"), Reply::text("second")]);
    let env = TestEnv::new(&format!(
        "{}{}",
        flyto_tests::sessions_support::BASE,
        fake.config()
    ));
    let user = user_skills(&env);
    write_skill(&user, "deploy", "Use when deploying the app to staging.");
    let broken = user.join("empty-desc");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(
        broken.join("SKILL.md"),
        "---\nname: empty-desc\ndescription: \"\"\n---\n",
    )
    .unwrap();
    let _daemon = flyto_tests::sessions_support::start(&env);
    let dir = workdir(&env, "proj");
    let id = new_session(&env, &dir);

    assert!(done(&send(&env, &id, "hello")));
    let requests = fake.requests();
    let system = system_prompt(&requests[0]);
    assert!(
        system.contains("- deploy: Use when deploying the app to staging.\n"),
        "{system}"
    );
    assert!(system.contains("- flyto-plans: "), "{system}");
    assert!(
        system.contains("1 skill could not be loaded (a broken SKILL.md)"),
        "{system}"
    );
    let tools = requests[0]["tools"].as_array().unwrap();
    let load = tools
        .iter()
        .find(|t| t["function"]["name"] == "load_skill")
        .expect("load_skill offered");
    let names = &load["function"]["parameters"]["properties"]["name"]["enum"];
    assert_eq!(
        names,
        &json!([
            "deploy",
            "flyto-memory",
            "flyto-plans",
            "flyto-schedule",
            "skill-authoring"
        ])
    );

    let out = env.ctl(&[
        "skill_list",
        "--all",
        "--project",
        &dir.display().to_string(),
    ]);
    assert!(
        out.stdout.contains(&format!(
            "broken: {}:3: the description is empty",
            broken.join("SKILL.md").display()
        )),
        "{}",
        out.stdout
    );

    write_skill(&user, "rollback", "Use when a deploy must be undone.");
    let out = env.ctl(&["skill_reload", "--project", &dir.display().to_string()]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(
        out.stdout
            .contains("skills reloaded: 6 skills, 1 could not be loaded"),
        "{}",
        out.stdout
    );
    assert!(done(&send(&env, &id, "again")));
    let requests = fake.requests();
    assert!(
        system_prompt(&requests[1]).contains("- rollback: Use when a deploy must be undone.\n"),
        "{}",
        system_prompt(&requests[1])
    );
    assert!(!system.contains("rollback"));
}

#[test]
fn load_skill_returns_the_body_and_resources_and_refuses_to_leave_the_folder() {
    let (fake, env, _daemon) = setup(vec![
        Reply::tool_calls(vec![
            (
                "c_body",
                "load_skill",
                json!({"name": "deploy"}).to_string(),
            ),
            (
                "c_ref",
                "load_skill",
                json!({"name": "deploy", "path": "references/hosts.md"}).to_string(),
            ),
            (
                "c_up",
                "load_skill",
                json!({"name": "deploy", "path": "../../outside.txt"}).to_string(),
            ),
            (
                "c_link",
                "load_skill",
                json!({"name": "deploy", "path": "references/link"}).to_string(),
            ),
            (
                "c_builtin",
                "load_skill",
                json!({"name": "skill-authoring", "path": "references/checklist.md"}).to_string(),
            ),
        ]),
        Reply::text("loaded"),
    ]);
    let dir = workdir(&env, "proj");
    let skills = dir.join(".flyto/skills");
    write_skill(&skills, "deploy", "Use when deploying.");
    let refs = skills.join("deploy/references");
    std::fs::create_dir_all(&refs).unwrap();
    std::fs::write(refs.join("hosts.md"), "staging: app-1\n").unwrap();
    std::fs::write(skills.join("outside.txt"), "NOT FOR THE MODEL\n").unwrap();
    std::os::unix::fs::symlink(skills.join("outside.txt"), refs.join("link")).unwrap();
    let id = new_session(&env, &dir);

    assert!(done(&send(&env, &id, "deploy it")));
    let requests = fake.requests();
    let last = &requests[1];
    let body = request_tool_result(last, "c_body");
    assert!(body.contains("Skill `deploy` (project skill)"), "{body}");
    let folder = std::fs::canonicalize(skills.join("deploy")).unwrap();
    assert!(
        body.contains(&format!("Folder: {}", folder.display())),
        "{body}"
    );
    assert!(body.contains("- references/hosts.md\n"), "{body}");
    assert!(
        !body.contains("references/link"),
        "the symlink out is not listed: {body}"
    );
    assert!(body.contains("The steps of deploy."), "{body}");
    assert_eq!(request_tool_result(last, "c_ref"), "staging: app-1\n");
    for call in ["c_up", "c_link"] {
        let refused = request_tool_result(last, call);
        assert!(!refused.contains("NOT FOR THE MODEL"), "{call}: {refused}");
        assert!(refused.contains("skill's folder"), "{call}: {refused}");
    }
    assert!(request_tool_result(last, "c_builtin").starts_with("# Skill review checklist"));
}

/// Waits until `skill_list` (of `args`) shows `needle`.
fn wait_for_list(env: &TestEnv, args: &[&str], needle: &str) -> String {
    flyto_tests::wait_until(
        &format!("skill_list to show {needle:?}"),
        flyto_tests::DEADLINE,
        || {
            let out = env.ctl(args);
            out.stdout.contains(needle).then_some(out.stdout)
        },
    )
}

fn rescans(daemon: &flyto_tests::Daemon) -> usize {
    daemon
        .log()
        .matches("skills: rescanned after a change")
        .count()
}

#[test]
fn skill_folders_are_watched_a_broken_edit_keeps_the_last_good_version_and_other_files_do_not_rescan()
 {
    // No periodic rescan during the test: what happens is the watcher's.
    let env = TestEnv::new("[skills]\nrescan_every = \"1h\"\n");
    let user = user_skills(&env);
    std::fs::create_dir_all(&user).unwrap();
    let daemon = env.start();

    // A new skill appears without skill_reload.
    write_skill(&user, "fresh", "Added while flytod runs.");
    wait_for_list(&env, &["skill_list"], "fresh  (user)");

    // A broken edit: the good version keeps serving, and the error shows.
    std::fs::write(user.join("fresh/SKILL.md"), "no frontmatter any more\n").unwrap();
    let all = wait_for_list(&env, &["skill_list", "--all"], "keeps serving");
    assert!(all.contains("fresh  (user)"), "{all}");
    let show = env.ctl(&["skill_show", "fresh"]);
    assert!(
        show.stdout.contains("The steps of fresh."),
        "{}",
        show.stdout
    );

    // Writes to other files in the watched folder start no rescan.
    let before = rescans(&daemon);
    for i in 0..1000 {
        std::fs::write(user.join("fresh/notes.txt"), format!("note {i}\n")).unwrap();
    }
    // Absence has no event to wait for: let the watcher's debounce window
    // (250 ms) pass twice over, so a rescan they caused would be its own.
    let quiet = std::time::Instant::now();
    flyto_tests::wait_until("two debounce windows", flyto_tests::DEADLINE, || {
        (quiet.elapsed() > std::time::Duration::from_millis(600)).then_some(())
    });
    assert_eq!(rescans(&daemon), before, "{}", daemon.log());
    // A skill change after them is the next rescan; it must be the only one.
    write_skill(&user, "marker", "Written after the notes.");
    wait_for_list(&env, &["skill_list"], "marker  (user)");
    flyto_tests::wait_until(
        "the marker's rescan in the log",
        flyto_tests::DEADLINE,
        || (rescans(&daemon) > before).then_some(()),
    );
    assert_eq!(rescans(&daemon), before + 1, "{}", daemon.log());
}

#[test]
fn sighup_applies_a_changed_skills_section_and_rescans() {
    let env = TestEnv::new("");
    let daemon = env.start();
    let dir = workdir(&env, "proj");
    let project = dir.join(".flyto/skills");
    write_skill(&project, "deploy", "Use when deploying this project.");
    let wd = dir.display().to_string();
    let args = ["skill_list", "--project", wd.as_str()];
    wait_for_list(&env, &args, "deploy");

    // Project skills switched off in the file: SIGHUP alone applies it.
    env.write_config("[skills]\nproject = false\n");
    daemon.signal(libc::SIGHUP);
    let gone = flyto_tests::wait_until("deploy to leave skill_list", flyto_tests::DEADLINE, || {
        let out = env.ctl(&args);
        (!out.stdout.contains("deploy")).then_some(out.stdout)
    });
    assert!(gone.contains("flyto-plans"), "{gone}");
    // And back on.
    env.write_config("[skills]\nproject = true\n");
    daemon.signal(libc::SIGHUP);
    wait_for_list(&env, &args, "deploy");
}

#[test]
fn skill_folders_made_after_the_start_are_watched_once_they_appear() {
    // No periodic rescan during the test: only the watcher can see them.
    let env = TestEnv::new("[skills]\nrescan_every = \"1h\"\n");
    let user = user_skills(&env);
    assert!(!user.exists());
    let _daemon = env.start();

    // The user's folder did not exist at the start.
    write_skill(&user, "late-one", "Made after flytod started.");
    wait_for_list(&env, &["skill_list"], "late-one  (user)");

    // Nor a project's, two levels deep, when a session's workdir was asked
    // about; `.flyto/` appears first, then its `skills/`.
    let dir = workdir(&env, "proj");
    let wd = dir.display().to_string();
    let args = ["skill_list", "--project", wd.as_str()];
    let before = env.ctl(&args);
    assert!(!before.stdout.contains("deploy"), "{before:?}");
    std::fs::create_dir(dir.join(".flyto")).unwrap();
    write_skill(
        &dir.join(".flyto/skills"),
        "deploy",
        "Deploys this project.",
    );
    wait_for_list(&env, &args, "deploy  (project");

    // A watched folder removed and made again is watched again.
    std::fs::remove_dir_all(&user).unwrap();
    let gone = flyto_tests::wait_until(
        "the removed folder's skill to leave skill_list",
        flyto_tests::DEADLINE,
        || {
            let out = env.ctl(&["skill_list"]);
            (!out.stdout.contains("late-one")).then_some(out.stdout)
        },
    );
    assert!(gone.contains("flyto-plans"), "{gone}");
    write_skill(&user, "late-two", "Made in the folder made again.");
    wait_for_list(&env, &["skill_list"], "late-two  (user)");
}
